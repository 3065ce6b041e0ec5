"""Definition changes per second and their latency (issue 23): 3 brokers of ours, 3 RabbitMQ nodes.

Run: ``python -m benchmarks.definitions [--cycles N] [--clients-per-member K] [--broker-src DIR
--src-label TEXT ...] [--no-rabbitmq] [--append]``. It starts a 3-broker cluster of ours
(``cluster/tests/processes.py``: 127.0.0.2-4, one secret, n3 and n4 join n2) once per
``--broker-src`` (a source tree, e.g. ``git archive <commit>``, run with it as the working directory
and ``PYTHONPATH``; none: the installed package), then a 3-node RabbitMQ cluster on this machine in
the same run (Debian's ``rabbitmq-server``: ``benchmarks.processes.rabbitmq_cluster``, three
private nodes, each with its own node name, ports and data directory, sharing the ``rabbitmq``
user's Erlang cookie, joined with ``rabbitmqctl join_cluster``; RabbitMQ "Clustering Guide").

The load, the same against each: ``K`` pika clients per member (threads of this process, each
with its own connection and channel, all released at one barrier), each doing ``--cycles`` times
``queue.declare`` (durable) of a queue of its own, ``queue.bind`` of it to ``amq.direct``,
``queue.unbind`` and ``queue.delete``: four definition changes per cycle, each waited for (the
client sends the next after the Ok). Default 3 x 2 clients x 150 cycles x 4 = 3,600 changes.
Figures: changes per second (all changes over the wall time from the barrier to the last client's
end), latency p50/p99 in ms (from sending a method to its Ok, over every change), and errors
(channel closes; the client opens a new channel and goes on). The clients share the 2-core
machine with the brokers: compare within one run.

Prints a markdown table; ``--append`` puts it in ``benchmarks/RESULTS.md`` as the ``### Definition
changes`` subsection of Latest (the one it replaces moves to History; ``benchmarks.report``).
Every process it starts is stopped in a ``finally``; every wait is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pika.exceptions

from benchmarks.processes import rabbitmq_cluster
from benchmarks.report import RESULTS_MD, machine_info, place_latest
from cluster.tests.processes import Cluster

HEADING = "### Definition changes (issue 23)"
EXCHANGE = "amq.direct"


@dataclass
class Figures:
    """One cluster's run: ``changes`` made, ``errors`` (channel closes), ``seconds`` of wall
    time, every change's latency in seconds."""

    label: str
    changes: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def per_s(self) -> float:
        """Changes per second (0 without time)."""
        return self.changes / self.seconds if self.seconds > 0 else 0.0

    def percentile_ms(self, q: float) -> float:
        """The ``q`` percentile (0-100) of the latencies, in ms (nearest rank; 0 when none)."""
        return percentile(self.latencies, q) * 1000.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of ``values``; 0.0 for none. Raises ``ValueError``
    for ``q`` outside 0-100."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile out of range: {q}")
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))   # ceil(n q / 100), at least 1
    return ordered[int(rank) - 1]


def table(runs: Sequence[Figures]) -> str:
    """The markdown table: one row per cluster, changes/s (and the ratio to the RabbitMQ row, if
    any), p50 and p99 latency in ms, changes and errors."""
    rabbit = next((r for r in runs if r.label.startswith("RabbitMQ")), None)
    rows = ["| cluster (3 members) | changes/s | vs RabbitMQ | p50 ms | p99 ms | changes | "
            "errors |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        ratio = (f"{r.per_s / rabbit.per_s:.2f}×" if rabbit is not None and rabbit.per_s
                 and r is not rabbit else "—")
        rows.append(f"| {r.label} | {r.per_s:,.0f} | {ratio} | {r.percentile_ms(50):.1f} | "
                    f"{r.percentile_ms(99):.1f} | {r.changes:,} | {r.errors} |")
    return "\n".join(rows)


def _client(url: str, name: str, cycles: int, barrier: threading.Barrier, out: Figures,
            lock: threading.Lock) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    mine: list[float] = []
    errors = 0
    try:
        barrier.wait()
        for k in range(cycles):
            q = f"dbench.{name}.{k}"
            steps: list[tuple[str, tuple[str, ...], dict[str, bool]]] = [
                ("queue_declare", (q,), {"durable": True}), ("queue_bind", (q, EXCHANGE, q), {}),
                ("queue_unbind", (q, EXCHANGE, q), {}), ("queue_delete", (q,), {})]
            for method, a, kw in steps:
                began = time.perf_counter()
                try:
                    getattr(ch, method)(*a, **kw)
                    mine.append(time.perf_counter() - began)
                except pika.exceptions.ChannelClosedByBroker:
                    errors += 1
                    ch = conn.channel()
    finally:
        with lock:
            out.latencies += mine
            out.changes += len(mine)
            out.errors += errors
        if conn.is_open:
            conn.close()


