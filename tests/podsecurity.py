"""Pod Security "restricted" as kube's pod-security admission evaluates it, for tests (not a test module).

Mirrored from the checks of kubernetes/pod-security-admission `policy/check_*.go` at commit
8f84a87c7f617f64a4ddc1aea24aeeb7a2e07cb8 (the published mirror of kubernetes/kubernetes
staging/src/k8s.io/pod-security-admission), each at the version in force for Kubernetes 1.37: the check with the
highest MinimumVersion not above 1.37, restricted checks replacing the baseline ones they override
(capabilities, hostPath volumes, procMount, seccomp). Like the plugin, every check reads the Pod's metadata and
spec (for a Deployment: its template), visits init, regular and ephemeral containers, and treats an absent field
as its zero value. The Go code returns a reason and a detail; here a check returns the reason, or None.

Only what a JSON Pod can carry matters here, so the checks read plain dicts (the manifests as generated).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Spec = dict[str, Any]
Check = Callable[[dict[str, Any], Spec], str | None]


def containers(spec: Spec) -> Iterator[dict[str, Any]]:
    """visitContainers: init containers, containers, ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(node: dict[str, Any]) -> dict[str, Any]:
    return node.get("securityContext") or {}


def _user_namespace(spec: Spec) -> bool:
    """relaxPolicyForUserNamespacePod: hostUsers explicitly false."""
    return spec.get("hostUsers") is False


def _windows(spec: Spec) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


# ---- baseline checks in force at 1.37 (not overridden by a restricted one) -------------------------------


def windows_host_process(meta: dict[str, Any], spec: Spec) -> str | None:
    nodes = [spec, *containers(spec)]
    bad = any((_sc(n).get("windowsOptions") or {}).get("hostProcess") is True for n in nodes)
    return "hostProcess" if bad else None


def host_namespaces(meta: dict[str, Any], spec: Spec) -> str | None:
    bad = any(spec.get(key) is True for key in ("hostNetwork", "hostPID", "hostIPC"))
    return "host namespaces" if bad else None


def privileged(meta: dict[str, Any], spec: Spec) -> str | None:
    return "privileged" if any(_sc(c).get("privileged") is True for c in containers(spec)) else None


def host_ports(meta: dict[str, Any], spec: Spec) -> str | None:
    bad = any(port.get("hostPort", 0) != 0 for c in containers(spec) for port in c.get("ports") or [])
    return "hostPort" if bad else None


def app_armor_profile(meta: dict[str, Any], spec: Spec) -> str | None:
    allowed_types = ("RuntimeDefault", "Localhost")
    nodes = [spec, *containers(spec)]
    bad = any("appArmorProfile" in _sc(n) and _sc(n)["appArmorProfile"].get("type") not in allowed_types for n in nodes)
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value in ("", "runtime/default") or value.startswith("localhost/")
        ):
            bad = True
    return "forbidden AppArmor profile" if bad else None


SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")  # 1.31+


def selinux_options(meta: dict[str, Any], spec: Spec) -> str | None:
    for node in [spec, *containers(spec)]:
        options = _sc(node).get("seLinuxOptions")
        if options is not None and (
            options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role")
        ):
            return "seLinuxOptions"
    return None


SAFE_SYSCTLS = frozenset(  # sysctlsAllowedV1Dot37
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
        "net.ipv4.tcp_slow_start_after_idle",
        "net.ipv4.tcp_notsent_lowat",
    }
)


def sysctls(meta: dict[str, Any], spec: Spec) -> str | None:
    bad = [s["name"] for s in _sc(spec).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return "forbidden sysctls" if bad else None


def host_probes_and_lifecycle(meta: dict[str, Any], spec: Spec) -> str | None:
    for c in containers(spec):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")]
        for handler in filter(None, handlers):
            if any((handler.get(kind) or {}).get("host") for kind in ("httpGet", "tcpSocket")):
                return "probe or lifecycle host"
    return None


# ---- restricted checks -----------------------------------------------------------------------------------

ALLOWED_VOLUMES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
)


def restricted_volumes(meta: dict[str, Any], spec: Spec) -> str | None:
    """Overrides hostPathVolumes. A volume is allowed when it has one of the allowed sources."""
    bad = [v["name"] for v in spec.get("volumes") or [] if not any(v.get(k) is not None for k in ALLOWED_VOLUMES)]
    return "restricted volume types" if bad else None


