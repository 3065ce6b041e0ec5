"""Rolling restart of a 3-broker cluster under a confirmed load (issue 26):
``python -m benchmarks.rolling_restart [--runs N] [--workdir DIR]``.

Each run starts n2, n3, n4 on 127.0.0.2-4 with their management APIs, declares a quorum queue,
starts a pika publisher (persistent, confirms, one at a time) and a pika consumer (acks), both
over the list of every member, and restarts every member in turn the way RabbitMQ's "Upgrading
RabbitMQ" guide does: ``ctl await_online_quorum_plus_one``, ``ctl drain``, SIGTERM, start again
with the same data dir, ``ctl revive`` (``cluster.tests.rolling``). Prints per run: seconds
per member (from the quorum check to revive), the longest time without a confirm during the
roll, confirmed, received, confirmed-but-lost messages and client connections made; exits 1
when a confirmed message was lost. The test ``cluster/tests/test_rolling_restart_processes.py``
runs the same with one member (all three with AMQP_ROLLING_ALL=1).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cluster.tests.processes import Cluster
from cluster.tests.rolling import Roll, roll, start_cluster


def one_run(base: Path) -> Roll:
    """One rolling restart of a fresh cluster under ``base``."""
    cluster = Cluster.create(base, "--log-level", "warning")
    try:
        members, urls, ports = start_cluster(cluster)
        return roll(cluster, members, urls, ports)
    finally:
        cluster.stop_all()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``--runs`` rolling restarts; print each one's figures (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    lost = 0
    print("| run | s per member (n2, n3, n4) | longest without a confirm | confirmed | received "
          "| lost | publisher / consumer connections |")
    print("|---|---|---|---|---|---|---|")
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
            r = one_run(Path(tmp))
        lost += len(r.lost)
        per = ", ".join(f"{s:.1f}" for s in r.per_member.values())
        print(f"| {i + 1} | {per} | {r.longest_unconfirmed_s:.2f} s | {r.confirmed:,} | "
              f"{r.received:,} | {len(r.lost)} | {r.publisher_connects} / "
              f"{r.consumer_connects} |", flush=True)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
