"""Kubernetes manifests (pure data): N replicas of ``secure-orca serve`` behind Envoy, from the LBConfig that
``secure-orca envoy-config`` builds, with its credential paths moved to where the Secrets are mounted.

- ``secure-orca`` Deployment + headless Service (Envoy resolves every Pod: STRICT_DNS, one endpoint per replica,
  each weighted by its own ORCA reports) + PodDisruptionBudget + NetworkPolicy;
- ``secure-orca-lb`` Deployment running Envoy with the bootstrap in a ConfigMap, + Service + PodDisruptionBudget +
  NetworkPolicy;
- Secrets are referenced, never written: the manifests carry no key material (``secrets_script`` writes the
  script that creates or updates them from local files).

Probes: /readyz (readiness) and /healthz (liveness) over HTTPS, as anonymous requests (kube's probes do the same);
Envoy's readiness is its admin ``/ready`` through a listener of its own that routes that one path (the admin
interface stays on loopback), and its Pod template carries a hash of its ConfigMap, so a change rolls the Pods.

Pod Security: both Pods satisfy the "restricted" profile (the namespace enforces it): non-root, no privilege
escalation, every capability dropped, seccomp RuntimeDefault, only Secret and ConfigMap volumes; neither mounts a
service-account token (neither process talks to the API). NetworkPolicies: a replica's serving port admits only
the load balancer's Pods, its metrics port only the monitoring Pods the operator names (none by default); Envoy's
Pods admit clients on their listener only. (Traffic from the node itself, kubelet's probes, is always allowed.)
Resources: requests equal to limits (Guaranteed QoS), so kubelet writes the CPU limit into ``cpu.max`` as
``MilliCPUToQuota`` computes it (kubernetes/kubernetes pkg/kubelet/cm/helpers_linux.go at
00ac878efc72b054488300fe600d8a75283b6605: quota = milliCPU x 100000 / 1000, at least 1000, period 100000) and the
memory limit into ``memory.max``: what ``server.sampler.Sources`` reads as the capacity that load is a share of.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from secure_orca import credential_flags as flags
from secure_orca.deploy import yamltext
from secure_orca.envoy import bootstrap as envoy
from secure_orca.kep_options import Mode, modes_of, serve_flags
from secure_orca.server.http.pending import MAX_PENDING, MAX_PENDING_PER_ADDRESS

MOUNT = PurePosixPath("/etc/secure-orca")
ENVOY_CONFIG = PurePosixPath("/etc/envoy")
SERVE_PORT = 6443
METRICS_PORT = 9090
LB_PORT = 8443
READY_PORT = 9902  # Envoy's readiness listener: GET /ready, forwarded to its loopback admin; nothing else
ADMIN_CLUSTER = "envoy-admin"
CONFIG_HASH = "secure-orca/envoy-config-sha256"  # Pod template annotation: a new ConfigMap rolls Envoy's Pods
APP = "secure-orca"
LB = "secure-orca-lb"
ENVOY_CONFIG_MAP = "secure-orca-envoy"
USER = 65532  # a non-root uid; fsGroup makes the Secret files group-readable (never world-readable)

# Secret name -> (keys, what fills it). The serve side and the LB side each mount only what they use.
SECRETS = {
    "secure-orca-serving": (("tls.crt", "tls.key"), "the replicas' serving certificate (SAN: the Service name)"),
    "secure-orca-client-ca": (("ca.crt",), "CA of user client certificates (--client-ca-file)"),
    "secure-orca-front-proxy-ca": (("ca.crt",), "CA of the front proxy (--requestheader-client-ca-file)"),
    "secure-orca-load-reader-ca": (("ca.crt",), "CA of load readers (--endpoint-load-metrics-client-ca-file)"),
    "secure-orca-lb-secret": (("secret",), "the shared secret (--endpoint-load-metrics-secret-file)"),
    "secure-orca-lb-serving": (("tls.crt", "tls.key"), "Envoy's own serving certificate"),
    "secure-orca-serving-ca": (("ca.crt",), "CA that signed the replicas' serving certificate (Envoy verifies)"),
    "secure-orca-front-proxy-client": (("tls.crt", "tls.key"), "Envoy's front-proxy client certificate"),
    "secure-orca-load-reader-client": (("tls.crt", "tls.key"), "Envoy's load-reader client certificate"),
}


# The memory limit covers the worst case the connection caps allow (docs/operations.md, "Memory"), from
# benchmarks/silent_sockets.py and an idle replica's resident set on this project's test machine:
PROCESS_MIB = 64  # one process serving alone, or the supervisor of --workers (53 MiB measured, rounded up)
WORKER_MIB = 48 + 64  # a worker (41 MiB measured beside its supervisor) and room for its connections and requests
# A pending handshake at its worst: a ClientHello declaring OpenSSL's largest (131,396 bytes) held in part, 180 KiB
# measured, with the two TLS records a handshake step may hold on top (2 x 18 KiB).
PENDING_KIB = 224
MIN_PENDING = 64  # below this many pending handshakes per worker, the memory limit is refused as too small


@dataclass(frozen=True)
class Resources:
    """One container's requests (= limits): CPU in millicores, memory in MiB (with ``workers``: about 60 + 6 per
    worker at idle, plus what connections hold; docs/operations.md, "Memory limit, --workers and the OOM killer")."""

    milli_cpu: int = 1000
    memory_mib: int = 256

    def spec(self) -> dict[str, Any]:
        amounts = {"cpu": f"{self.milli_cpu}m", "memory": f"{self.memory_mib}Mi"}
        return {"requests": dict(amounts), "limits": dict(amounts)}

    def cgroup(self) -> dict[str, str]:
        """What kubelet writes for these limits (cgroup v2 file contents)."""
        quota = max(self.milli_cpu * 100_000 // 1000, 1000)
        return {"cpu.max": f"{quota} 100000", "memory.max": str(self.memory_mib * 1024 * 1024)}

    @property
    def workers(self) -> int:
        """``serve --workers`` for this CPU request: one per CPU, rounded up, as ``--workers 0`` reads the quota."""
        return max(1, -(-self.milli_cpu // 1000))

    @property
    def pending_handshakes(self) -> int:
        """``--max-pending-tls-handshakes`` (per worker) that this memory limit covers at its worst, at most the
        flag's default: what is left after the processes' own memory, shared by the workers' pending handshakes."""
        left_kib = (self.memory_mib - PROCESS_MIB - WORKER_MIB * self.workers) * 1024
        return min(MAX_PENDING, left_kib // (PENDING_KIB * self.workers))

    @property
    def memory_floor_mib(self) -> int:
        """The least memory limit that leaves ``MIN_PENDING`` pending handshakes per worker."""
        return PROCESS_MIB + self.workers * (WORKER_MIB + -(-MIN_PENDING * PENDING_KIB // 1024))


@dataclass(frozen=True)
class Deployment:
    """What the manifests depend on besides the LB's configuration."""

    namespace: str = "secure-orca"
    replicas: int = 3
    lb_replicas: int = 2
    image: str = "secure-orca:dev"
    envoy_image: str = "envoyproxy/envoy:v1.40.0"
    resources: Resources = Resources()
    lb_resources: Resources = Resources(500, 128)
    front_proxy_names: tuple[str, ...] = ()  # --requestheader-allowed-names (the CN of Envoy's certificate)
    load_reader_names: tuple[str, ...] = ()
    # Who may scrape the replicas' metrics port (label selectors, AND-ed); both empty: no one.
    metrics_namespace_labels: tuple[tuple[str, str], ...] = ()
    metrics_pod_labels: tuple[tuple[str, str], ...] = ()
    # The model server behind serve --proxy (its Pods' labels, in this namespace) and its ports; none: no policy.
    backend_pod_labels: tuple[tuple[str, str], ...] = ()
    backend_ports: tuple[int, ...] = (8000,)

    @property
    def service_host(self) -> str:
        return f"{APP}.{self.namespace}.svc"


def _mount(secret: str) -> PurePosixPath:
    return MOUNT / secret.removeprefix("secure-orca-")


def _file(secret: str, key: str) -> str:
    return str(_mount(secret) / key)


def kube_config(config: envoy.LBConfig, deployment: Deployment) -> envoy.LBConfig:
    """``config`` (as envoy-config built it) with every path where the LB Pod mounts it, listening on all
    addresses, balancing over the headless Service's name."""
    creds = config.credentials
    moved = envoy.Credentials(
        listener_cert=Path(_file("secure-orca-lb-serving", "tls.crt")),
        listener_key=Path(_file("secure-orca-lb-serving", "tls.key")),
        upstream_ca=Path(_file("secure-orca-serving-ca", "ca.crt")),
        front_proxy_cert=_moved(creds.front_proxy_cert, "secure-orca-front-proxy-client", "tls.crt"),
        front_proxy_key=_moved(creds.front_proxy_key, "secure-orca-front-proxy-client", "tls.key"),
        secret_file=_moved(creds.secret_file, "secure-orca-lb-secret", "secret"),
        client_ca=_moved(creds.client_ca, "secure-orca-client-ca", "ca.crt"),
        load_reader_cert=_moved(creds.load_reader_cert, "secure-orca-load-reader-client", "tls.crt"),
        load_reader_key=_moved(creds.load_reader_key, "secure-orca-load-reader-client", "tls.key"),
    )
    upstream = envoy.Upstream(deployment.service_host, SERVE_PORT)
    return dataclasses.replace(
        config,
        credentials=moved,
        upstreams=(upstream,),
        listen_host="0.0.0.0",
        listen_port=LB_PORT,
        server_name=deployment.service_host,
        secret_delivery="sds",
        inline_secret=None,
        sds_path=Path(ENVOY_CONFIG / "secret-sds.yaml"),
    )


def _moved(path: object, secret: str, key: str) -> Path | None:
    return None if path is None else Path(_file(secret, key))


def envoy_files(
    config: envoy.LBConfig, config_dir: PurePosixPath = ENVOY_CONFIG, ready: tuple[str, int] = ("0.0.0.0", READY_PORT)
) -> dict[str, str]:
    """The ConfigMap's files (mounted at ``config_dir``): Envoy's bootstrap (its cluster resolved by DNS, its
    readiness listener at ``ready``), and the SDS resource."""
    document = envoy.build_bootstrap(config)
    cluster = document["static_resources"]["clusters"][0]
    cluster["type"] = "STRICT_DNS"  # one endpoint per Pod address behind the headless Service (re-resolved every 5 s)
    for source in _path_sources(document):  # kubelet swaps ..data: Envoy watches the directory for the move
        source["watched_directory"] = {"path": str(config_dir)}
    document["static_resources"]["listeners"].append(ready_listener(ready[1], ready[0]))
    document["static_resources"]["clusters"].append(admin_cluster(config))
    files = {"envoy.yaml": yamltext.dump([document], "generated by `secure-orca deploy`: do not edit")}
    if Mode.SHARED_SECRET in config.modes:
        sds = envoy.sds_resource(config)
        secret = sds["resources"][0]["generic_secret"]["secret"]
        secret["watched_directory"] = {"path": str(PurePosixPath(secret["filename"]).parent)}
        note = "SDS resource: names the secret file, re-read on a kubelet swap"
        files["secret-sds.yaml"] = yamltext.dump([sds], note)
    return files


def ready_listener(port: int, host: str = "0.0.0.0") -> dict[str, Any]:
    """A plain-HTTP listener for kubelet's readiness probe: ``GET /ready`` (exactly that path, query ignored) goes
    to Envoy's admin interface, which answers 200 only once Envoy is initialized and not draining; every other
    request gets 404 from this listener, so no other admin endpoint (``/quitquitquit``, ``/config_dump``, ...)
    is reachable from the Pod network."""
    ready = {"path": "/ready", "headers": [{"name": ":method", "string_match": {"exact": "GET"}}]}
    routes = [
        {"match": ready, "route": {"cluster": ADMIN_CLUSTER, "timeout": "2s"}},
        {"match": {"prefix": "/"}, "direct_response": {"status": 404}},
    ]
    hcm = {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
            "HttpConnectionManager",
            "stat_prefix": "ready",
            "codec_type": "HTTP1",
            "route_config": {"name": "ready", "virtual_hosts": [{"name": "ready", "domains": ["*"], "routes": routes}]},
            "http_filters": [
                {
                    "name": "envoy.filters.http.router",
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                }
            ],
        },
    }
    return {"name": "ready", "address": _socket(host, port), "filter_chains": [{"filters": [hcm]}]}


def admin_cluster(config: envoy.LBConfig) -> dict[str, Any]:
    """Envoy's own admin interface (loopback), the ready listener's only upstream."""
    endpoint = {"endpoint": {"address": _socket(config.admin_host, config.admin_port)}}
    return {
        "name": ADMIN_CLUSTER,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": ADMIN_CLUSTER, "endpoints": [{"lb_endpoints": [endpoint]}]},
    }


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _path_sources(node: Any) -> list[dict[str, Any]]:
    """Every ``path_config_source`` in a bootstrap."""
    if isinstance(node, dict):
        found = [node["path_config_source"]] if isinstance(node.get("path_config_source"), dict) else []
        return found + [s for value in node.values() for s in _path_sources(value)]
    if isinstance(node, list):
        return [s for value in node for s in _path_sources(value)]
    return []


# The Secret that holds a mode's credential files (its flags: kep_options.MODE_FLAGS).
MODE_SECRETS = {
    Mode.FRONT_PROXY: "secure-orca-front-proxy-ca",
    Mode.SHARED_SECRET: "secure-orca-lb-secret",
    Mode.LOAD_READER: "secure-orca-load-reader-ca",
}


def serve_secrets(modes: frozenset[str]) -> list[str]:
    """The Secrets a replica mounts for ``modes`` (the replica's --endpoint-load-metrics-auth)."""
    mounted = [MODE_SECRETS[mode] for mode in Mode if mode in modes and mode in MODE_SECRETS]
    return ["secure-orca-serving", "secure-orca-client-ca", *mounted]


def lb_secrets(config: envoy.LBConfig) -> list[str]:
    creds = config.credentials
    names = ["secure-orca-lb-serving", "secure-orca-serving-ca"]
    for path, secret in (
        (creds.front_proxy_cert if Mode.FRONT_PROXY in config.modes else None, "secure-orca-front-proxy-client"),
        (creds.client_ca if config.authenticates else None, "secure-orca-client-ca"),
        (creds.secret_file if Mode.SHARED_SECRET in config.modes else None, "secure-orca-lb-secret"),
        (creds.load_reader_cert if Mode.LOAD_READER in config.modes else None, "secure-orca-load-reader-client"),
    ):
        if path is not None:
            names.append(secret)
    return names


def serve_args(option: str, deployment: Deployment) -> list[str]:
    """The replicas' ``serve`` flags for the LB's ``option``; every path is a file of a mounted Secret."""
    pending = deployment.resources.pending_handshakes
    args = [
        "serve",
        "--bind-address=0.0.0.0",
        f"--secure-port={SERVE_PORT}",
        f"{flags.TLS_CERT}={_file('secure-orca-serving', 'tls.crt')}",
        f"{flags.TLS_KEY}={_file('secure-orca-serving', 'tls.key')}",
        f"{flags.CLIENT_CA}={_file('secure-orca-client-ca', 'ca.crt')}",
        "--feature-gates=RequestCostAggregation=true",
        "--enable-endpoint-load-metrics",
        f"--endpoint-load-metrics-auth={option}",
        f"--metrics-bind-address=0.0.0.0:{METRICS_PORT}",
        "--audit-log-path=-",
        f"--workers={deployment.resources.workers}",
        f"--max-pending-tls-handshakes={deployment.resources.pending_handshakes}",
        f"--max-pending-tls-handshakes-per-address={min(MAX_PENDING_PER_ADDRESS, pending)}",
    ]
    values = {
        flags.REQUESTHEADER_CA: _file(MODE_SECRETS[Mode.FRONT_PROXY], "ca.crt"),
        flags.ALLOWED_NAMES: ",".join(deployment.front_proxy_names),
        flags.SECRET: _file(MODE_SECRETS[Mode.SHARED_SECRET], "secret"),
        flags.LOAD_READER_CA: _file(MODE_SECRETS[Mode.LOAD_READER], "ca.crt"),
        flags.LOAD_READER_NAMES: ",".join(deployment.load_reader_names) or None,  # none given: the flag is left out
    }
    chosen = (flag for flag in serve_flags(modes_of(option)) if values[flag] is not None)
    return args + [f"{flag}={values[flag]}" for flag in chosen]


def _volumes(secrets: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes = [
        {"name": s.removeprefix("secure-orca-"), "secret": {"secretName": s, "defaultMode": 0o440}} for s in secrets
    ]
    mounts = [{"name": s.removeprefix("secure-orca-"), "mountPath": str(_mount(s)), "readOnly": True} for s in secrets]
    return volumes, mounts


def _meta(name: str, deployment: Deployment, component: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": component}
    return {"name": name, "namespace": deployment.namespace, "labels": labels}


def _selector(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": component}


_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
# The Pod-level half of Pod Security "restricted" (the containers carry _SECURITY): a non-root uid and group,
# the container runtime's default seccomp filter.
_POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": USER,
    "runAsGroup": USER,
    "fsGroup": USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _probe(path: str, port: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port, "scheme": "HTTPS"}, "periodSeconds": 10, "timeoutSeconds": 2}


def serve_manifests(option: str, deployment: Deployment) -> list[dict[str, Any]]:
    volumes, mounts = _volumes(serve_secrets(frozenset(option.split(","))))
    selector = _selector("server")
    container = {
        "name": "secure-orca",
        "image": deployment.image,
        "args": serve_args(option, deployment),
        "ports": [
            {"name": "https", "containerPort": SERVE_PORT},
            {"name": "metrics", "containerPort": METRICS_PORT},
        ],
        "readinessProbe": _probe("/readyz", SERVE_PORT),
        "livenessProbe": _probe("/healthz", SERVE_PORT),
        "resources": deployment.resources.spec(),
        "volumeMounts": mounts,
        "securityContext": _SECURITY,
    }
    return [
        _deployment(APP, deployment, "server", deployment.replicas, selector, container, volumes),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(APP, deployment, "server"),
            "spec": {
                "clusterIP": "None",  # headless: Envoy sees every replica, not one virtual address
                "selector": selector,
                "ports": [{"name": "https", "port": SERVE_PORT, "targetPort": "https"}],
            },
        },
        _disruption_budget(APP, deployment, "server", selector),
        _network_policy(APP, deployment, "server", serve_ingress(deployment)),
        *backend_policy(deployment),
    ]


def lb_manifests(config: envoy.LBConfig, deployment: Deployment) -> list[dict[str, Any]]:
    volumes, mounts = _volumes(lb_secrets(config))
    volumes.append({"name": "envoy-config", "configMap": {"name": ENVOY_CONFIG_MAP}})
    mounts.append({"name": "envoy-config", "mountPath": str(ENVOY_CONFIG), "readOnly": True})
    selector = _selector("load-balancer")
    ready = {"httpGet": {"path": "/ready", "port": "ready", "scheme": "HTTP"}, "periodSeconds": 5, "timeoutSeconds": 2}
    container = {
        "name": "envoy",
        "image": deployment.envoy_image,
        "command": ["envoy"],
        "args": ["--config-path", str(ENVOY_CONFIG / "envoy.yaml"), "--log-level", "info"],
        "ports": [{"name": "https", "containerPort": LB_PORT}, {"name": "ready", "containerPort": READY_PORT}],
        "readinessProbe": ready,
        "livenessProbe": {"tcpSocket": {"port": LB_PORT}, "periodSeconds": 10},  # a draining Envoy is alive
        "resources": deployment.lb_resources.spec(),
        "volumeMounts": mounts,
        "securityContext": _SECURITY,
    }
    files = envoy_files(config)
    pods = _deployment(LB, deployment, "load-balancer", deployment.lb_replicas, selector, container, volumes)
    pods["spec"]["template"]["metadata"]["annotations"] = {CONFIG_HASH: config_hash(files)}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(ENVOY_CONFIG_MAP, deployment, "load-balancer"),
            "data": files,
        },
        pods,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(LB, deployment, "load-balancer"),
            "spec": {"selector": selector, "ports": [{"name": "https", "port": 443, "targetPort": "https"}]},
        },
        _disruption_budget(LB, deployment, "load-balancer", selector),
        _network_policy(LB, deployment, "load-balancer", [{"ports": [_tcp(LB_PORT)]}]),  # clients, from anywhere
    ]


