"""The relay loss scenario of issue 10, repeated in a bounded loop: ``python -m benchmarks.relay_loss
[--runs 20] [--messages 1000] [--scenario consumer|publisher|both] [--no-results]``.

Each run starts three real brokers on 127.0.0.2-4 (``cluster.tests.relay_scenarios``), publishes
persistent messages with confirms on one, lets a pika consumer on another hold ``--prefetch`` of
them unacked, kills -9 a broker (the consumer's, or the publisher's), restarts it with its data
and drains every broker. Prints one line per run and a summary; appends a row per scenario to
``benchmarks/RESULTS.md`` (section "Relay loss") unless ``--no-results``. Exit 1 when any
confirmed message was lost.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
import time
from pathlib import Path

from cluster.tests.processes import Cluster
from cluster.tests.relay_scenarios import consumer_kill_scenario, publisher_kill_scenario

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SECTION = "## Relay loss (issue 10): kill -9 under relayed, unacked messages"
SCENARIOS = {"consumer": consumer_kill_scenario, "publisher": publisher_kill_scenario}


def run(scenario: str, runs: int, messages: int, prefetch: int) -> dict[str, int]:
    """``runs`` repetitions of ``scenario``; totals of confirmed, lost, duplicates, redelivered."""
    totals = {"runs": 0, "confirmed": 0, "lost": 0, "duplicates": 0, "redelivered": 0}
    for i in range(runs):
        base = Path(tempfile.mkdtemp(prefix="relay-loss-"))
        cluster = Cluster.create(base)
        started = time.monotonic()
        try:
            outcome = SCENARIOS[scenario](cluster, messages=messages, prefetch=prefetch,
                                          queue=f"relay-{scenario}-{i}")
        finally:
            cluster.stop_all()
        lost = len(outcome.lost)
        dups = len(outcome.drained) - len(set(outcome.drained))
        print(f"{scenario} run {i + 1}/{runs}: confirmed={len(outcome.confirmed)} lost={lost} "
              f"duplicates={dups} redelivered={outcome.redelivered} "
              f"({time.monotonic() - started:.1f} s)", flush=True)
        if lost:
            print(f"  kept for inspection: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
        totals["runs"] += 1
        totals["confirmed"] += len(outcome.confirmed)
        totals["lost"] += lost
        totals["duplicates"] += dups
        totals["redelivered"] += outcome.redelivered
    return totals


def append_results(rows: list[tuple[str, dict[str, int]]], messages: int, prefetch: int) -> None:
    """Add this run's rows under the section (created with its header when missing)."""
    text = RESULTS.read_text() if RESULTS.exists() else ""
    if SECTION not in text:
        text = text.rstrip("\n") + (
            f"\n\n{SECTION}\n\n`python -m benchmarks.relay_loss`: 3 brokers, a durable shared "
            "queue, a pika consumer on n3 holding `prefetch` relayed messages unacked, a pika "
            "publisher on n2 (persistent, confirms); kill -9 of the consumer's broker (consumer) "
            "or of the publisher's (publisher), restart, drain all three.\n\n"
            "| date | scenario | messages/run | prefetch | runs | confirmed | lost | "
            "duplicates | redelivered |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
    today = dt.date.today().isoformat()
    lines = [f"| {today} | {name} | {messages} | {prefetch} | {t['runs']} | {t['confirmed']} | "
             f"{t['lost']} | {t['duplicates']} | {t['redelivered']} |" for name, t in rows]
    head, sep, tail = text.partition(SECTION)
    table_end = tail.find("\n\n", tail.find("|---"))
    if table_end < 0:
        tail = tail.rstrip("\n") + "\n" + "\n".join(lines) + "\n"
    else:
        tail = tail[:table_end] + "\n" + "\n".join(lines) + tail[table_end:]
    RESULTS.write_text(head + sep + tail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=200)
    parser.add_argument("--scenario", choices=["consumer", "publisher", "both"], default="both")
    parser.add_argument("--no-results", action="store_true", help="do not touch RESULTS.md")
    args = parser.parse_args()
    names = ["consumer", "publisher"] if args.scenario == "both" else [args.scenario]
    rows = [(name, run(name, args.runs, args.messages, args.prefetch)) for name in names]
    for name, t in rows:
        print(f"{name}: runs={t['runs']} confirmed={t['confirmed']} lost={t['lost']} "
              f"duplicates={t['duplicates']} redelivered={t['redelivered']}")
    if not args.no_results:
        append_results(rows, args.messages, args.prefetch)
    return 1 if any(t["lost"] for _n, t in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
