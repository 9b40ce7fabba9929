"""Audit an HTTPS endpoint: can a client that reaches it read ORCA load metrics (KEP-6315)?

Sends named vectors (no client certificate, a given user certificate, certificates the probe mints itself,
opt-in header variants, secret guesses, HTTP/2 and HTTP/1.1, cleartext on the same port, each --path) and
reports a leak when any response carries endpoint-load-metrics, endpoint-load-metrics-bin or ORCA data in
trailers. A positive control with the load balancer's credentials (--lb-cert/--lb-key and/or
--lb-secret-file) first shows the feature is on; without it a clean result is inconclusive. A timing check
compares wrong secrets differing early vs late (Mann-Whitney U test, p-value reported, exit status unaffected).

Traffic goes only to URL (and --control-url when given). Secrets are never printed.
Exit status: 0 no leak (positive control ok), 1 leak, 2 inconclusive, unreachable or bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from secure_orca.credentials import loader
from secure_orca.errors import CredentialError, UsageError
from secure_orca.probe.audit import ProbeConfig, ProbeError, probe
from secure_orca.probe.stats import TIMING_ALPHA
from secure_orca.probe.vectors import DEFAULT_PATH
from secure_orca.probe.verdict import Cause, ProbeResult, VectorResult, impersonation_summary

HELP = "audit an HTTPS endpoint for load-metrics leaks to clients that bypass the load balancer"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("url", metavar="URL", help="https://host:port of the endpoint to audit")
    a("--cacert", type=Path, metavar="FILE", help="CA bundle that signs the server's certificate (PEM)")
    a("-k", "--insecure", action="store_true", help="do not verify the server's certificate (as curl -k)")
    a("--lb-cert", type=Path, metavar="FILE", help="the load balancer's front-proxy client certificate (control)")
    a("--lb-key", type=Path, metavar="FILE", help="its private key")
    a("--lb-secret-file", type=Path, metavar="FILE", help="the load balancer's shared secret (control)")
    a(
        "--lb-header-only",
        action="store_true",
        help="the load balancer sends only the bare opt-in (KEP option 1): use that as the positive control",
    )
    a(
        "--lb-load-reader",
        action="store_true",
        help="the --lb-cert is a load reader's (option 2b): it must get reports, and its forged identity headers "
        "must NOT be believed (with a front-proxy certificate they must be, by design)",
    )
    a("--client-cert", type=Path, metavar="FILE", help="an ordinary client certificate to try")
    a("--client-key", type=Path, metavar="FILE", help="its private key")
    a(
        "--client-ca-cert",
        type=Path,
        metavar="FILE",
        help="the server's client CA (for ordinary users): the probe mints users from it named like the front "
        "proxy and the load reader, which must get nothing (needs --client-ca-key)",
    )
    a("--client-ca-key", type=Path, metavar="FILE", help="its private key (used only in memory, to sign)")
    a("--secret-guess-file", type=Path, metavar="FILE", help="a candidate secret to try, with its near misses")
    a(
        "--path",
        action="append",
        default=[],
        metavar="P",
        help=f"path to request, repeatable (e.g. paths that reach proxied backends; default {DEFAULT_PATH})",
    )
    a(
        "--body",
        metavar="JSON",
        default="",
        help="POST this JSON body to every --path instead of GET (a model server's completion endpoint, e.g. "
        """'{"prompt": "hi", "max_tokens": 1}'; at most 64 KiB)""",
    )
    a("--front-proxy-cn", metavar="NAME", help="CN of the minted certificates (default: --lb-cert's CN)")
    a("--control-url", metavar="URL", help="run the positive control against this URL instead (e.g. a backend)")
    a("--timing-samples", type=int, default=500, metavar="N", help="early/late pairs of the timing check (0: off)")
    a("--max-time", type=float, default=5.0, metavar="SECONDS", help="timeout of every socket operation (default 5)")
    a("--json", action="store_true", help="print the result as JSON on stdout (progress still on stderr)")


def _pair(cert: Path | None, key: Path | None, flag: str) -> None:
    if (cert is None) != (key is None):
        raise UsageError(f"--{flag}-cert and --{flag}-key must be given together")
    if cert is not None and key is not None:
        loader.read_key_pair(cert, key, f"--{flag}-cert", f"--{flag}-key")


MAX_BODY = 65536


def _body(text: str) -> bytes:
    """The --body flag: a JSON document (checked here, so a typo is not sent as the probe's every request)."""
    if not text:
        return b""
    if len(text.encode()) > MAX_BODY:
        raise UsageError(f"--body: longer than {MAX_BODY} bytes")
    try:
        json.loads(text)
    except ValueError:
        raise UsageError("--body: not a JSON document") from None
    return text.encode()


def _guess(path: Path) -> str:
    guess = loader.read_first_line(path, "--secret-guess-file")
    if guess is None:
        raise UsageError(f"--secret-guess-file: {path}: holds no secret")
    return guess


def build_config(args: argparse.Namespace) -> ProbeConfig:
    """Validate the flags and read the files they name; raise UsageError naming the flag at fault."""
    if args.timing_samples < 0:
        raise UsageError("--timing-samples: must be 0 (off) or more")
    if not 0 < args.max_time <= 600:
        raise UsageError("--max-time: must be between 0 and 600 seconds")
    for path in args.path:
        if not path.startswith("/"):
            raise UsageError(f"--path: {path!r} must start with /")
    try:
        if args.cacert is not None:
            loader.read_ca_bundle(args.cacert, "--cacert")
        _pair(args.lb_cert, args.lb_key, "lb")
        _pair(args.client_cert, args.client_key, "client")
        _pair(args.client_ca_cert, args.client_ca_key, "client-ca")
        secret = None
        if args.lb_secret_file is not None:
            secret = loader.read_secrets(args.lb_secret_file, "--lb-secret-file", private=False)[0]
        guess = _guess(args.secret_guess_file) if args.secret_guess_file is not None else None
    except CredentialError as error:
        raise UsageError(str(error)) from None
    return ProbeConfig(
        cacert=args.cacert,
        insecure=args.insecure,
        lb_cert=args.lb_cert,
        lb_key=args.lb_key,
        lb_secret=secret,
        client_cert=args.client_cert,
        client_key=args.client_key,
        secret_guess=guess,
        paths=tuple(args.path),
        timing_samples=args.timing_samples,
        timeout=args.max_time,
        front_proxy_cn=args.front_proxy_cn,
        control_url=args.control_url,
        lb_header_only=args.lb_header_only,
        lb_load_reader=args.lb_load_reader,
        client_ca_cert=args.client_ca_cert,
        client_ca_key=args.client_ca_key,
        body=_body(args.body),
    )


class Progress:
    """One line per request on stderr (rewritten in place on a terminal)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()

    def phase(self, text: str) -> None:
        print(f"probe: {text}", file=self.stream, flush=True)

    def result(self, index: int, total: int, result: VectorResult) -> None:
        line = f"[{index:3}/{total}] {_outcome_cell(result):17} {result.vector.name}"
        if result.impersonation is not None:
            line += f"  impersonation: {_impersonation_cell(result)}"
        if self.tty:
            end = "\n" if index == total or "leak" in (result.outcome, result.impersonation) else ""
            print(f"\r\x1b[K{line}", end=end, file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)


COLUMNS = ("OUTCOME", "IMPERSONATION", "GROUP", "VARIANT", "IDENTITY", "PROTOCOL", "PATH", "STATUS", "DETAIL")


def _is_control(r: VectorResult) -> bool:
    return r.vector.group == "control"


def _outcome_cell(r: VectorResult) -> str:
    """A control's report is what it is for: its row says ``control: report``, never ``leak``."""
    if _is_control(r):
        return "control: report" if r.outcome == "leak" else f"control: {r.outcome}"
    return r.outcome


def _impersonation_cell(r: VectorResult, lb_identity_believed: bool = True) -> str:
    if r.impersonation is None:
        return "-"
    if _is_control(r) and lb_identity_believed:  # the front proxy's identity headers: believed by design
        return "control: believed" if r.impersonation == "leak" else f"control: {r.impersonation}"
    return r.impersonation


def row(r: VectorResult, cause_of: dict[int, int], lb_identity_believed: bool = True) -> tuple[str, ...]:
    """One table row. A leak's value is printed whole in its cause above the table; the row names that cause."""
    v = r.vector
    detail = r.detail
    if r.impersonation is not None:
        detail = f"{r.identity_detail}; {detail}"
    if id(r) in cause_of:
        detail += f" (cause {cause_of[id(r)]})"
    return (
        _outcome_cell(r),
        _impersonation_cell(r, lb_identity_believed),
        v.group,
        v.variant,
        v.identity,
        v.protocol,
        v.path,
        str(r.status or "-"),
        detail,
    )


def format_causes(causes: list[Cause]) -> str:
    """Each cause first, then the values it leaked (whole) and its vectors under it, by group."""
    lines = []
    for n, cause in enumerate(causes, 1):
        lines.append(f"cause {n} of {len(causes)}: {cause.title}")
        for answer in cause.answers():
            lines.append(f"  {'believed' if cause.kind == 'identity' else 'answered'}: {answer}")
        lines.append(f"  {len(cause.results)} vectors:")
        for group, names in cause.by_group().items():
            lines.append(f"    {group} ({len(names)}): {', '.join(names)}")
    return "\n".join(lines)


def format_table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [COLUMNS, *rows]
    )