def measure(label: str, urls: Sequence[str], per_member: int, cycles: int) -> Figures:
    """Run the load (module docstring) against ``urls`` (one per member); bounded by the
    clients' ``cycles`` and a 600 s join."""
    out = Figures(label)
    lock = threading.Lock()
    n = len(urls) * per_member
    barrier = threading.Barrier(n + 1, timeout=120)
    threads = [threading.Thread(target=_client, daemon=True,
                                args=(urls[i % len(urls)], f"{os.getpid()}.{i}", cycles, barrier,
                                      out, lock)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    began = time.perf_counter()
    for t in threads:
        t.join(600)
    out.seconds = time.perf_counter() - began
    return out


@contextlib.contextmanager
def ours(src: Path | None) -> Iterator[list[str]]:
    """A 3-broker cluster of ours (from source tree ``src`` when given); yields the AMQP URLs."""
    saved_cwd, saved_path = os.getcwd(), os.environ.get("PYTHONPATH")
    with tempfile.TemporaryDirectory(prefix="defs-bench-") as tmp:
        cluster = Cluster.create(Path(tmp))
        try:
            if src is not None:   # `python -m` puts the working directory first on sys.path
                os.chdir(src)
                os.environ["PYTHONPATH"] = str(src)
            members = cluster.start_three(timeout=30)
            yield [m.uri for m in members]
        finally:
            os.chdir(saved_cwd)
            if saved_path is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved_path
            cluster.stop_all()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (module docstring)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.definitions",
                                description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=150, help="cycles of 4 changes per client")
    p.add_argument("--clients-per-member", type=int, default=2)
    p.add_argument("--broker-src", type=Path, action="append", default=[],
                   help="run our brokers from this source tree (repeatable: one cluster each)")
    p.add_argument("--src-label", action="append", default=[],
                   help="the table's label for each --broker-src, in order")
    p.add_argument("--no-rabbitmq", action="store_true")
    p.add_argument("--append", action="store_true", help="write the table into RESULTS.md")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when every cluster was measured."""
    args = parse_args(argv)
    started = datetime.datetime.now(datetime.UTC)
    sources: list[Path | None] = [s.resolve() for s in args.broker_src] or [None]
    labels = args.src_label + [f"ours ({s or 'installed'})" for s in
                               sources[len(args.src_label):]]
    runs: list[Figures] = []
    for src, label in zip(sources, labels, strict=True):
        with ours(src) as urls:
            runs.append(measure(label, urls, args.clients_per_member, args.cycles))
        print(table(runs[-1:]), flush=True)
    info = machine_info(None)
    if not args.no_rabbitmq:
        with rabbitmq_cluster(3, "dbench") as nodes:
            if nodes:
                urls = [f"amqp://guest:guest@127.0.0.1:{n.port}/%2F" for n in nodes]
                runs.append(measure(f"RabbitMQ {nodes[0].version}", urls,
                                    args.clients_per_member, args.cycles))
                info = [line.replace("a private node", "3 private nodes in one cluster")
                        for line in machine_info(nodes[0])]
                print(table(runs[-1:]), flush=True)
    text = table(runs)
    print(text)
    if args.append:
        sources_line = ["- our brokers ran from the source trees the table names (`--broker-src`: "
                        "their own Python source, no compiled build)"] if args.broker_src else []
        section = "\n".join([
            f"{HEADING}, run of {started:%Y-%m-%d %H:%M} UTC", "",
            f"`python -m benchmarks.definitions {shlex.join(argv or sys.argv[1:])}`: "
            f"{args.clients_per_member} pika clients per member x 3 members, each "
            f"{args.cycles} cycles of queue.declare (durable), queue.bind, queue.unbind, "
            "queue.delete on a queue of its own, each change waited for (module docstring of "
            "`benchmarks/definitions.py`). Aim (issue 23): at least RabbitMQ's rate, p99 under "
            "50 ms.", "", *info, *sources_line, "", text, ""])
        old = RESULTS_MD.read_text() if RESULTS_MD.exists() else ""
        RESULTS_MD.write_text(place_latest(section, old, HEADING))
    return 0


if __name__ == "__main__":
    sys.exit(main())
