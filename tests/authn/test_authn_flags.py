"""The authentication flags refuse bad values and files with one line naming the flag, exit 2, no traceback,
and never show a token."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from secure_orca import pki
from tests.commandline import base, run_cli, write

TOKEN = "tok-do-not-show-0123456789"


def bad_cases(p: pki.DevPKI, tmp: Path) -> dict[str, tuple[list[str], str]]:
    few = write(tmp / "few.csv", f"{TOKEN},user\n".encode())
    broken = write(tmp / "broken.csv", f'{TOKEN},user,1\n"{TOKEN},user,2\n'.encode())
    empty = write(tmp / "empty.csv", b"\n")
    open_file = write(tmp / "open.csv", f"{TOKEN},user,1\n".encode(), 0o644)
    binary = write(tmp / "binary.csv", b"\xff\xfe" + TOKEN.encode() + b",user,1\n")
    return {
        "token file missing": (["--token-auth-file", str(tmp / "nope.csv")], "--token-auth-file: .* no such file"),
        "token file too few columns": (
            ["--token-auth-file", few],
            "--token-auth-file: .* line 1 must have at least 3 columns",
        ),
        "token file bad CSV": (["--token-auth-file", broken], "--token-auth-file: .* line 2 is not valid CSV"),
        "token file empty": (["--token-auth-file", empty], "--token-auth-file: .* holds no token"),
        "token file world-readable": (["--token-auth-file", open_file], "--token-auth-file: .* world-readable"),
        "token file not text": (["--token-auth-file", binary], "--token-auth-file: .* not UTF-8 text"),
        "uid headers without the standard one": (
            ["--requestheader-uid-headers", "X-Proxy-Uid"],
            "--requestheader-uid-headers: .* X-Remote-Uid",
        ),
        "empty header name": (
            ["--requestheader-username-headers", "X-Remote-User, ,X-Other"],
            "--requestheader-username-headers: empty value",
        ),
        "empty extra prefix": (
            ["--requestheader-extra-headers-prefix", ","],
            "--requestheader-extra-headers-prefix: empty value",
        ),
        "anonymous-auth not a boolean": (["--anonymous-auth=maybe"], "--anonymous-auth: invalid boolean value"),
        "proxy cert without key": (
            ["--proxy-client-cert-file", str(p.cert("front_proxy_client"))],
            "--proxy-client-key-file must be given together",
        ),
        "proxy key mismatch": (
            [
                "--proxy-client-cert-file",
                str(p.cert("front_proxy_client")),
                "--proxy-client-key-file",
                str(p.key("user")),
            ],
            "--proxy-client-key-file: .* does not match",
        ),
        "missing-user unknown": (
            ["--requestheader-missing-user", "admin"],
            "--requestheader-missing-user: invalid choice",
        ),
    }


CASES = [
    "token file missing",
    "token file too few columns",
    "token file bad CSV",
    "token file empty",
    "token file world-readable",
    "token file not text",
    "uid headers without the standard one",
    "empty header name",
    "empty extra prefix",
    "anonymous-auth not a boolean",
    "proxy cert without key",
    "proxy key mismatch",
    "missing-user unknown",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_authentication_input_is_one_line_exit_2(dev_pki: pki.DevPKI, tmp_path: Path, case: str) -> None:
    extra, expected = bad_cases(dev_pki, tmp_path)[case]
    result = run_cli(*base(dev_pki), *extra)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and TOKEN not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("secure-orca serve: error: ")
    assert re.search(expected, last), last
