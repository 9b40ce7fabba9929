"""What the certificate chains a client can present cost us to verify, against one full
TLS handshake, and what 15 crafted chains from one client do to another client's latency.

    python -m benchmarks.verification [--repeats N] [--rounds N] [--skip-latency] [--skip-instructions]

1. CPU (this thread's, ``time.thread_time_ns``; median of the repeats) of ``ChainCache.compute`` (a connection's
   cache miss: PEM to DER, parse, verify) for the worst shapes a client can present, divided by the server side of
   one full TLS 1.3 handshake with a client certificate (in process, memory BIOs, ``http.tls.make_server_context``,
   OpenSSL's default key share X25519). Target: every ratio <= 1.
3. Our share of a new connection presenting the front-proxy certificate: instructions (callgrind) of the server's
   middlewares on a connection's first request, with and without the certificate.
2. At the audit's scale: another client's p99 over sequential ``/healthz`` requests on a real ``serve``
   (``--client-ca-file``), with and without an attacker opening 15 connections, each presenting a client-CA leaf
   and 7 crafted RSA-8192 "intermediates" named as its CA. Target: p99 with / p99 without <= 2.

Figures are ratios from one run; the crafted keys are moduli nobody holds (no private key is needed to make a
certificate carry them, and a public-key operation costs the same for any modulus of that size).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.credentials.kinds import KeyPair
from secure_orca.server.http.tls import make_server_context
from secure_orca.x509.cache import ChainCache
from secure_orca.x509.chainverifier import ChainVerifier
from secure_orca.x509.verify import MAX_VERIFICATION_COST

GO_MAX_EXPONENT = (1 << 31) - 1
AUDIT_EXPONENT = (1 << 63) - 25  # the audit's: just under 2^63 (refused before any operation)


def _der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def decoy(issuer: pki.Issued, bits: int, exponent: int, index: int) -> bytes:
    """A CA certificate with ``issuer``'s name and an RSA key nobody holds: a signature check that fails."""
    modulus = (1 << (bits - 1)) | (2 * index + 1) | (1 << (bits - 2))
    public = rsa.RSAPublicNumbers(exponent, modulus).public_key()
    name = issuer.cert.subject
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(issuer.key, hashes.SHA256())
    )
    return _der(cert)


def shapes(ca: pki.Issued) -> dict[str, list[bytes]]:
    """Presented chains, leaf first, each at most 8 certificates (cache.MAX_CHAIN_CERTS)."""
    user = pki.issue(ca, "alice")
    leaf = _der(user.cert)
    return {
        "a real client-CA leaf": [leaf],
        "leaf + 7 x RSA-8192, e = 65537": [leaf, *(decoy(ca, 8192, 65537, i) for i in range(7))],
        "leaf + 7 x RSA-8192, e = 2^31-1 (Go's largest)": [
            leaf,
            *(decoy(ca, 8192, GO_MAX_EXPONENT, i) for i in range(7)),
        ],
        "leaf + 7 x RSA-8192, e = 2^63-25 (the audit's)": [
            leaf,
            *(decoy(ca, 8192, AUDIT_EXPONENT, i) for i in range(7)),
        ],
        "leaf + 7 x RSA-4096, e = 2^31-1": [leaf, *(decoy(ca, 4096, GO_MAX_EXPONENT, i) for i in range(7))],
    }


def cpu_ns(work: Callable[[], object], repeats: int) -> float:
    """Median thread CPU time of ``work``, in nanoseconds."""
    samples = []
    for _ in range(repeats):
        start = time.thread_time_ns()
        work()
        samples.append(time.thread_time_ns() - start)
    return statistics.median(samples)


