"""The front proxy's identity headers (kube's ``request/headerrequest``), believed only on a connection whose
certificate passed the front-proxy verification (requestheader CA, clientAuth, allowed names).

- username: the first value of the first listed username header that has a non-empty one;
  none: not this authenticator's request (the chain goes on), as in kube;
- uid: the same rule over the uid headers;
- groups: every non-empty value of every group header, in the order listed;
- extra: every header starting with an extra prefix (case-insensitively); the key is the rest of the name,
  lowercased, then URL-path-unescaped (kept as sent when the escape is malformed); values in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from secure_orca.authn.authenticator import NOT_MINE, Headers, Outcome, Request, failure, text
from secure_orca.authn.user import UserInfo
from secure_orca.orca.headers import EXTRA_PREFIXES, GROUP_HEADERS, UID_HEADERS, USERNAME_HEADERS

_PATH_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class RequestHeaderConfig:
    """The four header lists (kube's --requestheader-* flags); defaults are the names the aggregator sends."""

    username_headers: tuple[str, ...] = USERNAME_HEADERS
    uid_headers: tuple[str, ...] = UID_HEADERS
    group_headers: tuple[str, ...] = GROUP_HEADERS
    extra_prefixes: tuple[str, ...] = EXTRA_PREFIXES

    def names(self) -> frozenset[bytes]:
        """Every exact identity header name, lowercased."""
        listed = (*self.username_headers, *self.uid_headers, *self.group_headers)
        return frozenset(name.lower().encode("latin-1") for name in listed)

    def prefixes(self) -> tuple[bytes, ...]:
        return tuple(prefix.lower().encode("latin-1") for prefix in self.extra_prefixes)


# What kube-apiserver always clears after authentication, whatever the flags say.
STANDARD = RequestHeaderConfig()


def canonical(name: bytes) -> bytes:
    """A header name in the one form names are matched in for stripping: lowercase, ``_`` as ``-``."""
    return name.lower().replace(b"_", b"-")


class IdentityHeaders:
    """Every identity header name and prefix of some configs, to strip them from a request: kube's
    ClearAuthenticationHeaders over each config (kubernetes/kubernetes e9866d2794675aa8dc82ba2637ae45f9f3a27dff,
    the NCC-E003660-YVU fix, staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go), plus, beyond
    kube, one canonical form for configured and received names alike (case, and ``_`` as ``-``: some backends
    and CGI-style gateways fold both into one variable). Believing stays kube's: exact names, any case."""

    def __init__(self, configs: Iterable[RequestHeaderConfig]) -> None:
        names: set[bytes] = set()
        prefixes: list[bytes] = []
        for config in configs:
            names |= {canonical(name) for name in config.names()}
            prefixes += [canonical(prefix) for prefix in config.prefixes()]
        self.names = frozenset(names)
        self.prefixes = tuple(prefixes)

    def matches(self, name: bytes) -> bool:
        folded = canonical(name)
        return folded in self.names or folded.startswith(self.prefixes)

    def strip(self, headers: Headers) -> tuple[list[tuple[bytes, bytes]], int]:
        """``headers`` without identity headers, and how many were removed."""
        kept = [(n, v) for n, v in headers if not self.matches(n)]
        return kept, len(headers) - len(kept)


def _first_value(request: Request, names: tuple[str, ...]) -> str:
    for name in names:
        values = request.values(name)
        if values and values[0]:
            return text(values[0])
    return ""


def unescape_extra_key(key: str) -> str:
    """Go's url.PathUnescape of an extra key; a malformed escape leaves the key as it is."""
    if _PATH_ESCAPE.search(key):
        return key
    return unquote_to_bytes(key).decode("utf-8", "replace")


def _extra(request: Request, prefixes: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    extra: dict[str, tuple[str, ...]] = {}
    for prefix in prefixes:
        wanted = prefix.lower().encode("latin-1")
        for name, value in request.headers:
            lowered = name.lower()
            if lowered.startswith(wanted):
                key = unescape_extra_key(lowered[len(wanted) :].decode("latin-1"))
                extra[key] = (*extra.get(key, ()), text(value))
    return extra


def authenticate(config: RequestHeaderConfig, request: Request) -> Outcome:
    """The identity the front proxy asserts, or NOT_MINE / an error as kube's Verifier returns them."""
    if request.leaf is None:
        return NOT_MINE
    if not request.front_proxy.holds_at(request.now):
        return Outcome(error=f"requestheader: {failure(request.front_proxy)}")
    name = _first_value(request, config.username_headers)
    if not name:
        return NOT_MINE
    groups = tuple(text(value) for header in config.group_headers for value in request.values(header) if value)
    return Outcome(
        UserInfo(name, _first_value(request, config.uid_headers), groups, _extra(request, config.extra_prefixes))
    )


_HEADER_KEY_CHARS = frozenset(b"!#$&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def escape_extra_key(key: str) -> str:
    """client-go's headerKeyEscape: every byte that cannot be in a header name, and ``%``, as ``%XX``."""
    return "".join(chr(b) if b in _HEADER_KEY_CHARS else f"%{b:02X}" for b in key.encode("utf-8"))


def upstream_headers(user: UserInfo, config: RequestHeaderConfig = STANDARD) -> list[tuple[bytes, bytes]]:
    """The headers kube's aggregator sends upstream for an authenticated user (client-go's
    SetAuthProxyHeaders): user, uid when set, one header per group, one per extra value."""
    user_header, uid_header = config.username_headers[0], config.uid_headers[0]
    group_header, extra_prefix = config.group_headers[0], config.extra_prefixes[0]
    headers = [(user_header, user.name)]
    if user.uid:
        headers.append((uid_header, user.uid))
    headers += [(group_header, group) for group in user.groups]
    headers += [(extra_prefix + escape_extra_key(k), v) for k, values in user.extra.items() for v in values]
    return [(name.lower().encode("latin-1"), value.encode("utf-8")) for name, value in headers]
