"""Who a request is (kube's ``authentication/user``): name, uid, groups, extra; and the well-known names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

ANONYMOUS = "system:anonymous"
ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
SYSTEM_MASTERS = "system:masters"
CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"


@dataclass(frozen=True)
class UserInfo:
    """kube's ``user.DefaultInfo``; ``extra`` maps a key to its values in the order they were found."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def with_group(self, group: str) -> UserInfo:
        return UserInfo(self.name, self.uid, (*self.groups, group), self.extra)
