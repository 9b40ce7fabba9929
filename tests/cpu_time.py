"""``--cpu-time N``: the N tests that used the most CPU, and the suite's total, printed at the end of the run.

On a machine that other jobs load, a test's wall time says more about them than about the test; its CPU seconds
(the pytest process's own, plus every descendant it reaped: Envoy, h2load, Go peers, and the replicas that
its forkserver reaped, ``tests.forked``) barely move. The
suite is CPU-bound on two cores, so these are the figures to rank and cut. A module or session fixture's
processes count for the test in whose teardown they stop. Processes that are killed and never reaped (a
documented block's leftovers) are not counted."""

from __future__ import annotations

import resource
from collections.abc import Generator

import pytest

from tests import forked

_STARTED = pytest.StashKey[float]()


def cpu_seconds() -> float:
    """User and system CPU of this process and of its reaped descendants, forked replicas included."""
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime + forked.reaped_cpu_seconds()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-time", type=int, default=0, metavar="N", help="print the N tests that used the most CPU seconds"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.getoption("cpu_time") > 0:
        item.stash[_STARTED] = cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "teardown" and _STARTED in item.stash:
        report.user_properties.append(("cpu_seconds", cpu_seconds() - item.stash[_STARTED]))
    return report


class Totals:
    """CPU seconds per test id, gathered from the reports (pytest-xdist sends the workers' to the controller)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == "cpu_seconds" and report.when == "teardown" and isinstance(value, float):
                self.seconds[report.nodeid] = value

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
        count = config.getoption("cpu_time")
        ranked = sorted(self.seconds.items(), key=lambda kv: kv[1], reverse=True)
        terminalreporter.write_sep("=", f"{count} tests with the most CPU seconds (own and reaped children)")
        for nodeid, seconds in ranked[:count]:
            terminalreporter.write_line(f"{seconds:8.2f}s {nodeid}")
        total = sum(self.seconds.values())
        terminalreporter.write_line(f"{total:8.1f}s in all, over {len(self.seconds)} tests")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("cpu_time") > 0 and not hasattr(config, "workerinput"):  # the controller, or no xdist
        config.pluginmanager.register(Totals(), "cpu-time-totals")
