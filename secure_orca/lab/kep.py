"""docs/kep-6315-security.md: the evaluation as the KEP's own security section, rendered from one run's JSON
(pure). Every measured figure is a link to the JSON pointer it was read from, so tests/lab/test_kep.py can check
each against the JSON; the Go column is read from docs/kep-6315-go.json when it exists."""

from __future__ import annotations

from typing import Any

from secure_orca.lab.markdown import table
from secure_orca.lab.options import BURDEN, OPTIONS, OUT_OF_BAND, TITLES
from secure_orca.lab.recommend import FIGURE_ALPHA, THRESHOLDS, blast_radius, figures, stream_verdict_rows
from secure_orca.lab.results import Evaluation, Exposure, Instructions

UPSTREAM_COMMIT = "99d293ae0e2411ba5441f9f895955423ad65e5c4"  # kubernetes/kubernetes, read for this section
UPSTREAM = (
    "https://github.com/kubernetes/kubernetes/blob/"
    f"{UPSTREAM_COMMIT}/staging/src/k8s.io/apiserver/pkg/server/loadmetrics/handler.go"
)

# What each option asks of the load balancers and what existing clients lose (a description, not a measurement).
CREDENTIAL = {
    "header-only": "none: the opt-in header `endpoint-load-metrics-request: TEXT`",
    "front-proxy": "the front-proxy client certificate (kube's requestheader CA and allowed names)",
    "load-reader": "a load-reader client certificate from a CA of its own (`--endpoint-load-metrics-client-ca-file`)",
    "shared-secret": "a secret in the opt-in header (`TEXT; secret=…`), sent never-indexed",
    "front-proxy,shared-secret": "either the front-proxy certificate or the secret",
    "out-of-band": "the load-reader certificate, on a StreamCoreMetrics stream instead of the opt-in",
}
NEEDS = {
    "header-only": "Envoy: CSWRR and a request header to add. gRPC: nothing beyond its ORCA interceptor.",
    "front-proxy": "Envoy: CSWRR, the front-proxy certificate on the upstream TLS context, and it must strip "
    "`X-Remote-*` from clients. gRPC: a client certificate on the channel.",
    "load-reader": "Envoy: CSWRR and the load-reader certificate on the upstream TLS context. gRPC: a client "
    "certificate on the channel.",
    "shared-secret": "Envoy: the secret in a header (SDS or config). gRPC: a call credential or metadata.",
    "front-proxy,shared-secret": "either of the above.",
    "out-of-band": "Envoy: CSWRR with `enable_oob_load_report` (Envoy 1.40 here) and the load-reader certificate. "
    "gRPC: its OOB ORCA watcher.",
}
GATEWAY = (
    "Envoy Gateway: its BackendUtilization load balancer is CSWRR "
    "(https://gateway.envoyproxy.io/latest/tasks/traffic/backend-utilization/); whether 1.9 sets the opt-in header, "
    "an upstream client certificate and the out-of-band flag for it was not verified here."
)
LOSES = {
    "header-only": "nothing",
    "front-proxy": "nothing; clients that reach a replica directly get no report",
    "load-reader": "nothing; the load balancer must pass tokens on (it asserts no identity)",
    "shared-secret": "nothing",
    "front-proxy,shared-secret": "nothing",
    "out-of-band": "nothing; no request or response changes",
}
TEST_PLAN = [
    ("positive control", "the load balancer's own credential asks for a report", "a report (else inconclusive)"),
    ("header", "opt-in variants: formats, case, whitespace, duplicates, long and non-ASCII values, no cert",
     "no report, except option 1 (`TEXT`, as upstream answers it)"),
    ("identity", "no certificate, a user certificate, self-signed / wrong-CA / expired / wrong-EKU certificates "
     "with the load balancer's CN, and users of `--client-ca-file` with its CN (a shared-CA misconfiguration)",
     "no report"),
    ("secret", "empty, wrong, near-miss secrets (prefixes, one more, last changed), duplicates",
     "no report; timing p ≥ 0.001 with its positive controls caught"),
    ("spelling", "`endpoint-load-metrics-format` with TEXT, JSON, BIN", "no report"),
    ("impersonation", "forged `X-Remote-User/Group/Extra/Uid` in every spelling on selfsubjectreviews",
     "identity not believed; believed only from the front-proxy certificate (what it grants)"),
    ("oob", "StreamCoreMetrics without the load-reader certificate, with other content types or forged headers",
     "no message"),
    ("through the load balancer", "the same vectors through Envoy, then Envoy's weights under traffic and a step",
     "no report; the weights leave 1 and move"),
]  # fmt: skip


