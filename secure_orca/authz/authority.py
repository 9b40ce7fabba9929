"""The trust in force: the load-report policy and the front-proxy and load-reader chain caches, replaced whole
when credentials are reloaded (pure: built from parsed verifiers; ``server.trust`` builds it from the files)."""

from __future__ import annotations

from dataclasses import dataclass

from secure_orca.authz.policy import Policy
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import ChainVerifier


@dataclass(frozen=True)
class Authority:
    """The policy and the front-proxy trust in force; replaced whole when credentials are reloaded."""

    policy: Policy
    chains: ChainCache | None = None
    readers: ChainCache | None = None  # the load-reader trust (option 2b): reports only, never an identity

    @classmethod
    def build(cls, policy: Policy, verifier: ChainVerifier | None, reader: ChainVerifier | None = None) -> Authority:
        return cls(
            policy,
            ChainCache(verifier) if verifier is not None else None,
            ChainCache(reader) if reader is not None else None,
        )
