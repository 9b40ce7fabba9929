"""Go's name constraints (``crypto/x509`` Go 1.26.0, ``constraints.go`` and ``verify.go``'s
``checkChainConstraints``), mirrored (pure): each certificate's SANs against the constraints of every CA above it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import TypeVar

from secure_orca.x509.der import Malformed
from secure_orca.x509.parse import (
    Extensions,
    GoCertificate,
    IPConstraint,
    NameConstraints,
    domain_name_valid,
    is_ip,
    mailbox,
)
from secure_orca.x509.url import uri_host

_T = TypeVar("_T")
_V = TypeVar("_V")


def _constraint_host(uri: str) -> str | None:
    """Go's parseURIs: the lower-case host without port, or None where constraints cannot be checked."""
    host = uri_host(uri).lower()
    if not host:
        return None
    if ":" in host and not host.endswith("]"):
        host = host.rsplit(":", 1)[0]
        if ":" in host:
            return None
    if is_ip(host) or (host.startswith("[") and host.endswith("]")):
        return None
    return host


# --- Go 1.26's constraints.go: each side of a CA's constraints is a sorted set, pruned of entries that an earlier
# entry covers, and a name is looked up by binary search: an exact entry, or the one just below it, must match.
# Where constraints overlap in ways the sort does not expect (unmasked IP constraints, for one), this can differ
# from "any constraint matches"; kube-apiserver runs this code, so it is what we copy.


class _GoPanic(Exception):
    """Where Go 1.26's code indexes an empty name (an excluded DNS or email-domain constraint against an empty
    dNSName or mailbox domain) and panics; kube-apiserver's handler recovers and the request fails."""


def _sorted_set(items: Sequence[_T], key: Callable[[_T], bytes], subset: Callable[[_T, _T], bool]) -> list[_T]:
    """nameConstraintsSet.sortAndPrune: sorted by ``key``; an entry covered by the last one kept is dropped."""
    kept: list[_T] = []
    for item in sorted(items, key=key):
        if not kept or not subset(kept[-1], item):
            kept.append(item)
    return kept


def _search(items: Sequence[_T], keys: Sequence[bytes], target: bytes, match: Callable[[_T], bool]) -> bool:
    """nameConstraintsSet.search: the entry equal to ``target``, else the one below its insertion point (the first
    one when there is none below) must match."""
    if not items:
        return False
    index = bisect.bisect_left(keys, target)
    if index < len(keys) and keys[index] == target:
        return True
    return match(items[index - 1 if index else 0])


def _to4(ip: bytes) -> bytes | None:
    """net.IP.To4."""
    if len(ip) == 4:
        return ip
    if len(ip) == 16 and ip[:12] == bytes(10) + b"\xff\xff":
        return ip[12:]
    return None


def _ip_contains(constraint: IPConstraint, target: bytes) -> bool:
    """net.IPNet.Contains: both sides as IPv4 where they can be, the mask cut to match, then masked compare."""
    address, mask = constraint
    network = _to4(address) or (address if len(address) == 16 else b"")
    if not network or (len(mask) == 4 and len(network) != 4):
        return False
    if len(mask) == 16 and len(network) == 4:
        mask = mask[12:]
    ip = _to4(target) or target
    return len(ip) == len(network) and all(a & m == b & m for a, b, m in zip(network, ip, mask, strict=True))


def _ip_subset(a: IPConstraint, b: IPConstraint) -> bool:
    """ipNetworkSubset: ``a`` holds ``b``'s address and ``b``'s broadcast address."""
    broadcast = bytes(x | (~m & 0xFF) for x, m in zip(b[0], b[1], strict=True))
    return _ip_contains(a, b[0]) and _ip_contains(a, broadcast)


def _ip_order(constraint: IPConstraint) -> bytes:
    """ipNetworkCompare as a sort key: the address, then the mask (both of one length within a set)."""
    return constraint[0] + constraint[1]


class _IPs:
    """ipConstraints: one set per address length (4 or 16 bytes, as written)."""

    def __init__(self, constraints: Sequence[IPConstraint]) -> None:
        self.sets = {
            size: _sorted_set([c for c in constraints if (len(c[0]) == 4) == (size == 4)], _ip_order, _ip_subset)
            for size in (4, 16)
        }

    def query(self, ip: bytes) -> bool:
        entries = self.sets[4 if len(ip) == 4 else 16]
        return _search(entries, [c[0] for c in entries], ip, lambda c: _ip_contains(c, ip))


_STABLE_SORT = 12  # slices' pdqsort sorts up to this many entries by insertion (stable)
_FOLD = bytes(0 if c == 0x2E else (c + 32 if 0x41 <= c <= 0x5A else c) for c in range(256))