def link(value: Any, pointer: str, data: str) -> str:
    """A figure and the JSON pointer it was read from."""
    return f"[{value}]({data}#{pointer})"


def _get(document: dict[str, Any], pointer: str) -> Any:
    node: Any = document
    for part in pointer.strip("/").split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def resolve(document: dict[str, Any], pointer: str) -> Any:
    """The value at a JSON pointer (as ``link`` writes them; tests follow every link back)."""
    return _get(document, pointer)


def go_cell(go: dict[str, Any] | None, option: str) -> str:
    if go is None or option not in go.get("options", {}):
        return "not measured"
    cell = go["options"][option]
    r = cell["ratio_per_request"]
    return (
        f"x{r['median']:g} [{r['min']:g}, {r['max']:g}] per request ÷ off (n = {r['n']}), exposure {cell['exposure']} "
        f"(docs/kep-6315-go.json, commit {go.get('commit', 'unknown')[:12]})"
    )


def option_table(results: Evaluation, option: str, data: str, go: dict[str, Any] | None) -> list[str]:
    base = f"/options/{option}"
    cell = results.options[option]
    f = next(x for x in figures(results) if x.option == option)
    bypass = cell.bypass
    exposure = (
        f"bypass client: {link(bypass.verdict, base + '/bypass/verdict', data)}, "
        f"{link(bypass.leaks, base + '/bypass/leaks', data)} of {link(bypass.vectors, base + '/bypass/vectors', data)}"
        " vectors read a report"
    )
    via = cell.through_lb
    if isinstance(via, Exposure):
        exposure += f"; through Envoy: {link(via.verdict, base + '/through_lb/verdict', data)}"
        if via.weights_moved is not None:
            exposure += f", weights moved: {link(via.weights_moved, base + '/through_lb/weights_moved', data)}"
    counted = results.instructions
    cost = "not counted"
    if isinstance(counted, Instructions):
        ratio = counted.options[option].request_ratio
        cost = f"x{link(ratio.median, f'/instructions/options/{option}/request_ratio/median', data)} per request ÷ off"
    burden = BURDEN[option]
    rows = [
        ["the credential", CREDENTIAL[option]],
        ["what else it grants in kube-apiserver (measured)", link(bypass.grants, base + "/bypass/grants", data)],
        ["a leaked or misissued credential", blast_radius(f)],
        ["new flags", burden["server"]],
        ["rotation", burden["rotate"]],
        ["what Envoy and gRPC need", NEEDS[option]],
        ["what existing clients lose", LOSES[option]],
        ["exposure (measured)", exposure],
        ["cost in this Python server (measured)", cost],
        ["cost and exposure in Go", go_cell(go, option)],
    ]
    return [f"#### {TITLES[option]}\n", table(["", ""], rows), ""]


def decision_section(results: Evaluation, data: str) -> list[str]:
    thresholds = [[t.figure, f"x{t.factor:g} ({t.unit})", t.feeds, t.why] for t in THRESHOLDS.values()]
    tests = [
        [c.figure, f"{c.period:g} s", f"x{c.ratio:g}", "counted" if c.p is None else f"{c.p:.2g}", c.side or "-"]
        for c in stream_verdict_rows(results)
    ]
    return [
        "### Alpha decision, and out of band as the beta path\n",
        f"Alpha default: {link(results.recommended_option, '/recommended_option', data)}. Beta path: "
        f"{link(results.beta_path, '/beta_path', data)}. The decision is a stated policy over what the probe "
        "measures exactly (exposure, grants, the blast radius of a leaked or misissued credential, the operational "
        "burden) with KEP-6315's phasing as a rule (out of band is the beta path, never the alpha default); a "
        f"figure overturns it only past its threshold, sampled figures with a Mann-Whitney U test at p < "
        f"{FIGURE_ALPHA:g}. Reasons (figure-free, so runs that agree give the same list):\n",
        *[f"- {link(reason, f'/reasons/{i}', data)}" for i, reason in enumerate(results.reasons)],
        "",
        table(["figure", "threshold", "feeds", "practical size"], thresholds),
        "",
        "Out of band against in band at matched periods (ratio of medians; p of the rank test):\n",
        table(["figure", "period", "ratio", "p", "past its threshold"], tests),
        "",
    ]


