"""Measure the HPACK cost of ORCA load reports on real HTTP/2 connections (``secure-orca hpack measure``).

For each per-connection rate, ``connections`` workers send requests WITH the opt-in (the load balancer's
credentials: front-proxy client certificate and/or ``TEXT; secret=...``) and as many WITHOUT it, at the same
time, to the same server. Each worker is one thread with a blocking TLS socket (ALPN h2) driving an h2 client
connection through :class:`~secure_orca.h2client.H2Loop`, which shows every frame the server sends, whole, to
:class:`HeaderCapture`, so the exact header block of every response (HEADERS payload less padding and
priority, plus CONTINUATION payloads) goes to :func:`secure_orca.hpackcost.walk.attribute_connection`.

Two wire figures of the report's cost: ``marginal`` (the walker's attribution: the same header lists replayed
with and without the report, eviction cost included) and ``ab_marginal`` (mean header block of opted-in
responses minus that of the other connections: no replay at all). ``model`` holds
:func:`secure_orca.hpackcost.model.simulate` for the same rate and precision, sampling at the interval between
new report values the wire saw (:func:`model_interval`).

A server that closes a connection gracefully (GOAWAY after --max-requests-per-connection) is followed to a
new connection; refused streams are sent again there. Each connection is attributed on its own (its own
dynamic table); the warm-up left out of steady-state figures is that of a worker's first connection.
"""

from __future__ import annotations

import math
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

import h2.connection
import h2.events
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import ContinuationFrame, Frame, GoAwayFrame, HeadersFrame

from secure_orca.errors import SecureOrcaError
from secure_orca.h2client import FRAME_HEADER, H2Loop
from secure_orca.hpackcost.model import WARMUP_CAP, Scenario, simulate
from secure_orca.hpackcost.results import WireResult
from secure_orca.hpackcost.walk import (
    ORCA_FIELDS,
    BlockCost,
    ConnectionAttribution,
    FieldRecord,
    attribute_connection,
    replay,
)
from secure_orca.orca.headers import OPTIN as OPT_IN
from secure_orca.orca.headers import REPORT as HEADER
from secure_orca.orca.headers import REPORT_BIN as HEADER_BIN
from secure_orca.orca.headers import USERNAME_HEADERS
from secure_orca.orca.optin import header_value
from secure_orca.orca.report import DEFAULT_DECIMALS, encode_bin, parse_text

USER_AGENT = b"secure-orca-hpack/0.1"
MAX_IN_FLIGHT = 64  # below hypercorn's 100 concurrent streams
MAX_CONNECTIONS_PER_WORKER = 1000  # bound on reconnections after GOAWAY
GRACE = 10.0  # seconds after the schedule to wait for the last responses
MODEL_DURATION = 60.0  # virtual seconds the model runs at least (its steady state needs the samples)
NO_REPORT = "no report in the response: the server refused these credentials or has load metrics off"


class WireError(SecureOrcaError):
    """The measurement cannot be made (unreachable server, TLS failure, no report with these credentials)."""


@dataclass(frozen=True)
class Target:
    """Where to send requests."""

    host: str
    port: int
    path: str = "/version"

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == 443 else f"{host}:{self.port}"


def parse_target(url: str, path: str) -> Target:
    """``https://host[:port]`` and a path; WireError when the URL is not an https URL with a host."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise WireError(f"URL must look like https://host:port, got {url!r}")
    try:
        port = parts.port or 443
    except ValueError:
        raise WireError(f"URL has an invalid port: {url!r}") from None
    if not path.startswith("/"):
        raise WireError(f"--path {path!r} must start with /")
    return Target(parts.hostname, port, path)


@dataclass(frozen=True)
class Credentials:
    """The load balancer's credentials; the secret is never shown. ``user`` is the user a front proxy names in
    ``X-Remote-User`` on its certificate's connections: kube-apiserver answers a verified front proxy that
    names no user with 401 (unless its client CA also trusts the certificate)."""

    cacert: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    secret: str | None = field(default=None, repr=False)
    user: str | None = None

    def opt_in(self) -> bytes:
        """The opt-in header value: ``TEXT`` or ``TEXT; secret=...``."""
        return header_value("TEXT", self.secret).encode()

    def identity(self) -> list[tuple[bytes, bytes]]:
        """The front proxy's identity header: only with a client certificate and a user."""
        return [(USERNAME_HEADERS[0].lower().encode(), self.user.encode())] if self.cert and self.user else []

    def context(self, with_cert: bool) -> ssl.SSLContext:
        """A verifying client context offering only h2; the client certificate only when asked."""
        context = ssl.create_default_context(cafile=str(self.cacert) if self.cacert else None)
        context.set_alpn_protocols(["h2"])
        if with_cert and self.cert is not None:
            context.load_cert_chain(self.cert, self.key)
        return context