def allow_privilege_escalation(meta: dict[str, Any], spec: Spec) -> str | None:
    if _windows(spec):  # 1.25+
        return None
    bad = [c["name"] for c in containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    return "allowPrivilegeEscalation != false" if bad else None


def run_as_non_root(meta: dict[str, Any], spec: Spec) -> str | None:
    if _user_namespace(spec):  # 1.35+
        return None
    pod = _sc(spec).get("runAsNonRoot")
    if pod is False:
        return "runAsNonRoot != true"
    for c in containers(spec):
        own = _sc(c).get("runAsNonRoot")
        if own is False or (own is None and pod is not True):
            return "runAsNonRoot != true"
    return None


def run_as_user(meta: dict[str, Any], spec: Spec) -> str | None:
    if _user_namespace(spec):  # 1.35+
        return None
    bad = any(_sc(n).get("runAsUser") == 0 for n in [spec, *containers(spec)])
    return "runAsUser=0" if bad else None


def _valid_seccomp(profile: dict[str, Any]) -> bool:
    return profile.get("type") in ("RuntimeDefault", "Localhost")


def seccomp_profile_restricted(meta: dict[str, Any], spec: Spec) -> str | None:
    """Overrides the baseline seccomp check; Windows Pods are exempt (1.25+)."""
    if _windows(spec):
        return None
    pod = _sc(spec).get("seccompProfile")
    if pod is not None and not _valid_seccomp(pod):
        return "seccompProfile"
    for c in containers(spec):
        own = _sc(c).get("seccompProfile")
        if (own is not None and not _valid_seccomp(own)) or (own is None and pod is None):
            return "seccompProfile"
    return None


def capabilities_restricted(meta: dict[str, Any], spec: Spec) -> str | None:
    """Overrides capabilities_baseline; Windows Pods are exempt (1.25+)."""
    if _windows(spec):
        return None
    for c in containers(spec):
        caps = _sc(c).get("capabilities")
        if caps is None or "ALL" not in (caps.get("drop") or []):
            return "unrestricted capabilities"
        if any(cap != "NET_BIND_SERVICE" for cap in caps.get("add") or []):
            return "unrestricted capabilities"
    return None


def proc_mount_restricted(meta: dict[str, Any], spec: Spec) -> str | None:
    """procMount_restricted (1.35+, overrides the baseline one): procMount_1_0, with no user-namespace relief."""
    bad = any(_sc(c).get("procMount", "Default") != "Default" for c in containers(spec))
    return "procMount" if bad else None


RESTRICTED: dict[str, Check] = {
    "windowsHostProcess": windows_host_process,
    "hostNamespaces": host_namespaces,
    "privileged": privileged,
    "hostPorts": host_ports,
    "appArmorProfile": app_armor_profile,
    "seLinuxOptions": selinux_options,
    "sysctls": sysctls,
    "hostProbesAndHostLifecycle": host_probes_and_lifecycle,
    "restrictedVolumes": restricted_volumes,
    "allowPrivilegeEscalation": allow_privilege_escalation,
    "runAsNonRoot": run_as_non_root,
    "runAsUser": run_as_user,
    "seccompProfile_restricted": seccomp_profile_restricted,
    "capabilities_restricted": capabilities_restricted,
    "procMount_restricted": proc_mount_restricted,
}


def evaluate(meta: dict[str, Any], spec: Spec) -> dict[str, str]:
    """The checks that refuse this Pod, by check ID, with their reasons (empty: restricted admits it)."""
    refused = {name: check(meta, spec) for name, check in RESTRICTED.items()}
    return {name: reason for name, reason in refused.items() if reason is not None}


def pod_templates(documents: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], Spec]]:
    """The Pod metadata and spec of every workload, by name (PodSpecExtractor: a Deployment's template)."""
    found = {}
    for doc in documents:
        if doc["kind"] == "Pod":
            found[doc["metadata"]["name"]] = (doc["metadata"], doc["spec"])
        elif doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            template = doc["spec"]["template"]
            found[doc["metadata"]["name"]] = (template.get("metadata") or {}, template["spec"])
    return found