def threat_model(results: Evaluation, data: str) -> list[str]:
    one = results.options["header-only"].bypass
    base = "/options/header-only/bypass"
    return [
        "### Threat model\n",
        "- What a report discloses: the replica's live CPU utilization and request rate (upstream: "
        "`cpu_utilization`, `rps_fractional`), sampled every interval. Nothing in it is writable by a client: a "
        "leak exposes, it does not steer.",
        "- Who must not read it: any client that reaches a replica without the load balancer (the bypass client), "
        "and any client of the load balancer (Envoy strips the report).",
        "- Severity for kube-apiserver: `/healthz`, `/livez`, `/readyz` and `/version` already answer anonymous "
        "clients (system:public-info-viewer); `/metrics` is gated by RBAC and shows cumulative counters and "
        "histograms by verb and resource, scraped. A report adds a live per-replica utilization at the sampler's "
        "resolution (0.1 s here), to anyone who can send a request: a side channel on other tenants' activity "
        "(when a controller starts a list, how busy a replica is before a costly request). Disclosure only; low "
        "on its own, but new to anonymous clients.",
        f"- Upstream today: kubernetes/kubernetes at `{UPSTREAM_COMMIT[:12]}`, [`handler.go`]({UPSTREAM}), answers "
        "`endpoint-load-metrics-request: TEXT` (exact and case-sensitive, the first value only) with "
        "`cpu_utilization` and `rps_fractional`, deletes the request header before the inner handlers, and checks "
        "no authorization: option 1. Measured here, option 1 leaks to the bypass client through "
        f"{link(one.leaks, base + '/leaks', data)} of {link(one.vectors, base + '/vectors', data)} vectors.",
        "",
    ]


def test_plan(results: Evaluation, data: str) -> list[str]:
    rows = [[group, sends, expected] for group, sends, expected in TEST_PLAN]
    secret = results.options["shared-secret"].bypass
    timing = "not run"
    if secret.timing_p_value is not None:
        timing = f"p = {link(secret.timing_p_value, '/options/shared-secret/bypass/timing_p_value', data)}"
        if secret.timing_detectable_us is not None:
            pointer = "/options/shared-secret/bypass/timing_detectable_us"
            timing += f"; its positive controls caught a leak of {link(secret.timing_detectable_us, pointer, data)} µs"
    return [
        "### Test plan: the probe's vectors and their expected outcomes\n",
        "`secure-orca probe URL` runs every vector against a replica (and through the load balancer); each row is a "
        "group of vectors with the outcome a correct server gives under the alpha default. Any report where none "
        "is expected fails the test; a failed positive control makes the run inconclusive, never a pass.\n",
        table(["group", "what it sends", "expected"], rows),
        "",
        f"Secret comparison timing in this run: {timing}.\n",
    ]


def render_kep(results: Evaluation, data: str = "security-options.json", go: dict[str, Any] | None = None) -> str:
    """The section, its figures linked to ``data`` (the JSON beside it)."""
    p = results.provenance

    def commit(key: str) -> str:
        return link(p[key], f"/provenance/{key}", data) if key in p else "not recorded"

    parts = [
        "## Security considerations (KEP-6315, measured)\n",
        "Generated by `secure-orca evaluate --publish` from "
        f"[{data}]({data}) (commit {commit('commit')} at start, {commit('commit_end')} at the end); every figure "
        "links to the JSON pointer it was read from. The reasoning and the full tables are in "
        "[security-options.md](security-options.md).\n",
        *([f"Not a run of its own: {p['rendered']}\n"] if "rendered" in p else []),
        *threat_model(results, data),
        "### The options\n",
        *[line for option in OPTIONS for line in option_table(results, option, data, go)],
        GATEWAY + "\n",
        *decision_section(results, data),
        *test_plan(results, data),
    ]
    if OUT_OF_BAND not in results.options:
        parts.append("Option 4 was not measured in this run.\n")
    return "\n".join(parts)
