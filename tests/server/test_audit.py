"""Audit events (server.audit): kube's Event shape, the load-report decision as annotations, no credential in any
event wherever a client puts it, a full queue or a full disk never stops serving, lumberjack's rotation."""

from __future__ import annotations

import contextlib
import errno
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from secure_orca import pki
from secure_orca.authn.user import UserInfo
from secure_orca.authz.reasons import Reason
from secure_orca.credentials import devpki
from secure_orca.lab import replicas as launch
from secure_orca.server.audit import log as audit
from tests import plainhttp
from tests.conftest import ClientCert, fp_flags
from tests.replicas import run_replicas
from tests.rotating import eventually

# The json names of kubernetes/apiserver pkg/apis/audit/v1/types.go Event (24a394e516bf) we write.
EVENT_FIELDS = {
    "kind",
    "apiVersion",
    "level",
    "auditID",
    "stage",
    "requestURI",
    "verb",
    "user",
    "sourceIPs",
    "userAgent",
    "responseStatus",
    "requestReceivedTimestamp",
    "stageTimestamp",
    "annotations",
}
ALL_EVENT_FIELDS = EVENT_FIELDS | {
    "impersonatedUser",
    "authenticationMetadata",
    "objectRef",
    "requestObject",
    "responseObject",
}
OPT_IN = "endpoint-load-metrics-request"
MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _record(path: str = "/version", query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None):
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": headers or [],
        "client": ("127.0.0.1", 5555),
    }
    record = audit.AuditRecord(scope)
    record.status = 200
    record.stage = record.received + 1000
    return record


def test_event_has_kubes_shape() -> None:
    record = _record(headers=[(b"user-agent", b"kubectl/v1.37")])
    record.user = UserInfo("jane", "42", ("dev", "system:authenticated"), {"scopes": ("a",)})
    record.decision = Reason.FRONT_PROXY
    record.report = audit.IN_BAND
    event = audit.event(record)
    assert set(event) == EVENT_FIELDS and set(event) <= ALL_EVENT_FIELDS
    assert (event["kind"], event["apiVersion"], event["level"], event["stage"]) == (
        "Event",
        "audit.k8s.io/v1",
        "Metadata",
        "ResponseComplete",
    )
    assert event["verb"] == "get" and event["requestURI"] == "/version"
    assert event["user"] == {
        "username": "jane",
        "uid": "42",
        "groups": ["dev", "system:authenticated"],
        "extra": {"scopes": ["a"]},
    }
    assert event["responseStatus"] == {"metadata": {}, "code": 200}
    assert MICROTIME.match(event["requestReceivedTimestamp"]) and MICROTIME.match(event["stageTimestamp"])
    assert event["annotations"] == {audit.REASON: "front-proxy", audit.REPORT_ANNOTATION: "in-band"}
    assert event["sourceIPs"] == ["127.0.0.1"] and event["userAgent"] == "kubectl/v1.37"


def test_the_front_proxy_is_named_only_when_it_asserted_a_user() -> None:
    record = _record()
    record.front_proxy = pki.issue(pki.make_ca("fp-ca"), "the-proxy").cert
    record.user = UserInfo("alice")
    assert audit.event(record)["annotations"][audit.FRONT_PROXY] == "the-proxy"
    record.user = UserInfo("system:anonymous")  # --requestheader-missing-user=anonymous: it named no one
    assert audit.FRONT_PROXY not in audit.event(record)["annotations"]


def test_a_line_that_is_not_utf_8_is_still_written() -> None:
    sink = _FullDisk()
    sink.full = False
    log = audit.AuditLog(sink)
    log.submit(_record(headers=[(b"user-agent", b"\xff\xfe")]))
    record = _record()
    record.user = UserInfo("\udcff")  # a lone surrogate cannot be UTF-8
    log.submit(record)
    assert log.drain() == 2 and log.write_errors == 0


def test_mark_streamed_is_the_out_of_band_annotation() -> None:
    record = _record()
    scope = {audit.AUDIT_KEY: record}
    audit.mark_streamed(scope)
    audit.mark_streamed({})  # no audit: nothing to do
    assert audit.event(record)["annotations"][audit.REPORT_ANNOTATION] == "out-of-band"


def test_source_ips_as_kube_and_never_client_text() -> None:
    headers = [(b"x-forwarded-for", b"10.0.0.1, not-an-ip-SECRET"), (b"x-real-ip", b"10.0.0.2")]
    assert audit.event(_record(headers=headers))["sourceIPs"] == ["10.0.0.1", "10.0.0.2", "127.0.0.1"]


SECRET = "s3cr3t-Value_that+must/never=appear"


