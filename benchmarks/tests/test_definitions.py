"""The pure parts of ``benchmarks.definitions``: the percentile, the table, and its place in
RESULTS.md's Latest (``benchmarks.report.place_latest`` with another heading)."""

from __future__ import annotations

import pytest

from benchmarks.definitions import HEADING, Figures, percentile, table
from benchmarks.report import MAKE_BENCH_HEADING, place_latest


def test_nearest_rank_percentile() -> None:
    values = [0.005, 0.001, 0.002, 0.004, 0.003]
    assert percentile(values, 50) == 0.003
    assert percentile(values, 99) == 0.005 and percentile(values, 0) == 0.001
    assert percentile([], 50) == 0.0
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_table_has_rate_ratio_and_latencies_in_ms() -> None:
    ours = Figures("ours", changes=2000, seconds=4.0, latencies=[0.002] * 98 + [0.040] * 2)
    rabbit = Figures("RabbitMQ 3.10.8", changes=1000, seconds=4.0, latencies=[0.010] * 100)
    text = table([ours, rabbit])
    assert "| ours | 500 | 2.00× | 2.0 | 40.0 | 2,000 | 0 |" in text
    assert "| RabbitMQ 3.10.8 | 250 | — | 10.0 | 10.0 | 1,000 | 0 |" in text


def test_the_section_replaces_its_own_subsection_of_latest_only() -> None:
    text = (f"# Results\n\nIntro.\n\n## Latest\n\n{MAKE_BENCH_HEADING}, run of A\n\nbench\n\n"
            f"{HEADING}, run of OLD\n\nold table\n\n## History\n\n## x\n")
    out = place_latest(f"{HEADING}, run of NEW\n\nnew table\n", text, HEADING)
    latest, history = out.split("\n## History\n")
    assert "new table" in latest and "old table" not in latest and "bench" in latest
    assert "## Definition changes (issue 23), run of OLD" in history
    assert history.index("old table") < history.index("## x")
