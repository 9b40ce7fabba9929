#!/usr/bin/env bash
# Set-up shared by the README's two commands: system tools (h2load, curl, valgrind for the instruction-count
# guard, prometheus and promtool for the documented alert rules, ss for the listening socket's queue), then a
# virtual environment in .venv with the package and every extra. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
for tool in h2load curl valgrind prometheus promtool ss; do command -v "$tool" >/dev/null 2>&1 || missing=1; done
if [ "$missing" = 1 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq nghttp2-client curl valgrind prometheus iproute2 >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq nghttp2-client curl valgrind prometheus iproute2 >/dev/null
  fi
fi
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || {
  echo "setup: a C compiler is needed for the h2load client-certificate shim (apt-get install gcc)" >&2; exit 1; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,envoy,plot,peers,uvloop]"