def _places(secret: str) -> list[tuple[str, bytes, list[tuple[bytes, bytes]]]]:
    """Every place a client can put a credential: (path, query, headers)."""
    enc = quote(secret, safe="").encode()
    return [
        ("/version", b"", [(OPT_IN.encode(), f"TEXT; secret={secret}".encode())]),
        ("/version", b"", [(b"authorization", f"Bearer {secret}".encode())]),
        ("/version", b"secret=" + enc, []),
        ("/version", b"secret=" + secret.encode(), []),
        ("/" + quote(secret, safe="/"), b"", []),
        ("/version", b"", [(b"x-remote-user", secret.encode()), (b"x-remote-extra-k", secret.encode())]),
        ("/version", b"", [(b"user-agent", f"curl {secret}".encode())]),
        ("/version", b"", [(b"x-forwarded-for", secret.encode())]),
    ]


@pytest.mark.parametrize("where", range(8))
def test_no_configured_secret_in_an_event(where: int) -> None:
    path, query, headers = _places(SECRET)[where]
    record = _record(path, query, headers)
    record.user = UserInfo(SECRET if where == 5 else "jane")  # a front proxy asserting it: still redacted
    text = json.dumps(audit.event(record, known=[SECRET]))
    for form in (SECRET, quote(SECRET, safe=""), quote(SECRET)):
        assert form not in text
    assert "/never" not in text


@pytest.mark.parametrize("where", [0, 1])
def test_a_presented_credential_is_redacted_everywhere_even_when_unknown(where: int) -> None:
    """A wrong secret or token is still the client's credential: it is redacted from the URI and User-Agent."""
    headers = [*_places(SECRET)[where][2], (b"user-agent", SECRET.encode())]
    text = json.dumps(audit.event(_record("/" + SECRET, b"t=" + SECRET.encode(), headers)))
    assert SECRET not in text


@pytest.mark.parametrize(
    "name",
    [
        b"endpoint-load-metrics-request",
        b"endpoint_load_metrics_request",
        b"endpoint_load-metrics-request",
        b"endpoint-load-metrics_request",
    ],
)
def test_a_secret_presented_in_any_opt_in_spelling_is_redacted(name: bytes) -> None:
    """The middleware reads every spelling of the opt-in (each ``-`` kept or written ``_``) as one and strips
    them all; the record takes its presented secret from the same set."""
    headers = [(name, f"TEXT; secret={SECRET}".encode()), (b"user-agent", SECRET.encode())]
    text = json.dumps(audit.event(_record("/" + SECRET, b"t=" + SECRET.encode(), headers)))
    assert SECRET not in text


class _FullDisk:
    def __init__(self) -> None:
        self.full = True
        self.data = b""

    def write(self, data: bytes) -> None:
        if self.full:
            self.data += data[:10]  # a partial write, then ENOSPC
            raise OSError(errno.ENOSPC, "No space left on device")
        self.data += data


def test_a_full_disk_drops_and_counts_then_writes_on_a_fresh_line() -> None:
    sink = _FullDisk()
    log = audit.AuditLog(sink)
    log.submit(_record())
    assert log.drain() == 0 and log.write_errors == 1
    sink.full = False
    log.submit(_record())
    assert log.drain() == 1 and log.written == 1
    lines = sink.data.split(b"\n")
    assert json.loads(lines[1])["kind"] == "Event"  # the partial line is ended before the next event


def test_a_full_queue_drops_and_counts() -> None:
    log = audit.AuditLog(_FullDisk(), limit=3)
    for _ in range(5):
        log.submit(_record())
    assert (len(log.queue), log.dropped) == (3, 2)


