"""KEP-6315's options as one noun (secure_orca/kep_options.py): every tool reads an option's facts from it, and no
module tests an option's name by substring."""

from __future__ import annotations

import re
from pathlib import Path

import secure_orca
from secure_orca import kep_options
from secure_orca.authz.policy import MODES
from secure_orca.envoy import bootstrap
from secure_orca.server.options.oob import CERTIFICATE_MODES

PACKAGE = Path(secure_orca.__file__).parent
SUBSTRING_TEST = re.compile(r'"(?:front-proxy|load-reader|shared-secret|header-only)" (?:not )?in\b')


def test_no_module_tests_an_option_name_by_substring() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SUBSTRING_TEST.search(line)
    ]
    assert found == []


def test_every_option_names_modes_that_serve_accepts() -> None:
    for option in kep_options.OPTIONS:
        assert option.modes and set(option.modes) <= set(MODES)
        assert kep_options.modes_of(option.auth) == option.modes


def test_the_stream_is_entitled_by_the_certificate_modes_alone() -> None:
    assert CERTIFICATE_MODES is kep_options.CERTIFICATE_MODES
    assert set(bootstrap.OOB_OPTIONS) == {"front-proxy", "load-reader"}
    assert not kep_options.EITHER.certificate_entitles  # a secret also grants: not for the stream


def test_what_the_load_balancer_sends_follows_the_modes() -> None:
    assert kep_options.EITHER.certificate == kep_options.Mode.FRONT_PROXY and kep_options.EITHER.secret
    assert kep_options.OUT_OF_BAND.certificate == kep_options.Mode.LOAD_READER
    assert kep_options.HEADER_ONLY.certificate is None and kep_options.HEADER_ONLY.header_only
    assert kep_options.LOAD_READER.serve_flags == (
        "--endpoint-load-metrics-client-ca-file",
        "--endpoint-load-metrics-allowed-names",
    )
    assert kep_options.EITHER.serve_flags == (
        "--requestheader-client-ca-file",
        "--requestheader-allowed-names",
        "--endpoint-load-metrics-secret-file",
    )
