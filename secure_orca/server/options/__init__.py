"""The flags of `serve`, one module per concern as kube's ``pkg/server/options`` (kubernetes/kubernetes
``staging/src/k8s.io/apiserver/pkg/server/options``): each concern has ``add_flags`` (AddFlags), ``validate``
(Validate: every problem, each naming its flag) and ``to_config`` (ApplyTo: the concern's part of ServeConfig).

serving (secure serving and run options), authentication (client CA, requestheader, tokens, anonymous),
load_metrics (the feature, its modes and their credentials), oob (the out-of-band stream), audit, and backend
(demo and --proxy)."""

from __future__ import annotations

import argparse

from secure_orca.server.options import audit, authentication, backend, load_metrics, oob, serving

CONCERNS = (serving, authentication, load_metrics, oob, audit, backend)


def add_flags(parser: argparse.ArgumentParser) -> None:
    for concern in CONCERNS:
        concern.add_flags(parser)