def format_summary(result: ProbeResult) -> str:
    lines = []
    if result.controls:
        parts = ", ".join(f"{c.vector.identity}/{c.vector.variant}: {_control_word(c)}" for c in result.controls)
        lines.append(f"positive control: {'ok' if result.control_ok else 'FAILED'} ({parts})")
    else:
        lines.append("positive control: none (no LB credentials given)")
    if result.identity_controls:
        believed = any(c.impersonation == "leak" for c in result.identity_controls)
        detail = result.identity_controls[0].identity_detail
        if result.lb_identity_believed:
            lines.append(f"front-proxy identity control: {'believed, by design' if believed else 'FAILED'} ({detail})")
        else:
            word = "BELIEVED (a leak)" if believed else "not believed, as it must be"
            lines.append(f"load-reader identity: {word} ({detail})")
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(result.counts().items()))
    lines.append(f"vectors: {len(result.results)} ({counts})")
    impersonation = impersonation_summary(result.results)
    if impersonation is not None:
        lines.append(f"impersonation: {impersonation}")
    if result.timing is not None:
        t = result.timing
        signal = "SUSPICIOUS: wrong secrets differing late take a different time" if t.suspicious else "no signal"
        lines.append(
            f"timing: {t.samples_per_kind} early/late pairs, secret length {t.secret_length}"
            f"{'' if t.length_known else ' (assumed)'}, median {t.median_early_us:.0f} us vs "
            f"{t.median_late_us:.0f} us, Mann-Whitney U p={t.test.p_value:.3g} ({signal} at alpha {TIMING_ALPHA})"
        )
    elif result.timing_error:
        lines.append(f"timing: not measured ({result.timing_error})")
    elif result.timing_skipped:
        lines.append(f"timing: skipped - {result.timing_skipped}")
    lines.append(f"verdict: {result.verdict} - {result.reason} (exit {result.exit_code}, {result.seconds:.1f}s)")
    return "\n".join(lines)


def _control_word(c: VectorResult) -> str:
    return "report" if c.outcome == "leak" else f"{c.outcome} ({c.detail})"


def run(args: argparse.Namespace) -> int:
    config = build_config(args)
    progress = Progress(sys.stderr)
    try:
        result = probe(args.url, config, on_result=progress.result, on_phase=progress.phase)
    except ProbeError as error:
        raise UsageError(str(error)) from None
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        causes = result.causes()
        if causes:
            print(format_causes(causes))
            print()
        cause_of = {id(r): n for n, c in enumerate(causes, 1) for r in c.results}
        believed = result.lb_identity_believed
        rows = [row(r, cause_of, believed) for r in [*result.controls, *result.identity_controls, *result.results]]
        print(format_table(rows))
        print()
        print(format_summary(result))
    return result.exit_code