def config_hash(files: dict[str, str]) -> str:
    """SHA-256 of the ConfigMap's data (names and contents, in a canonical order)."""
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def _tcp(port: int) -> dict[str, Any]:
    return {"protocol": "TCP", "port": port}


def _network_policy(name: str, deployment: Deployment, component: str, ingress: list[Any]) -> dict[str, Any]:
    """Ingress to the component's Pods: only what ``ingress`` lists (kube: traffic from the node is always let in)."""
    spec = {"podSelector": {"matchLabels": _selector(component)}, "policyTypes": ["Ingress"], "ingress": ingress}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, deployment, component),
        "spec": spec,
    }


def backend_policy(deployment: Deployment) -> list[dict[str, Any]]:
    """The model server's Pods admit only the replicas, on its ports: a client that bypasses the gateway can
    neither ask the backend for its report (``endpoint-load-metrics-format``, answered to anyone) nor reach it at
    all. Empty without --backend-pod-selector."""
    if not deployment.backend_pod_labels:
        return []
    ingress = [
        {
            "from": [{"podSelector": {"matchLabels": _selector("server")}}],
            "ports": [_tcp(port) for port in deployment.backend_ports],
        }
    ]
    policy = _network_policy(f"{APP}-backend", deployment, "backend", ingress)
    policy["spec"]["podSelector"] = {"matchLabels": dict(deployment.backend_pod_labels)}
    return [policy]


