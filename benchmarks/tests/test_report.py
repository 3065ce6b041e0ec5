"""``make bench`` writes its table into RESULTS.md's ``## Latest`` and keeps the diary below
(``benchmarks.report.place_latest``; the layout is described at the top of RESULTS.md)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.report import MAKE_BENCH_HEADING, place_latest

RESULTS = Path(__file__).resolve().parents[1] / "RESULTS.md"

FILE = """# Results

Intro.

## Latest

### make bench: ours against RabbitMQ, run of OLD

| old table |

#### Raw amqbench figures

old raw

### Cluster

cluster figures

## History

Diary intro.

## Backlog, run of X

backlog figures
"""

NEW = f"{MAKE_BENCH_HEADING}, run of NEW\n\n| new table |\n\n#### Raw amqbench figures\n\nnew raw\n"


def test_a_run_replaces_the_latest_table_and_moves_the_old_one_to_history() -> None:
    out = place_latest(NEW, FILE)
    latest, history = out.split("\n## History\n")
    assert out.startswith("# Results\n\nIntro.\n\n## Latest\n")
    assert "| new table |" in latest and "#### Raw amqbench figures\n\nnew raw" in latest
    assert "| old table |" not in latest
    assert "### Cluster\n\ncluster figures" in latest
    assert latest.index("new table") < latest.index("### Cluster")
    # the replaced run heads History, one heading level up, before the sections already there
    assert "## make bench: ours against RabbitMQ, run of OLD" in history
    assert "### Raw amqbench figures\n\nold raw" in history
    assert history.index("Diary intro.") < history.index("run of OLD") < history.index(
        "## Backlog, run of X")


def test_two_runs_keep_both_in_order_and_lose_nothing() -> None:
    once = place_latest(NEW, FILE)
    twice = place_latest(NEW.replace("NEW", "NEWER"), once)
    latest, history = twice.split("\n## History\n")
    assert "run of NEWER" in latest and "run of NEW\n" not in latest
    assert history.index("run of NEW\n") < history.index("run of OLD")
    for text in ("cluster figures", "backlog figures", "old raw", "new raw", "Diary intro."):
        assert text in twice


def test_a_file_without_latest_gets_the_layout_and_keeps_its_text() -> None:
    out = place_latest(NEW, "# Benchmark results\n\n## Run of OLD\n\nold text\n")
    assert "\n## Latest\n" in out and "run of NEW" in out.split("## History")[0]
    assert "old text" in out.split("\n## History\n")[1]


def test_the_real_results_file_has_a_make_bench_table_in_latest() -> None:
    text = RESULTS.read_text()
    latest = text.split("\n## Latest\n")[1].split("\n## History\n")[0]
    assert f"\n{MAKE_BENCH_HEADING}" in latest
    out = place_latest(NEW, text)
    assert len(out) > len(text) and "run of NEW" in out.split("\n## History\n")[0]
