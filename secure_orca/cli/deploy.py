"""Write Kubernetes manifests: N replicas of `secure-orca serve` (Deployment, headless Service,
PodDisruptionBudget) behind Envoy (Deployment, Service, PodDisruptionBudget, its bootstrap in a ConfigMap).

Takes every flag of `secure-orca envoy-config` (the bootstrap is built by the same code, then moved to the paths
where the Pods mount their Secrets; the replicas are found through the Service, so --upstream is not given).
The manifests hold no key material: Secrets are referenced by name and create-secrets.sh creates or updates them
from the local files the flags name (default: the development PKI), with paths relative to the script itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from cryptography import x509

from secure_orca.cli import envoy as envoy_cli
from secure_orca.deploy import manifests as m
from secure_orca.deploy import yamltext
from secure_orca.errors import UsageError
from secure_orca.kep_options import Mode
from secure_orca.pki import DevPKI
from secure_orca.x509.chainverifier import common_name

HELP = "write Kubernetes manifests: serve replicas behind Envoy, from the envoy-config flags"
FILES = ("namespace.yaml", "secure-orca.yaml", "envoy.yaml", "create-secrets.sh")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    envoy_cli.add_arguments(parser)
    a = parser.add_argument
    a("--output-dir", type=Path, default=Path("deploy"), help="where the manifests go (default deploy/)")
    a("--namespace", default="secure-orca", help="namespace of every object (default secure-orca)")
    a("--replicas", type=int, default=3, help="replicas of serve (default 3)")
    a("--lb-replicas", type=int, default=2, help="replicas of Envoy (default 2)")
    image = "the replicas' image (default secure-orca:dev: `docker build -t secure-orca:dev .`, the Containerfile)"
    a("--image", default="secure-orca:dev", help=image)
    a("--envoy-image", default="envoyproxy/envoy:v1.40.0", help="Envoy's image (default envoyproxy/envoy:v1.40.0)")
    a("--cpu", type=int, default=1000, help="millicores per replica, requested and limited (default 1000)")
    a("--memory", type=int, default=256, help="MiB per replica, requested and limited (default 256)")
    a("--serving-cert-file", type=Path, help="the replicas' serving certificate (default: dev apiserver.crt)")
    a("--serving-key-file", type=Path, help="its key")
    a("--front-proxy-ca-file", type=Path, help="--requestheader-client-ca-file of the replicas (default: dev)")
    a("--load-reader-ca-file", type=Path, help="--endpoint-load-metrics-client-ca-file (default: dev)")
    a(
        "--metrics-namespace-selector",
        type=_labels,
        default=(),
        metavar="KEY=VALUE[,...]",
        help="namespaces whose Pods may scrape the replicas' metrics port (with --metrics-pod-selector: both must "
        "match); neither given: no Pod may (NetworkPolicy)",
    )
    a(
        "--metrics-pod-selector",
        type=_labels,
        default=(),
        metavar="KEY=VALUE[,...]",
        help="Pods that may scrape the metrics port (alone: Pods of the manifests' namespace)",
    )
    a(
        "--backend-pod-selector",
        type=_labels,
        default=(),
        metavar="KEY=VALUE[,...]",
        help="the model server behind serve --proxy (its Pods, in the namespace): a NetworkPolicy lets only the "
        "replicas reach it (none given: no policy)",
    )
    a("--backend-port", type=int, action="append", help="the model server's port (repeatable; default 8000)")


# Label syntax (k8s.io/apimachinery pkg/util/validation: IsQualifiedName, IsValidLabelValue).
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_KEY = re.compile(rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")


def _labels(text: str) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE[,KEY=VALUE...]``, a label selector's matchLabels."""
    pairs = []
    for item in text.split(","):
        key, eq, value = item.strip().partition("=")
        if not eq or not _KEY.fullmatch(key) or len(key.partition("/")[0]) > 253 or not _VALUE.fullmatch(value):
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not KEY=VALUE with a Kubernetes label key and value")
        pairs.append((key, value))
    return tuple(pairs)


def _cn(path: Path, flag: str) -> str:
    try:
        name = common_name(x509.load_pem_x509_certificate(path.read_bytes()))
    except (OSError, ValueError) as error:
        raise UsageError(f"{flag}: cannot read {path}: {error}") from None
    if not name:
        raise UsageError(f"{flag}: {path} has no Common Name (the replicas allow the front proxy by its CN)")
    return name