def test_rotation_as_lumberjack(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "audit.log"
    file = audit.RotatingFile(path, max_bytes=100, max_backups=2)
    for _ in range(6):
        file.write(b"x" * 60 + b"\n")
        time.sleep(0.002)  # distinct millisecond stamps
    file.close()
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    backups = file.backups()
    assert len(backups) == 2
    assert all(re.fullmatch(r"audit-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}\.log", b.name) for b in backups)
    assert path.stat().st_size == 61


def test_a_device_is_never_renamed(tmp_path: Path) -> None:
    file = audit.RotatingFile(Path("/dev/null"), max_bytes=1, max_backups=1)
    file.write(b"abc\n")
    file.write(b"abc\n")
    file.close()
    assert Path("/dev/null").is_char_device()


def test_negative_sizes_are_refused_as_kube(tmp_path: Path) -> None:
    run = subprocess.run(
        [*launch.serve_argv(devpki.generate(tmp_path / "p"))[:3], "serve", "--audit-log-maxsize", "-1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode != 0 and "--audit-log-maxsize -1 can't be a negative number" in run.stderr


def test_an_unknown_mode_is_refused_as_kube(tmp_path: Path) -> None:
    run = subprocess.run(
        [*launch.serve_argv(devpki.generate(tmp_path / "p"))[:3], "serve", "--audit-log-mode", "async"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    expected = 'invalid audit log mode async, allowed modes are "batch,blocking,blocking-strict"'
    assert run.returncode != 0 and expected in run.stderr and "Traceback" not in run.stderr


# --- live: a real serve writing its audit log ---------------------------------------------------------------


@contextlib.contextmanager
def _serving(dev_pki: pki.DevPKI, tmp_path: Path, log: str, *extra: str) -> Iterator[tuple[launch.Replica, str]]:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(f'{SECRET},jane,1001,"dev"\n')
    tokens.chmod(0o600)
    metrics = f"127.0.0.1:{launch.free_port()}"
    flags = [
        *fp_flags(dev_pki),
        "--token-auth-file",
        str(tokens),
        "--audit-log-path",
        log,
        "--metrics-bind-address",
        metrics,
        *extra,
    ]
    argv = launch.serve_argv(dev_pki, flags)
    argv.remove("--requestheader-missing-user=anonymous")
    with run_replicas([argv]) as (replica,):
        yield replica, f"http://{metrics}/metrics"


def _client(dev_pki: pki.DevPKI, cert: ClientCert | None = None) -> httpx.Client:
    import ssl

    context = ssl.create_default_context(cafile=str(dev_pki.cert("ca")))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    return httpx.Client(verify=context, http2=True, timeout=10)


def _events(path: Path, count: int) -> list[dict[str, Any]]:
    eventually(lambda: path.exists() and len(path.read_text().splitlines()) >= count, f"{count} audit events")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_live_events_of_each_kind_and_no_secret(
    dev_pki: pki.DevPKI, client_certs: dict[str, ClientCert], tmp_path: Path
) -> None:
    secret = dev_pki.secret.read_text().strip()
    log = tmp_path / "audit" / "audit.log"
    with _serving(dev_pki, tmp_path, str(log)) as (replica, metrics):
        url = replica.url
        with _client(dev_pki, client_certs["front-proxy"]) as lb:
            granted = lb.get(url + "/version", headers={OPT_IN: "TEXT", "x-remote-user": "alice"})
            assert "endpoint-load-metrics" in granted.headers
        with _client(dev_pki, client_certs["user"]) as user:
            assert user.get(url + "/version", headers={OPT_IN: "TEXT"}).status_code == 200
        with _client(dev_pki) as anonymous:
            assert anonymous.get(url + "/version", headers={"authorization": "Bearer wrong"}).status_code == 401
            # the secret and the token in every place a client can put them
            sent = 3
            for value in (secret, SECRET):
                for path, query, headers in _places(value):
                    target = url + path + ("?" + query.decode() if query else "")
                    anonymous.get(target, headers=[(k.decode(), v.decode()) for k, v in headers])
                    sent += 1
        events = _events(log, sent)
        attempts = {
            r: plainhttp.metric(metrics, "authentication_attempts_total", -1.0, result=r) for r in ("success", "error")
        }
    assert attempts["success"] >= 2 and attempts["error"] >= 1  # the wrong bearer token: kube's "error"
    assert len(events) == sent
    text = log.read_text()
    for value in (secret, SECRET):
        for form in (value, quote(value, safe=""), quote(value)):
            assert form not in text
    proxied, user_event, refused = events[:3]
    assert proxied["auditID"] == granted.headers["audit-id"]  # as kube: the response's Audit-Id is the event's
    assert proxied["user"]["username"] == "alice"
    assert proxied["annotations"] == {
        audit.REASON: "front-proxy",
        audit.REPORT_ANNOTATION: "in-band",
        audit.FRONT_PROXY: pki.FRONT_PROXY_CN,
    }
    assert user_event["user"]["username"] == "developer" and audit.FRONT_PROXY not in user_event["annotations"]
    assert user_event["annotations"][audit.REPORT_ANNOTATION] == "none"
    assert user_event["annotations"][audit.REASON] == "untrusted-ca"  # a client certificate is no front proxy
    assert refused["responseStatus"]["code"] == 401 and refused["user"] == {}
    assert refused["annotations"][audit.REASON] == "no-opt-in"
    assert {e["responseStatus"]["code"] for e in events[3:]} <= {200, 401, 404}


def test_live_a_full_disk_does_not_stop_serving(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """The audit log on /dev/full (every write: ENOSPC): every request is still answered, the loss counted."""
    with _serving(dev_pki, tmp_path, "/dev/full", "--audit-log-maxsize", "1") as (replica, metrics):
        with _client(dev_pki) as client:
            statuses = [client.get(replica.url + "/healthz").status_code for _ in range(30)]
        assert statuses == [200] * 30
        eventually(
            lambda: plainhttp.metric(metrics, "secure_orca_audit_write_errors_total", -1.0) >= 30,
            "write errors counted",
        )
        assert plainhttp.metric(metrics, "secure_orca_audit_events_written_total", -1.0) == 0
        assert "cannot write (No space left on device)" in "".join(replica.process.lines)
