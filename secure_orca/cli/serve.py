"""Serve HTTP/2 and HTTP/1.1 over TLS, attaching ORCA load reports (endpoint-load-metrics) only to requests
that opt in with endpoint-load-metrics-request AND are authorized: a load-reader client certificate (option 2b,
the default: --endpoint-load-metrics-client-ca-file, --endpoint-load-metrics-allowed-names), a client certificate
trusted for front-proxy authentication (--requestheader-client-ca-file, --requestheader-allowed-names), or a
shared secret in the opt-in value (TEXT; secret=...). Flags are named as kube-apiserver names them.

With no TLS flags it uses the development PKI in certs/ (written, or completed, on first use by the same writer
as `secure-orca certs`: a kubeconfig and token file included) with the feature on.
Everything not under a --proxy prefix is served by a small kube-apiserver look-alike demo backend.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from secure_orca import pki
from secure_orca.addresses import is_loopback
from secure_orca.credentials import devpki
from secure_orca.errors import UsageError
from secure_orca.server import options
from secure_orca.server.config import ServeConfig, build_config
from secure_orca.server.flags import parse_address
from secure_orca.server.options import serving

if TYPE_CHECKING:  # the server's own modules are imported once the flags are valid (tests/cli/test_startup_imports.py)
    from http.server import ThreadingHTTPServer

    from secure_orca.server.assembly import Server
    from secure_orca.workers.credentials import CredentialReader
    from secure_orca.workers.sampling import WorkerSampler

log = logging.getLogger("secure_orca.serve")

HELP = "serve HTTP/2 TLS with load reports for the load reader (default), front proxy or a shared secret only"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_flags(parser)  # one module per concern: secure_orca/server/options/
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request")


def dev_pki(args: argparse.Namespace) -> pki.DevPKI | None:
    """With no TLS flags: the development PKI in --certs-dir, written (or completed) by its one writer, the
    same as `secure-orca certs`; None when a serving certificate is named."""
    if not serving.uses_dev_pki(args):
        return None
    port = args.secure_port if args.secure_port else 6443
    try:
        written = devpki.ensure(args.certs_dir, f"https://localhost:{port}")
    except (OSError, ValueError) as error:
        raise UsageError(f"--certs-dir: cannot complete the development PKI: {error}") from None
    if written:
        log.info(
            "created a development PKI in %s/ (%d files; kubeconfig and tokens.csv included)",
            args.certs_dir,
            len(written),
        )
    return pki.DevPKI(args.certs_dir)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="secure-orca: %(levelname)s: %(message)s")
    config = build_config(args, dev_pki(args))
    # a refused start (a bad flag or value) does not import hypercorn, h2 and the workers: a third of its CPU
    from secure_orca.server.assembly import Server
    from secure_orca.server.listener import listen
    from secure_orca.workers.auditwriter import AuditWriter
    from secure_orca.workers.board import Board
    from secure_orca.workers.credentials import CredentialReader
    from secure_orca.workers.sampling import WorkerSampler
    from secure_orca.workers.supervisor import Supervisor

    workers = _workers(config)
    for note in config.notes:
        (log.warning if note.startswith("WARNING") else log.info)(note.removeprefix("WARNING: "))
    metrics = config.load_metrics
    sampler = WorkerSampler(Board(workers), metrics.interval, metrics.decimals) if workers > 1 else None
    sock = None
    if workers > 1:  # the workers share one listening socket, in the options they are assembled with
        with _listen_errors(config):
            sock = listen(config.serving.host, config.serving.port)
    try:
        server = Server.assemble(config, verbose=args.verbose, sampler=sampler, sock=sock)
    except BaseException:
        if sock is not None:  # a credential error: the one error, and nothing left listening
            sock.close()
        raise
    _log_features(config)
    credentials = CredentialReader(server) if workers > 1 else None  # the one reader of the credential files
    supervised = _serve_metrics(server, sampler, credentials) if server.metrics is not None else None
    if sock is not None:
        writer = AuditWriter(config.audit, workers) if config.audit.path else None  # one process writes the file
        status = Supervisor(server, sock, workers, _serve, supervised, credentials, writer).run()
    else:
        with _listen_errors(config):
            status = _serve(server)
    log.info("stopped")
    return status


def _log_features(config: ServeConfig) -> None:
    log.info(
        "load metrics %s; modes: %s",
        "on" if config.load_metrics.enabled else "off",
        ",".join(sorted(config.load_metrics.modes)) or "none",
    )
    if config.oob is not None:
        log.info(
            "out-of-band load reports on (StreamCoreMetrics, certificate modes only), interval floor %gs, "
            "streams: %d in total, %d per connection, %d per certificate, %d for the front proxy only; "
            "write deadline %gs",
            config.oob.min_interval,
            config.oob.limits.total,
            config.oob.limits.per_connection,
            config.oob.limits.per_identity,
            config.oob.limits.front_proxy_share,
            config.oob.write_deadline,
        )


def _serve_metrics(
    server: Server, sampler: WorkerSampler | None, credentials: CredentialReader | None
) -> ThreadingHTTPServer | None:
    """/metrics on --metrics-bind-address: in this process, or with --workers in a process of its own (returned,
    for the supervisor to keep). prometheus-client is imported only here: a tenth of serve's start-up."""
    from prometheus_client import generate_latest

    from secure_orca.server.http.serve import bind_address
    from secure_orca.workers.metrics import metrics_server

    assert server.metrics is not None
    address = server.config.serving.metrics_address
    host, requested = parse_address(address)
    supervised = None
    try:
        if sampler is not None:  # one /metrics for the server, in a process of its own
            registry = server.metrics.registry
            sampler.render_metrics_with(lambda: generate_latest(registry))
            assert credentials is not None
            supervised = metrics_server(sampler.board, host, requested, more=(credentials.shared.exposition,))
            port = supervised.server_address[1]
        else:
            port = server.metrics.serve(address)
    except OSError as error:
        raise UsageError(f"--metrics-bind-address: cannot listen on {address}: {error.strerror}") from None
    log.info("metrics on http://%s/metrics", bind_address(host, port))
    if not is_loopback(host):
        log.warning(
            "--metrics-bind-address %s is not a loopback address: /metrics has no authentication (it carries "
            "no load value, but counts of requests, reports and authentications)",
            host,
        )
    return supervised


