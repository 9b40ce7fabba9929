"""Connection rotation: the graceful close of an HTTP/2 connection as an explicit state machine (RFC 9113
section 6.8), and the notice that tells a connection's long-lived streams it rotates. Pure: the server
(``serve.GatewayTCPServer``) performs the actions."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

MAX_STREAM_ID = 2**31 - 1
GOAWAY_GRACE = 1.0  # seconds between the GOAWAY notice and the real one: well over a round trip, as Go's server
DRAIN_LIMIT = 60.0  # seconds accepted streams may take to finish after the real GOAWAY
ROTATION_KEY = "secure_orca.rotation"  # scope["extensions"] key of the connection's Rotation


class Rotation:
    """Tells a connection's long-lived streams (out-of-band load reports) that it rotates (GOAWAY): they end
    with a status instead of holding the drain until it cuts them. ``started`` for a stream opened after."""

    def __init__(self) -> None:
        self.started = False
        self.listeners: set[Callable[[], None]] = set()

    def start(self) -> None:
        self.started = True
        for listener in list(self.listeners):
            listener()


class Phase(Enum):
    """Where a connection is in its graceful close (RFC 9113 section 6.8)."""

    OPEN = "open"
    NOTICE_SENT = "notice-sent"  # GOAWAY with last stream id 2^31-1: no new streams, please
    LAST_STREAM_SENT = "last-stream-sent"  # GOAWAY with the real last stream id; later streams refused
    CLOSED = "closed"  # final GOAWAY sent once every accepted stream was answered, or the peer closed first


class Step(Enum):
    ROTATE = "rotate"  # the request limit or --goaway-chance asked for a new connection
    GRACE_ELAPSED = "grace-elapsed"  # GOAWAY_GRACE after the notice: streams on their way have arrived
    DRAINED = "drained"  # every accepted stream's last frame is on the wire (or DRAIN_LIMIT passed)
    PEER_CLOSED = "peer-closed"  # the client or the transport ended the connection


# Every allowed transition, in one place; any other (phase, step) pair is ignored.
TRANSITIONS: dict[tuple[Phase, Step], Phase] = {
    (Phase.OPEN, Step.ROTATE): Phase.NOTICE_SENT,
    (Phase.NOTICE_SENT, Step.GRACE_ELAPSED): Phase.LAST_STREAM_SENT,
    (Phase.LAST_STREAM_SENT, Step.DRAINED): Phase.CLOSED,
    (Phase.OPEN, Step.PEER_CLOSED): Phase.CLOSED,
    (Phase.NOTICE_SENT, Step.PEER_CLOSED): Phase.CLOSED,
    (Phase.LAST_STREAM_SENT, Step.PEER_CLOSED): Phase.CLOSED,
}


class GracefulClose:
    """The graceful-close state machine of one HTTP/2 connection."""

    def __init__(self) -> None:
        self.phase = Phase.OPEN

    def advance(self, step: Step) -> bool:
        """Take ``step`` if the table allows it from the current phase; returns whether it was taken."""
        following = TRANSITIONS.get((self.phase, step))
        if following is None:
            return False
        self.phase = following
        return True
