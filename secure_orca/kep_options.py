"""KEP-6315's options as one noun (pure data): each ``Option`` carries the replica's modes, whether a client
certificate alone entitles it, the credential flags the replica needs, and what the load balancer sends upstream.
Its name is the value of ``--endpoint-load-metrics-auth`` (option 4's: the evaluation's ``out-of-band``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from secure_orca import credential_flags as flags


class Mode(StrEnum):
    """The KEP's options as ``--endpoint-load-metrics-auth`` names them (2b: the load-reader credential)."""

    FRONT_PROXY = "front-proxy"  # option 2
    SHARED_SECRET = "shared-secret"  # option 3
    HEADER_ONLY = "header-only"  # option 1
    LOAD_READER = "load-reader"  # option 2b


# The modes a client certificate entitles: the only ones the out-of-band stream is served in.
CERTIFICATE_MODES = frozenset({Mode.FRONT_PROXY, Mode.LOAD_READER})

# The credential flags a replica needs per mode (the names kube-apiserver gives them).
MODE_FLAGS: dict[Mode, tuple[str, ...]] = {
    Mode.FRONT_PROXY: (flags.REQUESTHEADER_CA, flags.ALLOWED_NAMES),
    Mode.SHARED_SECRET: (flags.SECRET,),
    Mode.HEADER_ONLY: (),
    Mode.LOAD_READER: (flags.LOAD_READER_CA, flags.LOAD_READER_NAMES),
}


@dataclass(frozen=True)
class Option:
    """One option: its name, the replica's modes (in ``Mode`` order) and whether its reports come out of band."""

    name: str
    modes: tuple[Mode, ...]
    out_of_band: bool = False  # no opt-in: the reports come on the StreamCoreMetrics stream

    @property
    def auth(self) -> str:
        """The replica's ``--endpoint-load-metrics-auth``."""
        return ",".join(self.modes)

    @property
    def certificate(self) -> Mode | None:
        """The client certificate the load balancer presents upstream (front-proxy's when both), or None."""
        return next((m for m in (Mode.FRONT_PROXY, Mode.LOAD_READER) if m in self.modes), None)

    @property
    def certificate_entitles(self) -> bool:
        """A client certificate alone entitles it, which the out-of-band stream requires."""
        return set(self.modes) <= CERTIFICATE_MODES

    @property
    def secret(self) -> bool:
        """The load balancer sends the shared secret in its opt-in."""
        return Mode.SHARED_SECRET in self.modes

    @property
    def header_only(self) -> bool:
        """The load balancer's bare opt-in is all that entitles (option 1)."""
        return self.modes == (Mode.HEADER_ONLY,)

    @property
    def serve_flags(self) -> tuple[str, ...]:
        """The credential flags the replica needs, in ``Mode`` order."""
        return serve_flags(self.modes)


def modes_of(auth: str) -> tuple[Mode, ...]:
    """The modes an ``--endpoint-load-metrics-auth`` value names, in ``Mode`` order; a name that is no mode is
    left out (serve and envoy-config refuse it)."""
    named = set(auth.split(","))
    return tuple(mode for mode in Mode if mode in named)


def serve_flags(modes: tuple[Mode, ...]) -> tuple[str, ...]:
    """The credential flags a replica in ``modes`` needs."""
    return tuple(flag for mode in modes for flag in MODE_FLAGS[mode])


HEADER_ONLY = Option("header-only", (Mode.HEADER_ONLY,))
FRONT_PROXY = Option("front-proxy", (Mode.FRONT_PROXY,))
LOAD_READER = Option("load-reader", (Mode.LOAD_READER,))
SHARED_SECRET = Option("shared-secret", (Mode.SHARED_SECRET,))
EITHER = Option("front-proxy,shared-secret", (Mode.FRONT_PROXY, Mode.SHARED_SECRET))
OUT_OF_BAND = Option("out-of-band", (Mode.LOAD_READER,), out_of_band=True)
OPTIONS = (HEADER_ONLY, FRONT_PROXY, LOAD_READER, SHARED_SECRET, EITHER, OUT_OF_BAND)
BY_NAME = {o.name: o for o in OPTIONS}


def option_named(name: str) -> Option:
    """The option ``name`` names; KeyError for a name that is none."""
    return BY_NAME[name]
