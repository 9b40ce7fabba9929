"""The validated configuration of `serve`, built from kube-apiserver-style flags alone (the options of each
concern, ``secure_orca.server.options``): it names the credential files (``secure_orca.credentials`` reads them),
and neither reads nor writes a file, nor opens a socket. The development PKI, when used, is written beforehand
by its one writer (``secure_orca.credentials.devpki``, called by cli.serve) and passed in as paths."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from secure_orca import credential_flags as flags
from secure_orca import pki
from secure_orca.authz.policy import Mode
from secure_orca.credentials.loader import CredentialFiles
from secure_orca.errors import UsageError
from secure_orca.server.options import audit, authentication, backend, load_metrics, oob, serving
from secure_orca.server.options.audit import AuditConfig
from secure_orca.server.options.authentication import Authentication
from secure_orca.server.options.backend import BackendConfig
from secure_orca.server.options.load_metrics import GATE, LoadMetricsConfig
from secure_orca.server.options.oob import CERTIFICATE_MODES, OobConfig
from secure_orca.server.options.serving import ServingConfig

__all__ = ["CERTIFICATE_MODES", "GATE", "OobConfig", "ServeConfig", "build_config", "unmatchable_names"]


@dataclass
class ServeConfig:
    """Everything ``serve`` needs, validated, by concern."""

    serving: ServingConfig
    authentication: Authentication
    load_metrics: LoadMetricsConfig
    oob: OobConfig | None = None  # StreamCoreMetrics on the serving port (docs/out-of-band.md); None: off
    audit: AuditConfig = field(default_factory=AuditConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    notes: list[str] = field(default_factory=list)

    @property
    def files(self) -> CredentialFiles:
        """Every credential file the concerns name, for the one reader (credentials.loader)."""
        auth, lm = self.authentication.files, self.load_metrics
        return CredentialFiles(
            cert=self.serving.cert,
            key=self.serving.key,
            client_ca=auth.client_ca,
            requestheader_ca=auth.requestheader_ca,
            allowed_names_file=auth.allowed_names_file,
            secret_file=lm.secret_file,
            load_reader_ca=lm.load_reader_ca,
            token_file=auth.token_file,
            proxy_cert=self.backend.proxy_cert,
            proxy_key=self.backend.proxy_key,
            allowed_names=auth.allowed_names,
            load_reader_names=lm.load_reader_names,
        )


def _same(a: Path | None, b: Path) -> bool:
    return a is not None and a.absolute() == b.absolute()


def unmatchable_names(files: CredentialFiles, dev: pki.DevPKI) -> list[str]:
    """Warnings for allowed names that no certificate of the configured CA carries, where that can be known: the
    CA is the development PKI's, which issued exactly one client certificate (front-proxy-client, load-reader).
    For any other CA nothing is known (a CA may sign any name), so nothing is said."""
    out = []
    checks = (
        (
            files.requestheader_ca,
            dev.cert("front_proxy_ca"),
            files.allowed_names,
            pki.FRONT_PROXY_CN,
            flags.ALLOWED_NAMES,
        ),
        (
            files.load_reader_ca,
            dev.cert("load_reader_ca"),
            files.load_reader_names,
            pki.LOAD_READER_CN,
            flags.LOAD_READER_NAMES,
        ),
    )
    for ca, dev_ca, names, issued, flag in checks:
        if not _same(ca, dev_ca):
            continue
        for name in names:
            if name != issued:
                out.append(
                    f"WARNING: {flag}: {name!r} can never match: the development PKI's CA {dev_ca} issued one "
                    f"client certificate, CN={issued}"
                )
    return out


def build_config(args: argparse.Namespace, dev: pki.DevPKI | None = None) -> ServeConfig:
    """Validate the flags of every concern; raise UsageError naming each flag at fault. ``dev``: the development
    PKI (already written) whose files fill in what the flags leave out. No file is read or written here."""
    if dev is None and serving.uses_dev_pki(args):
        raise UsageError(f"{flags.TLS_CERT} and {flags.TLS_KEY}: no serving certificate (and no development PKI)")
    problems = [
        *serving.validate(args),
        *authentication.validate(args),
        *load_metrics.validate(args, dev),
        *oob.validate(args),
        *audit.validate(args),
        *backend.validate(args),
    ]
    if problems:
        raise UsageError("; ".join(problems))
    notes = [f"no TLS flags: using the development PKI in {dev.root}/ with load metrics on"] if dev else []
    metrics, metric_notes = load_metrics.to_config(args, dev)
    config = ServeConfig(
        serving=serving.to_config(args, dev),
        authentication=authentication.to_config(args, dev),
        load_metrics=metrics,
        oob=oob.to_config(args, metrics),
        audit=audit.to_config(args),
        backend=backend.to_config(args),
        notes=notes + metric_notes,
    )
    config.notes += unmatchable_names(config.files, dev or pki.DevPKI(args.certs_dir))
    if Mode.LOAD_READER not in metrics.modes and args.endpoint_load_metrics_allowed_names:
        config.notes.append(f"{flags.LOAD_READER_NAMES} is given but mode load-reader is not on; it allows nothing")
    return config