# --- capture: frames and header blocks, sans-I/O ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapturedBlock:
    """One complete header block as received."""

    stream_id: int
    block: bytes
    at: float  # monotonic time of its last frame


@dataclass
class HeaderCapture:
    """Collect the complete header blocks of a server's frames (as :class:`~secure_orca.h2client.H2Loop` shows
    them, whole) in wire order, and note its GOAWAY.

    ``h2load_bytes`` counts what h2load reports as "headers": each HEADERS frame's length less padding and
    priority fields, CONTINUATION frames and the 9-byte frame headers not included.
    """

    blocks: list[CapturedBlock] = field(default_factory=list)
    frames: int = 0  # HEADERS and CONTINUATION frames
    frame_bytes: int = 0  # their length including the 9-byte frame headers
    h2load_bytes: int = 0
    goaway_last_stream: int | None = None
    _pending: bytearray | None = None
    _pending_stream: int = 0

    def frame(self, raw: bytes, now: float) -> bool:
        """Take one whole frame received at ``now``; whether to hand it to h2: not a GOAWAY.

        GOAWAY is kept from h2 (which refuses every frame after it) and noted in ``goaway_last_stream``, so
        the responses the server still finishes after a graceful GOAWAY are received and counted.
        """
        frame, length = Frame.parse_frame_header(memoryview(raw[:FRAME_HEADER]))
        try:
            frame.parse_body(memoryview(raw[FRAME_HEADER:]))
        except HyperframeError as error:
            raise WireError(f"malformed {type(frame).__name__} from the server: {error}") from None
        self._frame(frame, length, now)
        if isinstance(frame, GoAwayFrame):
            last = frame.last_stream_id
            self.goaway_last_stream = min(last, self.goaway_last_stream or last)
            return False
        return True

    @property
    def goaway(self) -> bool:
        """The server sent GOAWAY."""
        return self.goaway_last_stream is not None

    def _frame(self, frame: Frame, length: int, now: float) -> None:
        if not isinstance(frame, HeadersFrame | ContinuationFrame):
            return
        self.frames += 1
        self.frame_bytes += FRAME_HEADER + length
        if isinstance(frame, HeadersFrame):  # hyperframe strips padding and priority fields from .data
            self.h2load_bytes += len(frame.data)
            self._pending, self._pending_stream = bytearray(frame.data), frame.stream_id
        elif self._pending is not None and frame.stream_id == self._pending_stream:
            self._pending += frame.data
        else:
            raise WireError(f"CONTINUATION on stream {frame.stream_id} without a header block in progress")
        if "END_HEADERS" in frame.flags:
            self.blocks.append(CapturedBlock(self._pending_stream, bytes(self._pending), now))
            self._pending = None


# --- one worker: a sequence of connections sending at a fixed rate ---------------------------------------


@dataclass
class ConnectionRecord:
    """What one HTTP/2 connection received."""

    opt_in: bool
    capture: HeaderCapture = field(default_factory=HeaderCapture)
    statuses: Counter[int] = field(default_factory=Counter)  # responses by :status
    reported: int = 0  # responses whose headers, as h2 decoded them, carried a report
    refused: int = 0  # streams reset by the server (sent again on the next connection)


@dataclass
class Counters:
    """Live counts shared with the progress display (updated without a lock: display only)."""

    sent: int = 0
    done: int = 0
    connections: int = 0


