"""One list of layers (issue 38, item 3): the ASGI stack is built from ``assembly.layers``' one ordered list, each
layer given what it reports to when it is built; no attribute of a middleware or server object is assigned after
its construction outside its own class.

The rule, held over every module of secure_orca by its syntax tree (as ``http/test_hypercorn_contract.py``
holds hypercorn's names): the guarded classes are the server objects (``Server``, its ``ServerOptions`` and its
``Stack``, and the parts it holds: ``SERVER_CLASSES``) and every ASGI layer (a class whose ``async __call__``
takes ``scope, receive, send``). Their attributes are their class-level fields and the ``self.<name>`` they
assign. An assignment ``<x>.<name> = ...`` (plain, unpacked, augmented or annotated, or ``setattr(<x>, "<name>",
...)``) where ``<x>`` is not ``self`` or ``cls`` and ``<name>`` is a guarded attribute is refused outside the
classes that own ``<name>``. Names are matched, not types: the few other objects that share a name are listed in
``SHARED_NAMES`` with what they are.
"""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import secure_orca
from benchmarks.request_walk import assembled, request, served
from secure_orca import pki

PACKAGE = Path(secure_orca.__file__).parent
# The Server, its options and stack, and the parts it holds (a worker's sampler included).
SERVER_CLASSES = frozenset(
    {"Server", "ServerOptions", "Stack", "Sampler", "WorkerSampler", "TrustService", "Reloader", "Metrics", "AuditLog"}
)

# (module, target) -> what the object is: not a middleware or server object, though it shares a guarded name.
SHARED_NAMES = {
    (
        "server/http/accept.py",
        "stats.pending",
    ): "HandshakeStats, the figures the accept loop fills (its queue's length)",
    ("server/http/serve.py", "config.graceful_timeout"): "hypercorn's Config, made there from ServerOptions",
    ("server/http/tls.py", "context.options"): "the ssl.SSLContext being configured where it is made",
    ("server/middleware.py", "counters.in_flight"): "the sampler's RequestCounters, counted per request",
    ("server/middleware.py", "counters.requests"): "the sampler's RequestCounters, counted per request",
    ("server/middleware.py", "counters.errors"): "the sampler's RequestCounters, counted per request",
    ("server/audit/event.py", "record.report"): "the AuditRecord a request leaves, filled as it is served",
    ("server/oob.py", "stream.authority"): "one out-of-band stream's state, kept by the service that serves it",
}


def _is_layer(node: ast.ClassDef) -> bool:
    calls = [f for f in node.body if isinstance(f, ast.AsyncFunctionDef) and f.name == "__call__"]
    return any([a.arg for a in f.args.args[1:4]] == ["scope", "receive", "send"] for f in calls)


def _attributes(node: ast.ClassDef) -> set[str]:
    """A class's fields (annotated at class level) and the ``self.<name>`` it assigns."""
    fields = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    assigned = {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and ast.unparse(n.value) == "self"
    }
    return fields | assigned


def guarded(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Guarded attribute -> the classes that own it."""
    owners: dict[str, set[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and (node.name in SERVER_CLASSES or _is_layer(node)):
                for name in _attributes(node):
                    owners.setdefault(name, set()).add(node.name)
    return owners


def _targets(node: ast.AST) -> Iterator[tuple[str, str]]:
    """(object, attribute) of each attribute that ``node`` assigns."""
    stack: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        stack = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        stack = [node.target]
    elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("setattr", "object.__setattr__"):
        args = node.args
        if len(args) == 3 and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str):
            yield ast.unparse(args[0]), args[1].value
    while stack:
        target = stack.pop()
        if isinstance(target, ast.Tuple | ast.List):
            stack.extend(target.elts)
        elif isinstance(target, ast.Starred):
            stack.append(target.value)
        elif isinstance(target, ast.Attribute):
            yield ast.unparse(target.value), target.attr


def _walk(node: ast.AST, within: str | None = None) -> Iterator[tuple[ast.AST, str | None]]:
    """Every node under ``node`` with the name of the class it is in."""
    for child in ast.iter_child_nodes(node):
        yield child, within
        yield from _walk(child, child.name if isinstance(child, ast.ClassDef) else within)


def assignments_from_outside(trees: dict[str, ast.Module], owners: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, ``object.attribute``) of each guarded attribute assigned outside the classes that own it."""
    found = []
    for module, tree in trees.items():
        for node, within in _walk(tree):
            for obj, name in _targets(node):
                if obj not in ("self", "cls") and name in owners and within not in owners[name]:
                    found.append((module, f"{obj}.{name}"))
    return found


def _package() -> dict[str, ast.Module]:
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_finder_sees_wiring_by_mutation() -> None:
    owners = {"on_decision": {"LoadReportMiddleware"}, "observe": {"AuthenticationMiddleware"}, "options": {"Server"}}
    code = """
app.on_decision, (auth.observe, x) = a, (b, c)
self.server.options = replace(self.server.options, sock=sock)
server.options += ()
setattr(auth, "observe", c)
self.options = None
class Server:
    def copy(self, other): other.options = self.options
"""
    assert sorted(assignments_from_outside({"m.py": ast.parse(code)}, owners)) == [
        ("m.py", "app.on_decision"),
        ("m.py", "auth.observe"),
        ("m.py", "auth.observe"),  # setattr
        ("m.py", "self.server.options"),
        ("m.py", "server.options"),
    ]


def test_the_guarded_classes_are_found() -> None:
    owners = guarded(_package())
    assert {"LoadReportMiddleware"} <= owners["on_decision"] and {"AuthenticationMiddleware"} <= owners["observe"]
    assert {"Server"} <= owners["options"] and {"ServerOptions"} <= owners["balance"]
    assert {"AuditMiddleware", "OobService", "BodyDeadline"} <= owners["app"]


def test_no_middleware_or_server_attribute_is_assigned_from_outside() -> None:
    trees = _package()
    found = set(assignments_from_outside(trees, guarded(trees)))
    assert found - SHARED_NAMES.keys() == set()
    assert SHARED_NAMES.keys() - found == set()  # the list stays exact


def test_one_request_reaches_the_metrics_and_the_audit_hooks(dev_pki: pki.DevPKI, tmp_path: Path) -> None:
    """Every hook the layers are built with is wired: a layer built without its hook (or reordered out of the
    reach of one) leaves a figure at zero or the audit event without its user."""
    server = assembled(dev_pki, "--metrics-bind-address", "127.0.0.1:0", "--audit-log-path", str(tmp_path / "a.log"))
    assert server.metrics is not None and server.audit is not None
    server.audit.start()
    try:
        assert asyncio.run(served(server.entry, request(dev_pki))) == 200
    finally:
        server.audit.stop()
    assert server.app.on_stripped == server.metrics.on_stripped  # the demo backend sends no ORCA header to strip
    value = server.metrics.registry.get_sample_value
    assert value("authentication_attempts_total", {"result": "success"}) == 1  # observe
    assert value("secure_orca_load_reports_total", {"result": "attached", "reason": "front-proxy"}) == 1
    (event,) = [json.loads(line) for line in (tmp_path / "a.log").read_text().splitlines()]
    assert event["user"]["username"] == "jane"  # observe, into the audit record