def _dns_key(name: str) -> bytes:
    """dnsCompare as a sort key: the name read from its end, ASCII case folded, "." before every other byte."""
    return name.encode("latin-1")[::-1].translate(_FOLD)


def _dns_has_suffix(constraint: str, name: str) -> bool:
    """dnsHasSuffix: ``name`` ends with ``constraint`` (ASCII case-insensitive) at a label boundary, or the
    constraint starts with "."."""
    if len(constraint) > len(name) or not name.lower().endswith(constraint.lower()):
        return False
    return constraint[0] == "." or len(name) == len(constraint) or name[-len(constraint) - 1] == "."


def _trim_first_label(name: str) -> str:
    return name[name.index(".") :] if "." in name else ""


class _Names:
    """dnsConstraints (also for URI hosts and email domains)."""

    def __init__(self, constraints: Sequence[str], permitted: bool) -> None:
        self.all = "" in constraints
        self.permitted = permitted
        self.entries = [] if self.all else _sorted_set(constraints, _dns_key, _dns_has_suffix)
        self.keys = [_dns_key(c) for c in self.entries]
        # Go's slices.SortFunc is stable up to 12 entries (an insertion sort); past that, which spelling of names
        # equal but for case its pdqsort keeps is not the first written: any spelling of a kept name then answers
        # a wildcard (a refusal where Go might grant, never a grant where it refuses)
        kept = set(self.keys)
        spellings = (
            self.entries if len(constraints) <= _STABLE_SORT else [c for c in constraints if _dns_key(c) in kept]
        )
        parents = () if permitted else (_trim_first_label(c) for c in spellings)
        self.parents = {p for p in parents if p}

    def query(self, name: str) -> bool:
        if self.all or _search(self.entries, self.keys, _dns_key(name), lambda c: _dns_has_suffix(c, name)):
            return True
        if self.permitted:
            return False
        if not name:
            raise _GoPanic
        return name[0] == "*" and _trim_first_label(name) in self.parents


class _Emails:
    """emailConstraints: whole mailboxes by local part (a later constraint with the same local part replaces an
    earlier one), other constraints as domains."""

    def __init__(self, constraints: Sequence[str], permitted: bool) -> None:
        self.mailboxes: dict[str, str] = {}
        domains = [c for c in constraints if "@" not in c]
        for constraint in constraints:
            if "@" in constraint:  # read when the certificate was parsed: cannot fail here
                local, domain = mailbox(constraint)
                self.mailboxes[local] = domain
        self.domains = _Names(domains, permitted) if domains else None

    def query(self, local: str, domain: str) -> bool:
        known = self.mailboxes.get(local)
        if known is not None and known.lower() == domain:
            return True
        return self.domains is not None and self.domains.query(domain)


def _side_allows(query: Callable[[_V], bool] | None, items: Sequence[_V], permitted: bool) -> bool:
    return query is None or all(query(item) == permitted for item in items)


def _names_allowed(ext: Extensions, constraints: NameConstraints) -> bool:
    """One certificate's SANs against one CA's constraints (chainConstraints.check); a name Go cannot read
    refuses the chain."""
    hosts = [_constraint_host(uri) for uri in ext.uris]
    mailboxes = []
    for address in ext.emails:
        try:
            local, domain = mailbox(address)
        except Malformed:
            return False
        mailboxes.append((local, domain.lower()))
    readable = [*ext.dns_names, *(domain for _, domain in mailboxes)]
    if not all(domain_name_valid(n, False) for n in readable) or not all(
        h is not None and domain_name_valid(h, False) for h in hosts
    ):
        return False
    for side, permitted in ((constraints.permitted, True), (constraints.excluded, False)):
        ips = _IPs(side.ip).query if side.ip else None
        dns = _Names(side.dns, permitted).query if side.dns else None
        uri = _Names(side.uri, permitted).query if side.uri else None
        emails = _Emails(side.email, permitted) if side.email else None
        if not (
            _side_allows(ips, ext.ips, permitted)
            and _side_allows(dns, ext.dns_names, permitted)
            and _side_allows(uri, [h for h in hosts if h is not None], permitted)
            and (emails is None or all(emails.query(*m) == permitted for m in mailboxes))
        ):
            return False
    return True


def constraints_hold(chain: Sequence[GoCertificate]) -> bool:
    """Go's checkChainConstraints: each certificate's SANs against the constraints of every CA above it."""
    for index, cert in enumerate(chain):
        if cert.ext.san is None:
            continue
        for above in chain[index + 1 :]:
            constraints = above.ext.name_constraints
            if constraints is None:
                continue
            try:
                if not _names_allowed(cert.ext, constraints):
                    return False
            except _GoPanic:
                return False
    return True