class Worker:
    """One load balancer upstream connection: ``count`` requests at ``rate`` per second from ``start``."""

    def __init__(
        self,
        target: Target,
        credentials: Credentials,
        opt_in: bool,
        rate: float,
        count: int,
        start: float,
        counters: Counters,
        timeout: float = 10.0,
    ) -> None:
        self.target, self.credentials, self.opt_in = target, credentials, opt_in
        self.rate, self.count, self.start, self.timeout = rate, count, start, timeout
        self.counters = counters
        self.records: list[ConnectionRecord] = []
        self.error: BaseException | None = None
        self._context = credentials.context(with_cert=True)  # both variants alike but for the opt-in
        extra = [(OPT_IN.encode(), credentials.opt_in())] if opt_in else []
        self._headers = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", target.authority.encode()),
            (b":path", target.path.encode()),
            (b"user-agent", USER_AGENT),
            *credentials.identity(),
            *extra,
        ]

    def run(self) -> None:
        """Thread body: connections until every request is answered or the deadline passes."""
        try:
            answered = 0
            deadline = self.start + self.count / self.rate + GRACE
            for _ in range(MAX_CONNECTIONS_PER_WORKER):
                if answered >= self.count or time.monotonic() > deadline:
                    return
                answered += self._connection(answered, deadline)
        except BaseException as error:  # reported by measure(), never lost in a thread
            self.error = error

    def connect(self) -> ssl.SSLSocket:
        """Open the TLS connection and check that h2 was negotiated."""
        sock = socket.create_connection((self.target.host, self.target.port), timeout=self.timeout)
        try:
            tls = self._context.wrap_socket(sock, server_hostname=self.target.host)
        except BaseException:
            sock.close()
            raise
        if tls.selected_alpn_protocol() != "h2":
            tls.close()
            raise WireError(f"{self.target.authority} did not negotiate HTTP/2 (ALPN h2)")
        return tls

    def _connection(self, answered: int, deadline: float) -> int:
        """Run one connection from request number ``answered``; return how many responses it completed."""
        record = ConnectionRecord(self.opt_in)
        self.records.append(record)
        self.counters.connections += 1
        in_flight: set[int] = set()
        done = 0
        with self.connect() as tls:
            loop = H2Loop(tls, admit=lambda frame: record.capture.frame(frame.raw, time.monotonic())).open()
            conn = loop.conn
            while time.monotonic() < deadline:
                now = time.monotonic()
                due = answered + done + len(in_flight)
                while (
                    due < self.count
                    and not record.capture.goaway
                    and len(in_flight) < MAX_IN_FLIGHT
                    and self.start + due / self.rate <= now
                ):
                    stream_id = conn.get_next_available_stream_id()
                    conn.send_headers(stream_id, self._headers, end_stream=True)
                    in_flight.add(stream_id)
                    due += 1
                    self.counters.sent += 1
                loop.flush()
                if answered + done >= self.count or (record.capture.goaway and not in_flight):
                    break
                wake = self.start + due / self.rate if due < self.count else deadline
                tls.settimeout(min(max(wake - now, 0.001), self.timeout))
                try:
                    events = loop.read()
                except TimeoutError:
                    continue
                if loop.eof:
                    break
                finished = self._events(conn, events, record, in_flight)
                if record.capture.goaway:  # streams the server will not answer: sent again on a new connection
                    refused = {s for s in in_flight if s > (record.capture.goaway_last_stream or 0)}
                    in_flight -= refused
                    record.refused += len(refused)
                done += finished
                self.counters.done += finished
                loop.flush()
        return done

    def _events(
        self,
        conn: h2.connection.H2Connection,
        events: Sequence[h2.events.Event],
        record: ConnectionRecord,
        in_flight: set[int],
    ) -> int:
        finished = 0
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                record.statuses[int(headers.get(b":status", b"0"))] += 1
                record.reported += any(name.decode("latin-1") in ORCA_FIELDS for name, _ in event.headers)
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id in in_flight:
                in_flight.discard(event.stream_id)
                finished += 1
            elif isinstance(event, h2.events.StreamReset) and event.stream_id in in_flight:
                in_flight.discard(event.stream_id)  # counted as not answered: sent again
                record.refused += 1
        return finished


# --- analysis -------------------------------------------------------------------------------------------


