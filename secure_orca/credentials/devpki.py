"""The one writer of the development PKI, for ``secure-orca certs`` and ``serve`` without TLS flags alike.

It fills in what is missing and never overwrites: a second run after a partial one (``serve`` wrote the PKI,
someone removed the kubeconfig) writes only the absent files, and a missing leaf is issued by the CA already in
the directory. What it cannot complete without replacing a file (a leaf whose CA is gone, a certificate without
its key) is refused, naming the files. Each file appears whole: written to an unpredictable O_EXCL temporary name
with its final mode, then linked into place (``os.link`` fails if the name exists, so a file planted meanwhile
is never replaced) or, with ``force``, renamed over the old one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from secure_orca import pki as mint
from secure_orca.pki import CA_CN, DEFAULT_SERVER, ISSUER, Blob, DevPKI, Issued


class IncompletePKI(FileExistsError):
    """The directory holds part of a group that cannot be completed without replacing a file."""


def _pair_state(dev: DevPKI, role: str, present: set[Path]) -> bool:
    """Whether ``role``'s certificate and key are both present (neither: False; one alone: refused)."""
    cert, key = dev.cert(role), dev.key(role)
    if (cert in present) != (key in present):
        have, lack = (cert, key) if cert in present else (key, cert)
        raise IncompletePKI(f"{dev.root} holds {have.name} without {lack.name}; remove it or use --force")
    return cert in present


def plan(root: Path, server: str = DEFAULT_SERVER, force: bool = False) -> dict[Path, Blob]:
    """The files to write so that ``root`` holds a whole development PKI (every file with ``force``)."""
    dev = DevPKI(root)
    present = set() if force else {p for p in dev.all_paths() if p.exists()}
    out: dict[Path, Blob] = {}
    cas: dict[str, Issued] = {}
    for role, cn in CA_CN.items():
        if not _pair_state(dev, role, present):
            cas[role] = mint.make_ca(cn)
            out[dev.cert(role)], out[dev.key(role)] = mint.pair(cas[role])
    for leaf, ca_role in ISSUER.items():
        if _pair_state(dev, leaf, present):
            if ca_role in cas:
                raise IncompletePKI(
                    f"{dev.root} holds {dev.cert(leaf).name} but not its CA {dev.cert(ca_role).name}; "
                    "remove it or use --force"
                )
            continue
        ca = cas.get(ca_role) or mint.load_issued(dev.cert(ca_role).read_bytes(), dev.key(ca_role).read_bytes())
        out[dev.cert(leaf)], out[dev.key(leaf)] = mint.pair(mint.issue_leaf(leaf, ca))
    if dev.secret not in present:
        out[dev.secret] = Blob((mint.new_secret() + "\n").encode())
    if dev.tokens not in present or dev.kubeconfig not in present:
        token = None
        if dev.tokens in present:
            token = mint.token_of(dev.tokens.read_bytes())
        elif dev.kubeconfig in present:
            token = mint.kubeconfig_token(dev.kubeconfig.read_bytes())
        token = token or mint.new_token()
        if dev.tokens not in present:
            out[dev.tokens] = mint.tokens_csv(token)
        if dev.kubeconfig not in present:
            out[dev.kubeconfig] = mint.kubeconfig_blob(root, server, token)
    return out


def write(files: dict[Path, Blob], replace: bool = False) -> list[Path]:
    """Write every blob: all staged first, then each linked into place (refusing an existing name) or, with
    ``replace``, renamed over it. The paths written, in order."""
    staged: dict[Path, str] = {}
    done: list[Path] = []
    try:
        for path, blob in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            # mkstemp: an unpredictable name opened with O_EXCL (never a planted file or symlink), mode 0600
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            staged[path] = tmp
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), blob.mode)
                handle.write(blob.data)
        for path, tmp in staged.items():
            if replace:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)  # FileExistsError if the name appeared meanwhile: never overwritten
            done.append(path)
    finally:
        for tmp in staged.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return done


def ensure(root: Path, server: str = DEFAULT_SERVER, force: bool = False) -> list[Path]:
    """Complete the development PKI in ``root`` (replace all of it with ``force``); the files written."""
    return write(plan(root, server, force), replace=force)


def generate(root: Path, force: bool = False, server: str = DEFAULT_SERVER) -> DevPKI:
    """A new development PKI in ``root``, refusing a directory that holds any of its files (unless ``force``)."""
    dev = DevPKI(root)
    existing = [p.name for p in dev.all_paths() if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{root} already holds {', '.join(existing)} (use --force to replace)")
    ensure(root, server, force)
    return dev


def missing(dev: DevPKI) -> list[Path]:
    """The files of the development PKI that ``dev.root`` lacks."""
    return [p for p in dev.all_paths() if not p.exists()]
