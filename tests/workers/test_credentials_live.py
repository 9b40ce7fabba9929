"""One trust in force across ``serve --workers 2``, on loopback: only the credential reader opens the credential
files (an audit hook records every open by pid), a rotated secret is refused on connections held on each
worker, a bad file is refused once for the server while every worker keeps the last good content, and a worker
or reader killed after a reload comes back with the current generation. Counted and compared, never timed."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import time
from pathlib import Path

import grpc
from cryptography import x509

from secure_orca import pki
from secure_orca.lab import replicas as launch
from secure_orca.lab.sockets import children, connections
from tests import plainhttp
from tests.oobcalls import ask, channel, ended, stream_core_metrics
from tests.workers.live import close, eventually, granted, live, rotate, workers_of

SECRET = "--endpoint-load-metrics-secret-file"
RELOADS = "secure_orca_credential_reloads"
REQUESTHEADER_CA = "--requestheader-client-ca-file"


def reloads(port: int, flag: str, result: str) -> float:
    return plainhttp.metric(f"http://127.0.0.1:{port}/metrics", f"{RELOADS}_total", flag=flag, result=result)


def test_only_the_credential_reader_opens_the_credential_files(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    port = launch.free_port()
    with live(dev_pki, tmp_path, "--metrics-bind-address", f"127.0.0.1:{port}") as server:
        supervisor = server.replica.process.popen.pid
        workers = workers_of(server.replica)
        old = server.dev.secret.read_text().strip()
        held = server.held(old)
        try:
            fresh = pki.new_secret()
            rotate(server.dev.secret, f"{fresh}\n".encode())
            eventually(lambda: all(granted(c[0], server.replica.url, fresh) for c in held.values()), "rotated")
            at_start = server.opened()[supervisor]  # each file once, to assemble before any fork

            def polled() -> bool:
                return sum(server.opened().values()) - at_start >= 5 * at_start  # five polls' worth by others

            eventually(polled, "more polls")
            opened = server.opened()
            counted = reloads(port, SECRET, "success")
        finally:
            close(held)
        readers = set(children(supervisor)) - set(workers)
    assert not {pid: n for pid, n in opened.items() if pid in workers}, opened  # no worker opened a file
    (reader,) = [pid for pid in opened if pid != supervisor]  # one process reads them...
    assert reader in readers
    assert opened[supervisor] == at_start  # the supervisor read them once, at start-up; the reader at every poll
    assert server.log().count(f"reloaded {SECRET}") == 1  # said once for the server, not once per worker
    assert counted == 1  # and counted once in its one /metrics


def test_a_rotated_secret_is_refused_on_connections_held_on_every_worker(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    with live(dev_pki, tmp_path) as server:
        url = server.replica.url
        old = server.dev.secret.read_text().strip()
        held = server.held(old)
        try:
            fresh = pki.new_secret()
            rotate(server.dev.secret, f"{fresh}\n".encode())
            eventually(lambda: not any(granted(c[0], url, old) for c in held.values()), "the old secret revoked")
            assert all(granted(c[0], url, fresh) for c in held.values())
            assert not any(granted(c[0], url, old) for c in held.values())  # and it stays revoked
        finally:
            close(held)


def test_a_bad_file_is_refused_once_and_every_worker_keeps_the_last_good(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    with live(dev_pki, tmp_path) as server:
        url = server.replica.url
        old = server.dev.secret.read_text().strip()
        held = server.held(old)
        try:
            rotate(server.dev.secret, f"{pki.new_secret()}\n".encode(), 0o644)  # world-readable: refused
            eventually(lambda: f"reload of {SECRET} refused" in server.log(), "the refusal")
            time.sleep(0.5)  # five more polls
            assert all(granted(c[0], url, old) for c in held.values())  # the last good content, on every worker
        finally:
            close(held)
        assert server.log().count(f"reload of {SECRET} refused") == 1, server.log()


def test_a_worker_or_reader_killed_after_a_reload_comes_back_with_the_new_generation(
    dev_pki: pki.DevPKI, tmp_path: Path
) -> None:
    with live(dev_pki, tmp_path) as server:
        url = server.replica.url
        supervisor = server.replica.process.popen.pid
        old = server.dev.secret.read_text().strip()
        held = server.held(old)
        second = pki.new_secret()
        rotate(server.dev.secret, f"{second}\n".encode())
        eventually(lambda: all(granted(c[0], url, second) for c in held.values()), "rotated")
        victim = next(iter(held))
        close(held)
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: victim not in (pids := workers_of(server.replica)) and len(pids) == 2, "replaced")
        held = server.held(second)  # the replacement grants the new secret from its first request...
        try:
            assert not any(granted(c[0], url, old) for c in held.values())  # ...and never the old one
            (reader,) = set(children(supervisor)) - set(held)
            os.kill(reader, signal.SIGKILL)
            eventually(lambda: "the credential reader" in server.log() and len(children(supervisor)) == 3, "back")
            # The new reader caught up with the generation in force: with the secret file now refused, a change to
            # another file publishes the secret in force (the second), never the one it was forked with (the old).
            rotate(server.dev.secret, f"{pki.new_secret()}\n".encode(), 0o644)
            eventually(lambda: f"reload of {SECRET} refused" in server.log(), "the refusal")
            front_proxy_ca = server.dev.cert("front_proxy_ca")
            rotate(front_proxy_ca, front_proxy_ca.read_bytes(), 0o644)  # the same bytes, a new file: a reload
            eventually(lambda: f"reloaded {REQUESTHEADER_CA}" in server.log(), "the other file reloaded")
            time.sleep(0.3)  # three polls
            assert all(granted(c[0], url, second) for c in held.values())
            assert not any(granted(c[0], url, old) for c in held.values())
            third = pki.new_secret()
            rotate(server.dev.secret, f"{third}\n".encode())
            eventually(lambda: all(granted(c[0], url, third) for c in held.values()), "rotated by the new reader")
            assert not any(granted(c[0], url, second) for c in held.values())
        finally:
            close(held)


def test_a_rotated_serving_certificate_is_presented_by_every_worker(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """The serving pair comes through the reader too: new handshakes on either worker present the new one."""
    with live(dev_pki, tmp_path) as server:
        replica = server.replica
        pids = workers_of(replica)
        context = ssl.create_default_context(cafile=str(server.dev.cert("ca")))

        def handshake() -> tuple[int, int]:
            """One new connection: the worker that took it and the serial number of the certificate it showed."""
            before = connections(pids, replica.port)
            with (
                socket.create_connection((replica.host, replica.port), timeout=10) as raw,
                context.wrap_socket(raw, server_hostname=replica.host) as tls,
            ):
                der = tls.getpeercert(binary_form=True)
                after = connections(pids, replica.port)
            assert der is not None
            (owner,) = [pid for pid in pids if after[pid] > before[pid]]
            return owner, x509.load_der_x509_certificate(der).serial_number

        old = {serial for _, serial in (handshake() for _ in range(4))}
        ca = pki.load_issued(server.dev.cert("ca").read_bytes(), server.dev.key("ca").read_bytes())
        fresh = pki.issue_leaf("server", ca)
        rotate(server.dev.key("server"), fresh.key_pem())  # key first: the mismatched pair is refused meanwhile
        rotate(server.dev.cert("server"), fresh.cert_pem(), 0o644)
        new = fresh.cert.serial_number
        eventually(lambda: handshake()[1] == new, "the new pair presented")
        outcomes = [handshake() for _ in range(20)]
    assert {owner for owner, _ in outcomes} == set(pids), outcomes  # both workers were asked
    assert {serial for _, serial in outcomes} == {new} and new not in old, outcomes


def test_a_replaced_load_reader_ca_ends_the_streams_of_every_worker(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """Out-of-band streams are rechecked on every worker when the reader's generation arrives."""
    with live(dev_pki, tmp_path, "--endpoint-load-metrics-oob-min-interval", "200ms") as server:
        replica, dev = server.replica, server.dev
        pids = workers_of(replica)
        channels: list[grpc.Channel] = []
        calls: dict[int, object] = {}
        try:
            for _ in range(30):
                if len(calls) == len(pids):
                    break
                before = connections(pids, replica.port)
                ch = channel(replica, dev, dev.cert("load_reader_client"), dev.key("load_reader_client"))
                channels.append(ch)
                call = stream_core_metrics(ch)(ask(0.2), timeout=60)
                next(call)
                after = connections(pids, replica.port)
                (owner,) = [pid for pid in pids if after[pid] > before[pid]]
                calls.setdefault(owner, call)
            assert set(calls) == set(pids), "streams did not reach every worker"
            rotate(dev.cert("load_reader_ca"), pki.make_ca("another-load-reader-ca").cert_pem(), 0o644)
            for call in calls.values():
                assert ended(call) == (grpc.StatusCode.PERMISSION_DENIED, "entitlement withdrawn")
        finally:
            for ch in channels:
                ch.close()
