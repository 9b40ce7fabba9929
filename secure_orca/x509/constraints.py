"""Go's name constraints (``crypto/x509`` Go 1.26.0, ``constraints.go`` and ``verify.go``'s
``checkChainConstraints``), mirrored (pure): each certificate's SANs against the constraints of every CA above it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from secure_orca.x509.der import Malformed
from secure_orca.x509.parse import Extensions, GoCertificate, NameConstraints, domain_name_valid, is_ip, mailbox
from secure_orca.x509.url import uri_host


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


def _dns_has_suffix(constraint: str, name: str) -> bool:
    """Go's dnsHasSuffix: ``name`` ends with ``constraint`` (ASCII case-insensitive) at a label boundary."""
    if len(constraint) > len(name) or not name.lower().endswith(constraint.lower()):
        return False
    return constraint.startswith(".") or len(name) == len(constraint) or name[-len(constraint) - 1] == "."


def _dns_match(constraints: list[str], name: str, permitted: bool) -> bool:
    if "" in constraints or any(_dns_has_suffix(c, name) for c in constraints):
        return True
    if not permitted and name.startswith("*") and "." in name:
        parent = name[name.find(".") :]
        return any("." in c and c[c.find(".") :] == parent for c in constraints)
    return False


def _email_match(constraints: list[str], address: str, permitted: bool) -> bool:
    local, domain = mailbox(address)
    domains = []
    for constraint in constraints:
        if "@" not in constraint:
            domains.append(constraint)
            continue
        c_local, c_domain = mailbox(constraint)
        if c_local == local and c_domain.lower() == domain.lower():
            return True
    return bool(domains) and _dns_match(domains, domain, permitted)


def _allowed(items: list[str], constraints: NameConstraints, kind: str) -> bool:
    for side, permitted in ((constraints.permitted, True), (constraints.excluded, False)):
        listed: list[str] = getattr(side, kind)
        if not listed:
            continue
        match = _email_match if kind == "email" else _dns_match
        if any(match(listed, item, permitted) != permitted for item in items):
            return False
    return True


def _ips_allowed(ips: Sequence[bytes], constraints: NameConstraints) -> bool:
    for side, permitted in ((constraints.permitted, True), (constraints.excluded, False)):
        if side.ip and any(any(ipaddress.ip_address(ip) in net for net in side.ip) != permitted for ip in ips):
            return False
    return True


def _names_allowed(ext: Extensions, constraints: NameConstraints) -> bool:
    """One certificate's SANs against one CA's constraints; a name Go cannot read refuses the chain."""
    hosts = [_constraint_host(uri) for uri in ext.uris]
    domains = []
    for address in ext.emails:
        try:
            domains.append(mailbox(address)[1])
        except Malformed:
            return False
    readable = [*ext.dns_names, *domains]
    if not all(domain_name_valid(n, False) for n in readable) or not all(
        h is not None and domain_name_valid(h, False) for h in hosts
    ):
        return False
    return (
        _ips_allowed(ext.ips, constraints)
        and _allowed(list(ext.dns_names), constraints, "dns")
        and _allowed([h for h in hosts if h is not None], constraints, "uri")
        and _allowed(list(ext.emails), constraints, "email")
    )


def constraints_hold(chain: Sequence[GoCertificate]) -> bool:
    """Go's checkChainConstraints: each certificate's SANs against the constraints of every CA above it."""
    for index, cert in enumerate(chain):
        if cert.ext.san is None:
            continue
        for above in chain[index + 1 :]:
            constraints = above.ext.name_constraints
            if constraints is not None and not _names_allowed(cert.ext, constraints):
                return False
    return True
