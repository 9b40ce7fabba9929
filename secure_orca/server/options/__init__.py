"""The flags of `serve`, one module per concern, as kube's ``pkg/server/options`` (read at kubernetes/apiserver
24a394e516bfda066d7e2221d7d92c052de27c54, the published mirror of kubernetes/kubernetes
``staging/src/k8s.io/apiserver``: serving.go, authentication.go, audit.go, recommended.go). Each concern has
``add_flags`` (AddFlags), ``validate`` (Validate: a list of every problem, each naming its flag; as
RecommendedOptions.Validate, server.config.build_config gathers every concern's list before refusing) and
``to_config`` (ApplyTo: the concern's part of ServeConfig, which nests by concern). As kube's
MaybeDefaultWithSelfSignedCerts runs before ApplyTo, the development PKI is written (cli.serve.dev_pki) before the
configuration is built, which then only names its files.

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
