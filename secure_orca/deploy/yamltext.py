"""YAML as an operator reads it (pure: text in, text out): keys in the order the objects were built
(``apiVersion``, ``kind``, ``metadata``, ``spec``), block style, multi-line strings (the Envoy bootstrap in the
ConfigMap, its Lua program) as literal blocks, no anchors or aliases even where two objects share a value."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def dump(documents: list[Any], header: str = "") -> str:
    """``documents`` as one YAML stream (each after ``---``), after ``header`` as comment lines."""
    head = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = yaml.dump_all(
        documents, Dumper=_Dumper, sort_keys=False, explicit_start=True, default_flow_style=False, width=120
    )
    return head + body


def load(text: str) -> list[Any]:
    """The documents of a YAML stream (the inverse of :func:`dump`)."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]