def _sources(args: argparse.Namespace, creds: Any) -> dict[str, dict[str, str]]:
    dev = DevPKI(args.certs_dir)
    pair = lambda cert, key: {"tls.crt": str(cert), "tls.key": str(key)}  # noqa: E731
    return {
        "secure-orca-serving": pair(
            args.serving_cert_file or dev.cert("server"), args.serving_key_file or dev.key("server")
        ),
        "secure-orca-client-ca": {"ca.crt": str(args.client_ca_file or dev.cert("client_ca"))},
        "secure-orca-front-proxy-ca": {"ca.crt": str(args.front_proxy_ca_file or dev.cert("front_proxy_ca"))},
        "secure-orca-load-reader-ca": {"ca.crt": str(args.load_reader_ca_file or dev.cert("load_reader_ca"))},
        "secure-orca-lb-secret": {"secret": str(creds.secret_file)},
        "secure-orca-lb-serving": pair(creds.listener_cert, creds.listener_key),
        "secure-orca-serving-ca": {"ca.crt": str(creds.upstream_ca)},
        "secure-orca-front-proxy-client": pair(creds.front_proxy_cert, creds.front_proxy_key),
        "secure-orca-load-reader-client": pair(creds.load_reader_cert, creds.load_reader_key),
    }


def _relative(sources: dict[str, dict[str, str]], directory: Path) -> dict[str, dict[str, str]]:
    """Every relative path in ``sources`` made relative to ``directory`` (where the script lives)."""
    base = os.path.abspath(directory)
    rebase = lambda p: p if os.path.isabs(p) else os.path.relpath(os.path.abspath(p), base)  # noqa: E731
    return {secret: {key: rebase(path) for key, path in keys.items()} for secret, keys in sources.items()}


def generate(args: argparse.Namespace) -> dict[str, str]:
    """The files of --output-dir, by name."""
    if args.upstream:
        raise UsageError("--upstream: deploy balances over the replicas' Service; leave --upstream out")
    if args.secret_inline:
        raise UsageError("--secret-inline: the shared secret stays in a Secret, never in a ConfigMap")
    for flag, value in (
        ("--replicas", args.replicas),
        ("--lb-replicas", args.lb_replicas),
        ("--cpu", args.cpu),
        ("--memory", args.memory),
    ):
        if value < 1:
            raise UsageError(f"{flag}: must be at least 1")
    deployment = m.Deployment(
        namespace=args.namespace,
        replicas=args.replicas,
        lb_replicas=args.lb_replicas,
        image=args.image,
        envoy_image=args.envoy_image,
        resources=m.Resources(args.cpu, args.memory),
        metrics_namespace_labels=args.metrics_namespace_selector,
        metrics_pod_labels=args.metrics_pod_selector,
        backend_pod_labels=args.backend_pod_selector,
        backend_ports=tuple(args.backend_port or (8000,)),
    )
    resources = deployment.resources
    if resources.pending_handshakes < m.MIN_PENDING:
        raise UsageError(
            f"--memory: {args.memory} MiB cannot hold {resources.workers} worker(s) with {m.MIN_PENDING} pending TLS "
            f"handshakes each at their worst; give at least {resources.memory_floor_mib} (docs/operations.md, Memory)"
        )
    args.upstream = [f"{deployment.service_host}:{m.SERVE_PORT}"]
    args.output = Path("envoy.yaml")  # so envoy-config's checks accept the file-based secret delivery
    config = envoy_cli.build(args)
    modes = config.modes
    creds = config.credentials
    fp = (
        _cn(creds.front_proxy_cert, "--front-proxy-cert-file")
        if Mode.FRONT_PROXY in modes and creds.front_proxy_cert
        else None
    )
    lr = (
        _cn(creds.load_reader_cert, "--load-reader-cert-file")
        if Mode.LOAD_READER in modes and creds.load_reader_cert
        else None
    )
    deployment = dataclasses.replace(
        deployment, front_proxy_names=(fp,) if fp else (), load_reader_names=(lr,) if lr else ()
    )
    placed = m.kube_config(config, deployment)
    secrets = list(dict.fromkeys(m.serve_secrets(modes) + m.lb_secrets(placed)))
    header = (
        f"generated by `secure-orca deploy` (option {config.option}, policy {config.policy}); regenerate, do not edit"
    )
    sources = _relative(_sources(args, config.credentials), args.output_dir)
    return {
        "namespace.yaml": yamltext.dump([m.namespace(deployment)], header),
        "secure-orca.yaml": yamltext.dump(m.serve_manifests(config.option, deployment), header),
        "envoy.yaml": yamltext.dump(m.lb_manifests(placed, deployment), header),
        "create-secrets.sh": m.secrets_script(secrets, sources, deployment, header),
    }


def run(args: argparse.Namespace) -> int:
    files = generate(args)
    try:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = args.output_dir / name
            path.write_text(text)
            if name.endswith(".sh"):
                os.chmod(path, 0o755)
            print(path)
    except OSError as error:
        raise UsageError(f"--output-dir: cannot write {args.output_dir}: {error.strerror}") from None
    return 0
