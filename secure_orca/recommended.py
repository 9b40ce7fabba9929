"""The recommended option, defined once: the tools' defaults are read from here (serve's
--endpoint-load-metrics-auth, envoy-config's and deploy's --option), and tests/test_recommended.py holds this
equal to the recommendation the evaluation derives (docs/security-options.md).

The evaluation recommends 2b, the load-reader client certificate, as the alpha default by its stated policy
(secure_orca/lab/recommend.py): no client that bypasses the load balancer reads a report, and a leaked or
misissued credential reads load only (no identity, not a bearer secret); out of band is the beta path by the KEP's
phasing. No figure of the run is past its threshold, and ±10% noise on every figure leaves it unchanged
(tests/lab/test_recommend.py), so the product's default does not rest on noise. Pure data."""

from __future__ import annotations

from secure_orca import kep_options

CHOICE = kep_options.LOAD_READER  # KEP-6315 option 2b
OPTION = CHOICE.name  # as --endpoint-load-metrics-auth and envoy-config --option name it
TITLE = "2b. load-reader client certificate"  # as the evaluation titles it (lab/options.py TITLES)
SERVE_MODES = CHOICE.modes  # serve's --endpoint-load-metrics-auth default
