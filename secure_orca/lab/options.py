"""KEP-6315's options as the evaluation names them: the value of ``--endpoint-load-metrics-auth``, the title
in the matrix, and what each asks of the operator (pure data)."""

from __future__ import annotations

from secure_orca import kep_options

OPTIONS = tuple(o.name for o in kep_options.OPTIONS)
OUT_OF_BAND = kep_options.OUT_OF_BAND.name  # option 4: no in-band report; the stream entitled by 2b's certificate
TITLES = {
    "header-only": "1. header only",
    "front-proxy": "2. front-proxy client certificate",
    "load-reader": "2b. load-reader client certificate",
    "shared-secret": "3. shared secret",
    "front-proxy,shared-secret": "2 or 3 (either grants)",
    "out-of-band": "4. out-of-band stream (certificate)",
}

# New kube-apiserver flags each option adds (operational burden; KEP-6315's own feature gate and
# --enable-endpoint-load-metrics are common to all): option 2 reuses --requestheader-client-ca-file and
# --requestheader-allowed-names; 2b adds --endpoint-load-metrics-client-ca-file and -allowed-names; 3
# --endpoint-load-metrics-secret-file; 4 adds 2b's and --endpoint-load-metrics-oob(-min-interval).
NEW_FLAGS = {"header-only": 0, "front-proxy": 0, "load-reader": 2, "shared-secret": 1, "front-proxy,shared-secret": 1,
             "out-of-band": 4}  # fmt: skip


def auth_mode(option: str) -> str:
    """The replica's ``--endpoint-load-metrics-auth`` for ``option``: option 4's replica is in load-reader mode
    (the stream is served in certificate modes) and its load balancer never opts in."""
    return kep_options.option_named(option).auth


BURDEN = {
    "header-only": {
        "server": "feature gate + --enable-endpoint-load-metrics",
        "load balancer": "set the opt-in header; strip ORCA headers",
        "rotate": "nothing",
        "if misconfigured": "any client that reaches a replica directly reads its load",
    },
    "front-proxy": {
        "server": "--requestheader-client-ca-file, --requestheader-allowed-names (kube-apiserver already has both)",
        "load balancer": "present the front-proxy client certificate upstream; set the opt-in; strip ORCA headers",
        "rotate": "front-proxy certificate (kubeadm: yearly) and CA, with overlap; reloaded live",
        "if misconfigured": "no reports (refusal counted by reason); never a leak",
    },
    "load-reader": {
        "server": "--endpoint-load-metrics-client-ca-file, --endpoint-load-metrics-allowed-names (a CA and a "
        "certificate kube-apiserver does not have today)",
        "load balancer": "present the load-reader certificate upstream; set the opt-in; strip ORCA and identity "
        "headers; pass tokens on (it asserts no identity, so it fronts token users only)",
        "rotate": "load-reader certificate and CA, with overlap; reloaded live",
        "if misconfigured": "no reports (refusal counted by reason); never a leak, never an identity",
    },
    "shared-secret": {
        "server": "--endpoint-load-metrics-secret-file (0600)",
        "load balancer": "put the secret in the opt-in header (SDS file); strip ORCA headers",
        "rotate": "the secret on both sides: add new, switch LB, remove old; reloaded live",
        "if misconfigured": "no reports; a leaked secret grants reports to anyone until rotated",
    },
    "front-proxy,shared-secret": {
        "server": "both of the above",
        "load balancer": "either credential",
        "rotate": "whichever is in use (both while migrating)",
        "if misconfigured": "as the weaker of the two: a leaked secret grants",
    },
    "out-of-band": {
        "server": "option 2b's flags; the stream is on with them (--endpoint-load-metrics-oob, floor "
        "--endpoint-load-metrics-oob-min-interval 1s)",
        "load balancer": "CSWRR with enable_oob_load_report and oob_reporting_period (Envoy 1.40, `secure-orca "
        "envoy-config --out-of-band`), the load-reader certificate upstream; no opt-in; strip ORCA headers",
        "rotate": "load-reader certificate and CA, with overlap; reloaded live (a removed entitlement ends the "
        "open stream)",
        "if misconfigured": "no reports (a status on the stream; the weights fall back); never a leak, never an "
        "identity",
    },
}