def _steady(cost: Sequence[BlockCost], skip: int) -> BlockCost:
    return sum(cost[skip:], BlockCost())


def warmup(responses: int) -> int:
    """Responses left out of steady state on a worker's first connection (as in the model)."""
    return min(responses // 4, WARMUP_CAP)


def _as_bin(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(HEADER_BIN, encode_bin(parse_text(v))) if n == HEADER else (n, v) for n, v in headers]


def _achieved(worker: Worker) -> float:
    times = [b.at for r in worker.records for b in r.capture.blocks]
    if len(times) < 2 or times[-1] <= times[0]:
        return worker.rate
    return (len(times) - 1) / (times[-1] - times[0])


def _walk_worker(worker: Worker, bin_replay: bool) -> tuple[BlockCost, BlockCost, list[ConnectionAttribution]]:
    """Steady-state attribution of a worker's connections (and of their BIN replay)."""
    steady, steady_bin, attributions = BlockCost(), BlockCost(), []
    for index, record in enumerate(worker.records):
        blocks = [b.block for b in record.capture.blocks]
        if not blocks:
            continue
        skip = warmup(worker.count) if index == 0 else 0
        attribution = attribute_connection(blocks)
        attributions.append(attribution)
        steady += _steady(attribution.per_block, skip)
        if bin_replay:
            lists = [_as_bin(w.headers()) for w in attribution.walks]
            steady_bin += _steady(attribute_connection(replay(lists)).per_block, skip)
    return steady, steady_bin, attributions


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def analyse(rate: float, with_opt_in: Sequence[Worker], without: Sequence[Worker]) -> WireResult:
    """Attribute the captured blocks of one phase (pure: no I/O)."""
    cost, cost_bin, seconds = BlockCost(), BlockCost(), 0.0
    attributions: list[ConnectionAttribution] = []
    fields: list[FieldRecord] = []
    achieved = []
    for worker in with_opt_in:
        steady, steady_bin, walked = _walk_worker(worker, bin_replay=True)
        cost, cost_bin, attributions = cost + steady, cost_bin + steady_bin, attributions + walked
        achieved.append(_achieved(worker))
        seconds += steady.blocks / achieved[-1]
        fields += [f for a in walked for w in a.walks for f in w.fields if f.name in ORCA_FIELDS]
    plain = BlockCost()
    for worker in without:
        plain += _walk_worker(worker, bin_replay=False)[0]
    records = [r for w in (*with_opt_in, *without) for r in w.records]
    opted = [r for w in with_opt_in for r in w.records]
    count = max(cost.blocks, 1)
    first = [a.orca_first_send for a in attributions if a.orca_first_send is not None]
    uncompressed = _mean([len(f.name) + len(f.value) for f in fields])
    block_with, block_without = cost.length / count, plain.length / max(plain.blocks, 1)
    seconds = seconds or 1.0
    return WireResult(
        rate=rate,
        achieved_rate=_mean(achieved),
        connections=len(with_opt_in),
        opened=len(records),
        responses=sum(len(r.capture.blocks) for r in opted),
        responses_without=sum(len(r.capture.blocks) for w in without for r in w.records),
        reported=sum(r.reported for r in opted),
        refused=sum(r.refused for r in records),
        statuses=dict(sorted(sum((r.statuses for r in opted), Counter()).items())),
        statuses_without=dict(sorted(sum((r.statuses for w in without for r in w.records), Counter()).items())),
        uncompressed=uncompressed,
        entry_size=uncompressed + 32 if fields else 0.0,
        first_send=_mean(first) if first else None,
        **cost.rates(count, seconds),
        ab_marginal=block_with - block_without,
        block_with=block_with,
        block_without=block_without,
        bin_marginal=cost_bin.marginal / count,
        header_bytes=sum(r.capture.h2load_bytes for r in opted),
        header_bytes_without=sum(r.capture.h2load_bytes for w in without for r in w.records),
        header_frame_bytes=sum(r.capture.frame_bytes for r in opted),
        replay_exact=all(a.replay_exact for a in attributions),
    )


# --- a run ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasureConfig:
    """What ``secure-orca hpack measure`` measures."""

    target: Target
    credentials: Credentials
    rates: tuple[float, ...] = (1.0, 10.0, 100.0)
    connections: int = 1
    duration: float = 10.0
    interval: float = 0.1  # the server's sampling interval, for the model column
    decimals: int = DEFAULT_DECIMALS  # the server's precision, for the model column
    timeout: float = 10.0


Progress = Callable[[float, float, Counters, int], None]  # rate, elapsed fraction, counters, expected


def check_reachable(config: MeasureConfig) -> None:
    """One opted-in request up front: an unreachable server, a TLS problem or refused credentials is one clear
    message before any phase runs."""
    probe = Worker(config.target, config.credentials, True, 1.0, 1, time.monotonic(), Counters(), config.timeout)
    probe.run()
    error, where = probe.error, config.target.authority
    if isinstance(error, ssl.SSLCertVerificationError):
        raise WireError(f"{where}: server certificate not trusted ({error.verify_message})") from None
    if isinstance(error, ssl.SSLError):
        raise WireError(f"{where}: TLS handshake failed ({error.reason or error})") from None
    if isinstance(error, OSError):
        raise WireError(f"cannot connect to {where}: {error.strerror or error}") from None
    if error is not None:
        raise WireError(f"{where}: {type(error).__name__}: {error}") from None
    if not any(r.reported for r in probe.records):
        raise WireError(NO_REPORT)


def model_interval(interval: float, values_per_s: float) -> float:
    """The sampling interval the model column runs at: the server's ``interval``, or the longer mean interval
    between new report values that the wire saw. A busy server samples late and a quiet one repeats a value;
    either way fewer new values reach the connection, and the model is held to the encoding, not to the
    sampler's timing."""
    return max(interval, 1 / values_per_s) if values_per_s > 0 else interval


def run_phase(config: MeasureConfig, rate: float, progress: Progress | None = None) -> WireResult:
    """Both variants at ``rate`` per connection, concurrently; then attribute and model."""
    count = expected_requests(rate, config.duration)
    counters = Counters()
    start = time.monotonic() + 0.2
    stagger = 1 / (rate * config.connections * 2)  # spread the workers' requests evenly over time
    workers = [
        Worker(config.target, config.credentials, opt_in, rate, count, start + i * stagger, counters, config.timeout)
        for i, opt_in in enumerate([True, False] * config.connections)
    ]
    threads = [threading.Thread(target=w.run, name=f"hpack-{i}", daemon=True) for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    expected = count * len(workers)
    limit = start + config.duration + GRACE + config.timeout
    for thread in threads:
        while thread.is_alive() and time.monotonic() < limit:
            thread.join(0.25)
            if progress:
                progress(rate, min(1.0, (time.monotonic() - start) / config.duration), counters, expected)
    if progress:
        progress(rate, 1.0, counters, expected)
    errors = [w.error for w in workers if w.error is not None]
    if errors:
        error = errors[0]
        raise WireError(f"rate {rate:g}: {type(error).__name__}: {error}") from error
    if any(t.is_alive() for t in threads):
        raise WireError(f"rate {rate:g}: responses still missing {GRACE + config.timeout:g} s after the schedule")
    result = analyse(rate, workers[0::2], workers[1::2])
    if not result.reported:
        raise WireError(NO_REPORT)
    scenario = Scenario(
        rate=rate,
        interval=model_interval(config.interval, result.values_per_s),
        decimals=config.decimals,
        duration=max(config.duration, MODEL_DURATION),
        server_rps=rate * len(workers),
    )
    return replace(result, model=simulate(scenario))


def measure(config: MeasureConfig, progress: Progress | None = None) -> list[WireResult]:
    """Check the server is reachable, then one phase per rate (in the order given)."""
    check_reachable(config)
    return [run_phase(config, rate, progress) for rate in config.rates]


def as_dict(result: WireResult) -> dict[str, object]:
    """JSON-ready form (model included, no credentials)."""
    out = asdict(result)
    out["marginal_ratio"] = result.marginal_ratio
    return out


def expected_requests(rate: float, duration: float) -> int:
    """Requests per worker for a phase."""
    return max(1, math.floor(rate * duration + 0.5))
