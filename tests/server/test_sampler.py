"""The sampler's kernel-file parsers and its cgroup v2 / v1 / procfs sources, on prepared file trees."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from secure_orca.orca.report import parse_text
from secure_orca.server.sampler import (
    IN_FLIGHT_METRIC,
    Sampler,
    Sources,
    parse_cfs,
    parse_cpu_max,
    parse_memory_limit,
    parse_proc_cgroup,
)

GIB = 1 << 30
MEMINFO = f"MemTotal:       {16 * GIB // 1024} kB\nMemFree: 1 kB\n"


def tree(root: Path, files: dict[str, str]) -> Sources:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Sources(root)


def test_parsers() -> None:
    assert parse_cpu_max("150000 100000\n") == 1.5
    assert parse_cpu_max("max 100000") is None
    assert parse_cfs("-1", "100000") is None and parse_cfs("50000\n", "100000\n") == 0.5
    assert parse_memory_limit("max", GIB) is None
    assert parse_memory_limit("9223372036854771712", 16 * GIB) is None  # v1 "unlimited"
    assert parse_memory_limit(str(GIB), 16 * GIB) == GIB
    assert parse_proc_cgroup("0::/kubepods/pod1\n") == {"": "/kubepods/pod1"}
    assert parse_proc_cgroup("4:cpu,cpuacct:/a\n7:memory:/b\n")["memory"] == "/b"


def test_cgroup_v2_limits(tmp_path: Path) -> None:
    sources = tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/pod\n",
            "proc/meminfo": MEMINFO,
            "sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
            "sys/fs/cgroup/pod/cpu.max": "50000 100000\n",
            "sys/fs/cgroup/pod/memory.max": str(GIB),
            "sys/fs/cgroup/pod/memory.current": str(GIB // 4),
        },
    )
    assert sources.cpu_capacity() == 0.5
    assert sources.mem_utilization() == 0.25


def test_cgroup_v1_limits(tmp_path: Path) -> None:
    sources = tree(
        tmp_path,
        {
            "proc/self/cgroup": "4:cpu,cpuacct:/\n7:memory:/\n",
            "proc/meminfo": MEMINFO,
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000\n",
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": str(2 * GIB),
            "sys/fs/cgroup/memory/memory.usage_in_bytes": str(GIB),
        },
    )
    assert sources.cpu_capacity() == 1.0
    assert sources.mem_utilization() == 0.5


def test_plain_procfs_uses_cpu_count_and_rss(tmp_path: Path) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    sources = tree(tmp_path, {"proc/meminfo": MEMINFO, "proc/self/statm": f"100 {GIB // page} 0 0 0 0 0\n"})
    assert sources.cpu_capacity() == len(os.sched_getaffinity(0))
    assert sources.mem_utilization() == pytest.approx(1 / 16)


def test_unlimited_v2_falls_back_to_rss(tmp_path: Path) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    sources = tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "proc/meminfo": MEMINFO,
            "proc/self/statm": f"1 {2 * GIB // page}\n",
            "sys/fs/cgroup/cgroup.controllers": "",
            "sys/fs/cgroup/cpu.max": "max 100000\n",
            "sys/fs/cgroup/memory.max": "max\n",
            "sys/fs/cgroup/memory.current": "5\n",
        },
    )
    assert sources.cpu_capacity() == len(os.sched_getaffinity(0))
    assert sources.mem_utilization() == pytest.approx(2 / 16)


def test_garbage_and_vanished_files_leave_the_field_out(tmp_path: Path) -> None:
    sources = tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "proc/meminfo": MEMINFO,
            "sys/fs/cgroup/cgroup.controllers": "",
            "sys/fs/cgroup/cpu.max": "garbage\n",
            "sys/fs/cgroup/memory.max": "lots\n",
            "sys/fs/cgroup/memory.current": "\x00\x01",
        },
    )
    assert sources.cpu_capacity() == len(os.sched_getaffinity(0))
    assert sources.mem_utilization() is None  # and no statm to fall back on
    sampler = Sampler(sources=sources, cpu_clock=iter([0.0, 0.5]).__next__)
    sampler.counters.requests = 0
    first = sampler.sample(100.0)
    sampler.counters.requests, sampler.counters.errors, sampler.counters.in_flight = 20, 4, 3
    second = sampler.sample(101.0)
    assert first.mem_utilization is None and first.rps_fractional is None
    assert second.rps_fractional == 20.0 and second.eps == 4.0
    assert second.cpu_utilization == pytest.approx(0.5 / len(os.sched_getaffinity(0)))
    assert second.named_metrics == {IN_FLIGHT_METRIC: 3.0}


def test_tick_publishes_a_preserialized_header_and_survives_failures(tmp_path: Path) -> None:
    clock = iter([0.0, 0.1]).__next__  # a third call raises StopIteration: a failing tick
    sampler = Sampler(sources=Sources(tmp_path), cpu_clock=clock)
    sampler.tick()
    sampler.tick()
    header = sampler.header
    assert header is not None and header[0] == b"endpoint-load-metrics"
    parse_text(header[1].decode())
    sampler.tick()
    assert (sampler.ticks, sampler.errors, sampler.header) == (2, 1, header)


def test_ticks_on_the_event_loop_and_accounts_its_cpu() -> None:
    async def main() -> Sampler:
        sampler = Sampler(interval=0.01)
        sampler.start()
        for _ in range(500):
            if sampler.ticks >= 4:
                break
            await asyncio.sleep(0.01)
        sampler.stop()
        return sampler

    sampler = asyncio.run(main())
    assert sampler.ticks >= 4 and sampler.errors == 0 and sampler.encodes == sampler.ticks
    assert 0 < sampler.cpu_seconds < 5


def test_start_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError):
        Sampler(interval=0.01).start()


def test_other_formats_are_encoded_once_per_sample_after_the_first_ask(tmp_path: Path) -> None:
    """JSON and BIN (the caller's format): the first request that asks encodes it; from then on each tick does,
    and the request path only reads."""
    from secure_orca.orca import dialect

    sampler = Sampler(sources=Sources(tmp_path), cpu_clock=iter(float(i) for i in range(100)).__next__)
    assert sampler.header_in("JSON") is None  # nothing sampled yet
    sampler.tick()
    assert sampler.header_in("TEXT") is sampler.header and sampler.encodes == 1
    first = sampler.header_in("JSON")
    assert first is not None and first[1].startswith(b"JSON ") and sampler.encodes == 2  # the first ask
    assert sampler.header_in("JSON") is first and sampler.encodes == 2
    sampler.tick()  # TEXT and the wanted JSON; BIN not yet asked
    assert sampler.encodes == 4
    second = sampler.header_in("JSON")
    assert second is not None and second is not first and sampler.encodes == 4  # the tick made it
    assert sampler.report is not None and dialect.parse_value(second[1].decode()) == dialect.parse_value(
        dialect.encode(sampler.report, "JSON", sampler.decimals)[1].decode()
    )
    binary = sampler.header_in("BIN")
    assert binary is not None and dialect.parse_bin(binary[1].decode()[4:]) is not None and sampler.encodes == 5
