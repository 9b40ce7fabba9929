"""What a wire measurement found (pure data): kept out of ``wire`` (sockets, TLS, threads) so that the tables
and the model, which are pure, can name it."""

from __future__ import annotations

from dataclasses import dataclass

from secure_orca.hpackcost.model import CellResult


@dataclass(frozen=True)
class WireResult:
    """Figures for one per-connection rate; per-response and per-second figures are steady state.

    Names follow :class:`secure_orca.hpackcost.model.CellResult` where the meaning is the same.
    """

    rate: float  # requested responses/s per connection
    achieved_rate: float  # mean over opted-in workers
    connections: int  # workers per variant
    opened: int  # HTTP/2 connections opened (both variants; more than 2 x connections after GOAWAYs)
    responses: int  # opted-in responses
    responses_without: int
    reported: int  # opted-in responses that carried a report
    refused: int
    statuses: dict[int, int]  # opted-in responses by :status
    statuses_without: dict[int, int]
    uncompressed: float  # name + value octets of the reports (mean)
    entry_size: float
    first_send: float | None  # wire bytes of the first report on a connection (mean)
    marginal: float  # walker attribution: replay with minus without, per response
    orca_bytes: float
    eviction_cost: float
    literals_per_s: float  # per connection
    values_per_s: float  # per connection: responses whose report differs from the one before
    evictions_per_s: float
    orca_evictions_per_s: float
    bytes_per_s: float  # per connection: marginal x achieved rate
    ab_marginal: float  # mean header block with the opt-in minus without (no replay)
    block_with: float
    block_without: float
    bin_marginal: float  # the same header lists with the report as endpoint-load-metrics-bin (replayed)
    header_bytes: int  # opted-in connections: header block bytes, as h2load counts them
    header_bytes_without: int
    header_frame_bytes: int  # opted-in connections: HEADERS + CONTINUATION frames with their 9-byte headers
    replay_exact: bool
    model: CellResult | None = None

    @property
    def marginal_ratio(self) -> float:
        """Marginal bytes per response per octet of report (name + value): comparable across field sets."""
        return self.marginal / self.uncompressed if self.uncompressed else 0.0