def serve_ingress(deployment: Deployment) -> list[dict[str, Any]]:
    """The replicas' serving port from the load balancer's Pods; metrics from the operator's monitoring selector."""
    rules: list[dict[str, Any]] = [
        {"from": [{"podSelector": {"matchLabels": _selector("load-balancer")}}], "ports": [_tcp(SERVE_PORT)]}
    ]
    peer: dict[str, Any] = {}
    if deployment.metrics_namespace_labels:
        peer["namespaceSelector"] = {"matchLabels": dict(deployment.metrics_namespace_labels)}
    if deployment.metrics_pod_labels:
        peer["podSelector"] = {"matchLabels": dict(deployment.metrics_pod_labels)}
    if peer:
        rules.append({"from": [peer], "ports": [_tcp(METRICS_PORT)]})
    return rules


def _deployment(
    name: str,
    deployment: Deployment,
    component: str,
    replicas: int,
    selector: dict[str, str],
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    """A Deployment of one container, run as the unprivileged USER, with no service-account token."""
    pod: dict[str, Any] = {
        "metadata": {"labels": selector},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": _POD_SECURITY,
            "containers": [container],
            "volumes": volumes,
        },
    }
    spec = {"replicas": replicas, "selector": {"matchLabels": selector}, "template": pod}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, deployment, component), "spec": spec}


