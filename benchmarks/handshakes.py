"""Server CPU per TLS handshake for every key-exchange group and signature scheme a client can choose, as a
ratio to the X25519 handshake of the same run (target: none above 3x).

    python -m benchmarks.handshakes [HANDSHAKES_PER_CASE] [ROUNDS]

One replica per server key type (the development PKI's ECDSA P-256, and RSA-2048, RSA-4096 and ECDSA P-384
issued by its CA); each case is one client offer (one group, one signature scheme, one TLS version) made
HANDSHAKES times on new connections; the cases are interleaved over ROUNDS rounds. CPU is the server process's
time on CPU, all threads (/proc/PID/task/*/schedstat, in ns), over the case, divided by the handshakes; the
ratios are to the X25519 TLS 1.3 handshake of the same round, on the same key and on the P-256 key (median of
rounds, [min, max]). Refused offers (finite-field
groups) are measured too: their cost is the refusal's.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from secure_orca import pki
from secure_orca.credentials import devpki
from secure_orca.lab import replicas as launch
from secure_orca.lab.procfs import process_cpu_schedstat as process_cpu  # ns, not ticks
from secure_orca.server.http import tls_policy

TLS13, TLS12 = ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2
FINITE_FIELD = ("ffdhe2048", "ffdhe8192")


@dataclass(frozen=True)
class Case:
    key: str  # the server's key type
    version: ssl.TLSVersion
    group: str
    sigalg: str

    @property
    def name(self) -> str:
        return f"{self.key:9s} {self.version.name[3:]:6s} {self.group:10s} {self.sigalg}"


def cases() -> list[Case]:
    found: list[Case] = []
    for key, tls13, tls12 in (
        ("ECDSA-256", ["ecdsa_secp256r1_sha256"], ["ECDSA+SHA256", "ECDSA+SHA384", "ECDSA+SHA512", "ECDSA+SHA1"]),
        ("ECDSA-384", ["ecdsa_secp384r1_sha384"], ["ECDSA+SHA256", "ECDSA+SHA384", "ECDSA+SHA512"]),
        (
            "RSA-2048",
            ["rsa_pss_rsae_sha256", "rsa_pss_rsae_sha384", "rsa_pss_rsae_sha512"],
            ["RSA+SHA256", "RSA+SHA384", "RSA+SHA512", "rsa_pss_rsae_sha256", "rsa_pss_rsae_sha512", "RSA+SHA1"],
        ),
        ("RSA-4096", ["rsa_pss_rsae_sha256", "rsa_pss_rsae_sha512"], ["RSA+SHA256", "rsa_pss_rsae_sha512"]),
    ):
        for group in (*tls_policy.GROUPS, *FINITE_FIELD):
            found.append(Case(key, TLS13, group, tls13[0]))
        found += [Case(key, TLS13, "X25519", sigalg) for sigalg in tls13[1:]]
        # TLS 1.2: the groups also list the curves accepted for ECDSA certificates (RFC 8422 section 5.1), so an
        # ECDSA key's own curve must be offered, and the server's preference (X25519 first) picks among them.
        curve = {"ECDSA-256": "P-256", "ECDSA-384": "P-384"}.get(key)
        for group in tls_policy.GROUPS:
            offered = group if curve is None or group == curve else f"{group}:{curve}"
            found.append(Case(key, TLS12, offered, tls12[0]))
        found += [Case(key, TLS12, "X25519" + (f":{curve}" if curve else ""), sigalg) for sigalg in tls12[1:]]
    return found


def server_key(kind: str) -> rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey:
    if kind.startswith("RSA-"):
        return rsa.generate_private_key(65537, int(kind[4:]))
    return ec.generate_private_key(ec.SECP256R1() if kind == "ECDSA-256" else ec.SECP384R1())


def write_server_cert(dev: pki.DevPKI, kind: str, root: Path) -> tuple[Path, Path]:
    ca_key = serialization.load_pem_private_key(dev.key("ca").read_bytes(), None)
    ca = x509.load_pem_x509_certificate(dev.cert("ca").read_bytes())
    key = server_key(kind)
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    cert_path, key_path = root / f"{kind}.crt", root / f"{kind}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def client_context(dev: pki.DevPKI, case: Case) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(dev.cert("ca")))
    context.minimum_version = context.maximum_version = case.version
    tls_policy.restrict_groups(context, tuple(case.group.split(":")))
    tls_policy.restrict_sigalgs(context, case.sigalg)
    return context


def handshake(replica: launch.Replica, context: ssl.SSLContext) -> bool:
    """One full handshake on a new connection; False when the server refused it."""
    raw = socket.create_connection((replica.host, replica.port))
    try:
        context.wrap_socket(raw, server_hostname="localhost").close()
        return True
    except ssl.SSLError:
        return False
    finally:
        raw.close()


def measure(replica: launch.Replica, context: ssl.SSLContext, count: int) -> tuple[float, int]:
    """Server CPU seconds per handshake, and how many handshakes completed."""
    pid = replica.process.popen.pid
    before = process_cpu(pid)
    done = sum(handshake(replica, context) for _ in range(count))
    return (process_cpu(pid) - before) / count, done


def cases_tls13_first(all_cases: list[Case], key: str) -> str:
    """The first TLS 1.3 signature scheme measured for ``key`` (its X25519 case is that key's baseline)."""
    return next(case.sigalg for case in all_cases if case.key == key and case.version is TLS13)


def spread(values: list[float], baseline: list[float]) -> str:
    """Median [min, max] of per-round ratios."""
    ratios = [value / base for value, base in zip(values, baseline, strict=True) if base]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]" if ratios else "-"


def main(count: int, rounds: int, out: Callable[[str], object] = print) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dev = devpki.generate(root / "pki")
        all_cases = cases()
        argvs = []
        for kind in dict.fromkeys(case.key for case in all_cases):
            cert, key = write_server_cert(dev, kind, root)
            argv = launch.serve_argv(dev, ["--tls-cert-file", str(cert), "--tls-private-key-file", str(key)])
            argvs.append(argv)  # later flags win: this key replaces the dev PKI's
        with launch.replicas(argvs) as started:
            by_key = dict(zip(dict.fromkeys(case.key for case in all_cases), started, strict=True))
            contexts = {case: client_context(dev, case) for case in all_cases}
            baseline = Case("ECDSA-256", TLS13, "X25519", "ecdsa_secp256r1_sha256")
            per_round: dict[Case, list[float]] = {case: [] for case in all_cases}
            completed: dict[Case, int] = dict.fromkeys(all_cases, 0)
            for _ in range(rounds):
                for case in all_cases:
                    cpu, done = measure(by_key[case.key], contexts[case], count)
                    per_round[case].append(cpu)
                    completed[case] += done
            out(f"handshakes per case per round: {count}, rounds: {rounds}")
            out(
                "| server key | TLS | groups offered | signature scheme | completed | server CPU ms/handshake | "
                "÷ X25519, same key | ÷ X25519, P-256 key |"
            )
            out("|---|---|---|---|---|---|---|---|")
            for case in all_cases:
                same_key = Case(case.key, TLS13, "X25519", cases_tls13_first(all_cases, case.key))
                values = per_round[case]
                out(
                    f"| {case.key} | {case.version.name[3:].replace('_', '.')} | {case.group} | {case.sigalg} | "
                    f"{completed[case]}/{count * rounds} | {statistics.median(values) * 1000:.3f} | "
                    f"{spread(values, per_round[same_key])} | {spread(values, per_round[baseline])} |"
                )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200, int(sys.argv[2]) if len(sys.argv) > 2 else 3)