def _workers(config: ServeConfig) -> int:
    """--workers, 0 resolved to the cgroup's CPU quota."""
    from secure_orca.workers.supervisor import default_workers

    return config.serving.workers or default_workers()


@contextmanager
def _listen_errors(config: ServeConfig) -> Iterator[None]:
    """The serving socket's errors as one-line usage errors naming the flag."""
    host, port = config.serving.host, config.serving.port
    try:
        yield
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise UsageError(f"--secure-port: {host}:{port} is already in use") from None
        if error.errno == errno.EADDRNOTAVAIL:
            raise UsageError(f"--bind-address: {host} is not an address of this machine") from None
        raise UsageError(f"cannot serve on {host}:{port}: {error.strerror}") from None


def _serve(server: Server) -> int:
    """Serve on this process's event loop until SIGINT or SIGTERM (a worker runs exactly this)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.run(stop.wait)
        finally:
            _ignore_stop_signals(loop)

    with asyncio.Runner(loop_factory=_loop_factory(server.config.serving.event_loop)) as runner:
        runner.run(main())
    return 0


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignore_stop_signals(loop: asyncio.AbstractEventLoop) -> None:
    """The server has stopped: a further SIGINT or SIGTERM is ignored while the loop is torn down. Left to the
    loop, its ``close()`` (CPython 3.11.7 ``asyncio/unix_events.py``) closes the self-pipe before it removes its
    handlers, so a signal in between is written to a closed wakeup fd (a traceback), and one after it meets the
    default action (the process dies by the signal instead of exiting 0)."""
    # Not on this thread between the default action remove_signal_handler sets and SIG_IGN (another thread of
    # the process could still take one in those few instructions).
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)  # the last one also unsets the wakeup fd
            signal.signal(sig, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # one pending meanwhile is ignored


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``--event-loop``: None is asyncio's own; uvloop's loop where asked (validated as installed)."""
    if name != "uvloop":
        return None
    import uvloop

    return uvloop.new_event_loop