def _disruption_budget(name: str, deployment: Deployment, component: str, selector: dict[str, str]) -> dict[str, Any]:
    """At most one pod of the Deployment down at a time for voluntary disruptions."""
    spec = {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name, deployment, component),
        "spec": spec,
    }


# The namespace admits only Pods that meet Pod Security "restricted" (kube's pod-security admission), and says so
# to whoever applies a Pod that does not (warn) and in the audit log (audit).
POD_SECURITY_LABELS = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")}


def namespace(deployment: Deployment) -> dict[str, Any]:
    metadata = {"name": deployment.namespace, "labels": dict(POD_SECURITY_LABELS)}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def secrets_script(secrets: list[str], sources: dict[str, dict[str, str]], deployment: Deployment, header: str) -> str:
    """A bash script that creates or updates each Secret from local files (``sources[secret][key]`` = a path,
    absolute or relative to the script's directory), from any working directory, as often as it is run.

    Each Secret is built by ``kubectl create secret generic --dry-run=client -o yaml`` and applied server-side:
    create-or-update, and unlike a client-side apply, no ``last-applied-configuration`` annotation holds a second
    copy of the key material (``kubectl describe`` prints annotations). ``--print`` writes the Secrets to standard
    output instead (no cluster is contacted)."""
    namespace = shlex.quote(deployment.namespace)
    lines = [
        "#!/usr/bin/env bash",
        *(f"# {line}" for line in header.splitlines()),
        "# Creates or updates the Secrets the manifests reference, from local files (no key material is in any",
        "# manifest). Run it from any directory, as often as needed. --print: write the Secrets to standard output",
        "# instead of applying them.",
        "set -euo pipefail",
        'here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)',
        'case "${1:-}" in',
        "  --print) apply() { echo ---; cat; } ;;",
        "  '') apply() { kubectl apply --server-side --force-conflicts --field-manager=secure-orca-deploy -f -; } ;;",
        '  *) echo "usage: $0 [--print]" >&2; exit 2 ;;',
        "esac",
        "secret() {  # NAME --from-file=KEY=PATH...",
        f'  kubectl -n {namespace} create secret generic "$@" --dry-run=client -o yaml | apply',
        "}",
    ]
    for secret in secrets:
        keys = SECRETS[secret][0]
        files = " ".join(f"--from-file={key}={_script_path(sources[secret][key])}" for key in keys)
        lines.append(f"secret {secret} {files}")
    return "\n".join(lines) + "\n"


def _script_path(path: str) -> str:
    """``path`` for the script: absolute as given, relative from the script's own directory (``$here``)."""
    if PurePosixPath(path).is_absolute():
        return shlex.quote(path)
    return '"$here"/' + shlex.quote(path)
