"""kube's authentication metrics (server.metrics), held against the values of kubernetes/apiserver
pkg/endpoints/filters/metrics.go at 24a394e516bfda066d7e2221d7d92c052de27c54; and no load value on /metrics."""

from __future__ import annotations

import itertools

from prometheus_client import generate_latest

from secure_orca.authn.authenticator import Outcome
from secure_orca.authn.user import UserInfo
from secure_orca.server.metrics import Metrics, compress_username
from secure_orca.server.sampler import Sampler

# Copied by hand from the cited file, not computed: ExponentialBuckets(0.001, 2, 15).
KUBE_BUCKETS = [
    0.001,
    0.002,
    0.004,
    0.008,
    0.016,
    0.032,
    0.064,
    0.128,
    0.256,
    0.512,
    1.024,
    2.048,
    4.096,
    8.192,
    16.384,
]
KUBE = {
    "authentication_attempts": ("counter", ["result"], "Counter of authenticated attempts."),
    "authentication_duration_seconds": (
        "histogram",
        ["result"],
        "Authentication duration in seconds broken out by result.",
    ),
    "authenticated_user_requests": (
        "counter",
        ["username"],
        "Counter of authenticated requests broken out by username.",
    ),
}


def _metrics() -> Metrics:
    metrics = Metrics(Sampler(1.0), lambda: 0)
    metrics.on_authentication(Outcome(UserInfo("jane@example.com")), 0.0005)
    metrics.on_authentication(Outcome(UserInfo("kubelet")), 0.003)
    metrics.on_authentication(Outcome(error="invalid bearer token"), 0.02)
    metrics.on_authentication(Outcome(), 20.0)
    return metrics


def test_names_types_labels_help_and_buckets_are_kubes() -> None:
    families = {m.name: m for m in _metrics().registry.collect()}
    for name, (kind, labels, help_text) in KUBE.items():
        family = families[name]
        assert (family.type, family.documentation) == (kind, help_text)
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(labels), sample
    buckets = sorted(
        {float(s.labels["le"]) for s in families["authentication_duration_seconds"].samples if "le" in s.labels}
    )
    assert buckets == [*KUBE_BUCKETS, float("inf")]


def test_results_as_kube_labels_them() -> None:
    value = _metrics().registry.get_sample_value
    for result in ("success", "failure", "error"):
        assert value("authentication_attempts_total", {"result": result}) == (2 if result == "success" else 1)
    assert value("authentication_duration_seconds_bucket", {"result": "success", "le": "0.001"}) == 1
    assert value("authentication_duration_seconds_bucket", {"result": "failure", "le": "16.384"}) == 0
    assert value("authenticated_user_requests_total", {"username": "email_id"}) == 1
    assert value("authenticated_user_requests_total", {"username": "kubelet"}) == 1


def test_compress_username_as_kube() -> None:
    assert [compress_username(n) for n in ("admin", "kubelet", "a@b", "developer", "system:anonymous")] == [
        "admin",
        "kubelet",
        "email_id",
        "other",
        "other",
    ]


def test_load_values_never_appear_on_metrics() -> None:
    clock = itertools.count(0.0, 0.123457)
    sampler = Sampler(1.0, cpu_clock=lambda: next(clock))
    sampler.tick()
    sampler.tick()
    assert sampler.report is not None and sampler.header is not None
    text = generate_latest(Metrics(sampler, lambda: 0).registry).decode()
    assert "secure_orca_sampler_ticks_total 2.0" in text  # the sampler is there...
    for name, number in sampler.report.items():  # ...its values are not
        assert name not in text
        assert repr(number) not in text or number in (0.0, 1.0, 2.0)
    assert "load_report_value" not in text and "in_flight_requests" not in text