def handshake_server_ns(server: ssl.SSLContext, client: ssl.SSLContext) -> int:
    """The server side's thread CPU of one full handshake (memory BIOs; the client's work is not counted)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    spent = 0
    server_done = client_done = False
    while not (server_done and client_done):
        if not client_done:
            try:
                cli.do_handshake()
                client_done = True
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        start = time.thread_time_ns()
        try:
            srv.do_handshake()
            server_done = True
        except ssl.SSLWantReadError:
            pass
        spent += time.thread_time_ns() - start
        c_in.write(s_out.read())
    if srv.getpeercert(binary_form=True) is None:
        raise RuntimeError("the client certificate did not reach the server")
    return spent


def contexts(workdir: Path, ca: pki.Issued) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server_ca = pki.make_ca("serving-ca")
    serving = pki.issue(server_ca, "localhost", dns=("localhost",), eku=None)
    server = make_server_context(KeyPair(serving.cert_pem(), serving.key_pem()), _der(ca.cert))
    user = pki.issue(ca, "alice")
    (workdir / "user.pem").write_bytes(user.cert_pem())
    (workdir / "user.key").write_bytes(user.key_pem())
    client = ssl.create_default_context(cadata=server_ca.cert_pem().decode())
    client.load_cert_chain(workdir / "user.pem", workdir / "user.key")
    return server, client


def verification_ratios(workdir: Path, repeats: int) -> list[tuple[str, float, int, float]]:
    """(shape, CPU us, signature cost units, ratio to one handshake); the first row is the handshake itself."""
    from secure_orca.x509.chainverifier import parsed

    ca = pki.make_ca("client-ca")
    server, client = contexts(workdir, ca)
    handshake = statistics.median(handshake_server_ns(server, client) for _ in range(repeats))
    rows = [("one full TLS 1.3 handshake (server side, client certificate)", handshake / 1000, 0, 1.0)]
    now = dt.datetime.now(dt.UTC)
    for name, chain in shapes(ca).items():
        verifier = ChainVerifier([ca.cert])
        pems = tuple(ssl.DER_cert_to_PEM_cert(der) for der in chain)

        def verify(verifier: ChainVerifier = verifier, pems: tuple[str, ...] = pems) -> None:
            parsed.cache_clear()  # nothing left from the previous repeat
            ChainCache(verifier).compute(pems, now)  # what a connection's cache miss runs

        spent = cpu_ns(verify, repeats)
        rows.append((name, spent / 1000, verifier.signature_cost // repeats, spent / handshake))
    return rows


# ---- 3. our share of a new connection's cost (instructions, callgrind) ------------------------------------

CONNECTION_MODES = ("no-cert", "adapter", "full")


def connection_work(mode: str, count: int) -> None:
    """``count`` new connections of one opt-in request each through the server's middlewares (load report
    outside authentication, as ``assembly.build_app``), presenting the front-proxy certificate. ``no-cert``: no
    certificate; ``adapter``: the certificate is PEM-encoded and named as the adapter's ``tls_extension`` does,
    but no chain reaches the middlewares; ``full``: the chain reaches them."""
    import asyncio

    from secure_orca.authz.authority import Authority
    from secure_orca.authz.memo import ConnectionMemo
    from secure_orca.authz.policy import Mode, Policy
    from secure_orca.server.authentication import AuthenticationConfig, AuthenticationMiddleware
    from secure_orca.server.http.tls import subject_name
    from secure_orca.server.middleware import LoadReportMiddleware
    from secure_orca.server.sampler import Sampler
    from secure_orca.server.trust import CONNECTION_KEY, TrustService

    ca = pki.make_ca("front-proxy-ca")
    leaf = _der(pki.issue(ca, pki.FRONT_PROXY_CN).cert)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    authority = Authority.build(Policy(frozenset({Mode.FRONT_PROXY})), ChainVerifier([ca.cert], [pki.FRONT_PROXY_CN]))
    trust = TrustService(authority)
    authenticated = AuthenticationMiddleware(app, AuthenticationConfig(), trust)
    sampler = Sampler()
    sampler.header = (b"endpoint-load-metrics", b"TEXT cpu_utilization=0.1")
    stack = LoadReportMiddleware(authenticated, enabled=True, trust=trust, sampler=sampler)

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b""}

    granted: list[bool] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            granted.append(any(name == b"endpoint-load-metrics" for name, _ in message["headers"]))

    async def connections() -> None:
        for _ in range(count + 1):  # the first verifies the chain: in both windows, so it cancels out
            chain: list[str] = []
            if mode != "no-cert":
                chain = [ssl.DER_cert_to_PEM_cert(leaf)]
                subject_name(leaf)
            tls = {"client_cert_chain": chain if mode == "full" else []}
            extensions = {CONNECTION_KEY: ConnectionMemo(), "tls": tls}
            headers = [(b"endpoint-load-metrics-request", b"TEXT")]
            scope = {"type": "http", "path": "/", "headers": headers, "extensions": extensions, "client": ("::1", 1)}
            await stack(scope, receive, send)

    asyncio.run(connections())
    if set(granted) != {mode == "full"}:
        raise RuntimeError(f"{mode}: unexpected report outcome")


def connection_instructions(workdir: Path, short: int = 10, long: int = 110) -> dict[str, float]:
    """Instructions per connection of each mode: (run of ``long`` - run of ``short``) / (long - short)."""
    from secure_orca.lab.instrcount import dump_total

    per: dict[str, float] = {}
    for mode in CONNECTION_MODES:
        totals = []
        for count in (short, long):
            out = workdir / f"callgrind.{mode}.{count}"
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
            command += ["-m", "benchmarks.verification", "--connection-work", mode, str(count)]
            subprocess.run(
                command, check=True, capture_output=True, timeout=600, env={**os.environ, "PYTHONHASHSEED": "0"}
            )
            totals.append(dump_total(out))
        per[mode] = (totals[1] - totals[0]) / (long - short)
    return per


# ---- 2. another client's p99 while one client presents crafted chains -------------------------------------


def latencies(url: str, verify: Path, count: int, busy: Callable[[], bool] = lambda: False) -> list[float]:
    """``count`` sequential requests on one connection, and more while ``busy()``."""
    with httpx.Client(verify=ssl.create_default_context(cafile=verify), http2=True) as http:
        samples: list[float] = []
        while len(samples) < count or busy():
            start = time.perf_counter()
            http.get(url + "/healthz").raise_for_status()
            samples.append(time.perf_counter() - start)
    return samples


def p99(samples: Sequence[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def crafted_clients(dev: pki.DevPKI, workdir: Path, connections: int, decoys: int = 7) -> list[tuple[Path, Path]]:
    """(chain file, key file) of ``connections`` client-CA leaves, each followed by ``decoys`` crafted RSA-8192
    CAs (0: plain new client-CA connections, the attack's cost without its chains)."""
    ca = pki.Issued(
        x509.load_pem_x509_certificate(dev.cert("client_ca").read_bytes()),
        serialization.load_pem_private_key(dev.key("client_ca").read_bytes(), None),  # type: ignore[arg-type]
    )
    extra = b"".join(ssl.DER_cert_to_PEM_cert(decoy(ca, 8192, GO_MAX_EXPONENT, i)).encode() for i in range(decoys))
    files = []
    for i in range(connections):
        user = pki.issue(ca, f"attacker-{i}")
        chain, key = workdir / f"attacker-{i}.pem", workdir / f"attacker-{i}.key"
        chain.write_bytes(user.cert_pem() + extra)
        key.write_bytes(user.key_pem())
        files.append((chain, key))
    return files


def attack(url: str, server_ca: Path, files: Sequence[tuple[Path, Path]]) -> None:
    """One new connection per crafted chain (run in its own process: it must not share the measuring client's
    interpreter)."""
    for chain, key in files:
        context = ssl.create_default_context(cafile=server_ca)
        context.load_cert_chain(chain, key)
        with httpx.Client(verify=context, http2=True) as http:
            http.get(url + "/healthz")


def attacker_running(process: subprocess.Popen[bytes]) -> Callable[[], bool]:
    return lambda: process.poll() is None


def latency_ratios(workdir: Path, samples: int, rounds: int, decoys: int = 7) -> list[tuple[float, float]]:
    """Per round: another client's p99 without, then with, 15 new crafted chains from one client (the attacker
    in its own process, new chains each round: a chain already verified costs nothing)."""
    from secure_orca.lab import replicas as launch

    dev = devpki.generate(workdir / "pki")
    files = crafted_clients(dev, workdir, 15 * rounds, decoys)
    argv = launch.serve_argv(dev, ["--client-ca-file", str(dev.cert("client_ca"))])
    found = []
    with launch.replicas([argv]) as (replica,):
        latencies(replica.url, dev.cert("ca"), samples // 4)  # warm-up
        for index in range(rounds):
            command = [sys.executable, "-m", "benchmarks.verification", "--attack", replica.url, str(dev.cert("ca"))]
            paths = [str(p) for pair in files[15 * index : 15 * (index + 1)] for p in pair]
            attacker = subprocess.Popen([*command, *paths])
            loaded = latencies(replica.url, dev.cert("ca"), samples, attacker_running(attacker))
            if attacker.wait(timeout=300) != 0:
                raise RuntimeError("the attacker failed")
            quiet = latencies(replica.url, dev.cert("ca"), len(loaded))
            found.append((p99(quiet), p99(loaded)))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.verification", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--samples", type=int, default=400, help="requests per latency run")
    parser.add_argument("--rounds", type=int, default=5, help="latency rounds (attacks)")
    parser.add_argument("--decoys", type=int, default=7, help="crafted certificates per attacking chain")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-instructions", action="store_true", help="skip our per-connection share (valgrind)")
    parser.add_argument("--connection-work", nargs=2, metavar=("MODE", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument("--attack", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.attack:
        url, server_ca, *paths = args.attack
        attack(url, Path(server_ca), [(Path(c), Path(k)) for c, k in zip(paths[::2], paths[1::2], strict=True)])
        return 0
    if args.connection_work:
        connection_work(args.connection_work[0], int(args.connection_work[1]))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(f"per-verification bound: {MAX_VERIFICATION_COST} signature-cost units\n")
        print("| presented chain | CPU (us) | cost units | x handshake |")
        print("|---|---:|---:|---:|")
        for name, us, units, ratio in verification_ratios(workdir, args.repeats):
            print(f"| {name} | {us:,.0f} | {units} | {ratio:.2f} |")
        if not args.skip_instructions:
            per = connection_instructions(workdir)
            print("\n| new connection, one opt-in request, middlewares only | instructions | over no-cert |")
            print("|---|---:|---:|")
            for mode in CONNECTION_MODES:
                print(f"| {mode} | {per[mode]:,.0f} | {per[mode] - per['no-cert']:+,.0f} |")
        if not args.skip_latency:
            rounds = latency_ratios(workdir, args.samples, args.rounds, args.decoys)
            print(f"\n| round | p99 alone (ms) | beside 15 connections, {args.decoys} crafted each (ms) | ratio |")
            print("|---|---:|---:|---:|")
            for index, (quiet, loaded) in enumerate(rounds, 1):
                print(f"| {index} | {quiet * 1000:.1f} | {loaded * 1000:.1f} | {loaded / quiet:.2f} |")
            ratio = statistics.median(loaded / quiet for quiet, loaded in rounds)
            print(f"\nmedian ratio: x{ratio:.2f} (target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
