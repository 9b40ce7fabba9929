"""``secure-orca hpack model --plot``: marginal bytes per response against the per-connection rate (matplotlib,
the ``plot`` extra)."""

from __future__ import annotations

from collections.abc import Sequence

from secure_orca.errors import UsageError
from secure_orca.hpackcost.model import MITIGATIONS, CellResult, Scenario
from secure_orca.hpackcost.tables import KEP_BYTES_PER_S, KEP_QPS


def plot(results: Sequence[CellResult], base: Scenario, path: str) -> None:
    """PNG of marginal bytes per response against per-connection rate, one line per mitigation."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, mitigation in MITIGATIONS.items():
        decimals = min(base.decimals, mitigation.decimals or base.decimals)
        points = sorted(
            (r.rate, r.marginal)
            for r in results
            if r.mitigation == name and r.interval == base.interval and r.decimals == decimals
        )
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.01)
    ax.set_xlabel("responses per second on the connection")
    ax.set_ylabel("marginal header bytes per response")
    ax.set_title(f"ORCA report over HPACK (4096-byte table), sampling every {base.interval:g} s")
    ax.axhline(KEP_BYTES_PER_S / KEP_QPS, color="grey", linestyle=":", label="KEP: 0.1 MB/s at 10k QPS")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
