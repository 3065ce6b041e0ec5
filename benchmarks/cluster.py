"""Cluster benchmarks (issue 5): what a shared queue costs when it deals across brokers, what a second
broker buys in throughput, and how fast a killed member disappears from the survivors' view.

Run: ``python -m benchmarks.cluster`` (``--help`` for the options). It starts real broker processes
on 127.0.0.2, .3, ... (``cluster/tests/processes.py``: one shared ``--cluster-secret`` file, the
first broker founds the cluster and the others ``--seed`` it), drives them with amqbench (the C load
generator of ``../shared/bench``), prints markdown tables and appends them, with the date and the
machine, to ``benchmarks/RESULTS.md`` (``--no-write`` to leave it alone). Every process it starts is
killed in a ``finally`` (also on Ctrl-C or SIGTERM) and every wait is bounded.
This module is the command line and the order of things; the three measurements below are in
``cluster_cpu.py`` (with the TCP proxy of ``cluster_proxy.py``), ``cluster_throughput.py`` and
``cluster_failover.py``, what they share (an amqbench process) in ``cluster_bench.py``, the tables
in ``cluster_report.py``.

1. CPU per message, local vs relayed. Two brokers A and B in one cluster. "local": amqbench's
   producer and consumer are both connected to A. "relayed": the producer is connected to A and the
   consumer to B only, so A has no local consumer and deals every message to B over the peer link
   (Cluster.Relay + Basic.Publish), and B delivers it. Both cases publish 1 KiB transient messages
   at the same fixed rate (``--rate``, default 20,000 msg/s) with no-ack, so both brokers do the
   same amount of client work; the figure is the user + system CPU time (psutil) of BOTH broker
   processes over the run divided by the messages consumed. amqbench connects all its connections
   to one address, so it is pointed at a small TCP proxy in this process that sends its connections
   in the order amqbench opens them (the admin connection that deletes and declares the queue, then
   the consumer, then, 0.2 s later, the producer) to the broker the case asks for. Both cases go
   through the proxy, whose CPU time (this process) is reported but not counted. The cases run in
   the order local, relayed, relayed, local, ... (``--rounds``) after a discarded 1 s warm-up of
   each, each on a queue of its own. Aim: relayed <= 1.3x local (issue 10; issue 5 asked 1.5x).

2. Throughput, one broker vs two. One standalone broker (not clustered) with one amqbench of 2
   producers + 2 consumers (``--producers 2 --consumers 2``) against a two-broker cluster with one
   amqbench (1 producer + 1 consumer) against each broker, both let go at the same moment on the
   same queue name (so the queue is shared: each broker deals what its producer publishes
   round-robin over its local consumer and the other broker's consumer). For comparison, the same
   two amqbench processes on a queue of their own each (nothing is dealt across: what two brokers
   give when the work splits cleanly). 1 KiB, no-ack, as fast as possible, ``--seconds`` of
   publishing, new queue names per run. Order: 1 broker, shared, separate, then reversed
   (``--rounds``). Aim: shared >= 1.4x one broker (issue 10; issue 5 asked 1.5x).
   amqbench's own consumed/s does not add up with two processes on one queue: a process stops
   consuming when its consumers got as many messages as its own producer published, and the other
   then waits out its 5 s drain for messages the first one took. So the rate is measured from
   outside, the same way in every configuration: the bytes received by the amqbench processes' TCP
   connections (``ss -tinp``, tcpi_bytes_received, sampled every 0.25 s) over a window inside the
   publishing time (1 s after the start to the end of publishing), divided by the bytes of one
   delivery (Basic.Deliver + content header + body frames), summed over the processes. amqbench's
   own figures are kept in the raw table. Also sampled over the window: the CPU the broker
   processes used (in cores) and how busy the whole machine was.
   amqbench deletes its queue when it exists at its start, so with two processes on one queue the
   one that looks second can delete the queue the first already consumes from; that consumer is
   not told (rabbitmq-c does not ask for consumer_cancel_notify) and gets nothing from then on, or
   the first one's Basic.Consume meets the gap (404). Such a run is stopped (or fails) early, its
   queue is deleted and it is tried again on a new queue, up to 8 times; the raw table shows the
   attempt that counted.
   The brokers (one Python process each) and amqbench's threads share the machine's cores, so on a
   2-core machine the machine is expected to be the limit.

3. Failure detection. Three brokers; ``kill -9`` of a member (the last one in the view) or of the
   leader (the first); each survivor's Connection.Start ``cluster_members`` is polled every 20 ms
   (a new TCP connection per poll, one polling thread per survivor) until it lists exactly the
   survivors; the time is from the signal until the last survivor shows it. A fresh cluster per
   kill, ``--repeats`` kills of each kind for each ``--ping-intervals`` value (0.5 s is the broker's
   default, 0.25 s what the cluster tests use); min / median / max reported. Aim: < 2 s (RabbitMQ's
   default net_ticktime is 60 s). On one machine a killed process's sockets are closed by the
   kernel, so the peers see their links drop at once; a crashed machine or a cut cable closes
   nothing. For that case the same runs are repeated with SIGSTOP instead of SIGKILL (``--signals``):
   the frozen broker's sockets stay open and only the ring ping (a peer unheard for 3 ping
   intervals is suspected) removes it.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.amqbench import OUT_DIR, build_amqbench
from benchmarks.cluster_cpu import CpuRun, measure_cpu
from benchmarks.cluster_failover import ACTION, KillRun, measure_failover
from benchmarks.cluster_report import raw_tables, section, summary_table
from benchmarks.cluster_throughput import TpRun, measure_throughput
from benchmarks.processes import OurBroker
from benchmarks.report import RESULTS_MD, machine_info
from cluster.tests.processes import Cluster, Member, wait_for


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that kill our processes


# --------------------------------------------------------------------------- brokers
def start_pair(base: Path, ping_interval: float) -> tuple[Cluster, Member, Member]:
    """Brokers A (127.0.0.2, founds the cluster) and B (127.0.0.3, seeds A); both in one view."""
    cluster = Cluster.create(base, "--ping-interval", str(ping_interval), "--log-level", "warning")
    a = cluster.start(2)
    b = cluster.start(3, a)
    wait_for(lambda: a.members() == [a.address, b.address] == b.members(), 15,
             "A and B did not agree on a view of two")
    return cluster, a, b


# --------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--amqbench", type=Path, help="a prebuilt amqbench binary (default: build "
                   "into benchmarks/out/)")
    p.add_argument("--seconds", type=int, default=5, help="publishing time per run (default 5)")
    p.add_argument("--rate", type=int, default=20000,
                   help="msg/s of the CPU-per-message runs (default 20000)")
    p.add_argument("--rounds", type=int, default=3,
                   help="runs of each CPU case and each throughput configuration (default 3)")
    p.add_argument("--repeats", type=int, default=3,
                   help="kills of each kind per ping interval (default 3)")
    p.add_argument("--ping-intervals", default="0.5,0.25",
                   help="broker --ping-interval values for the kill runs (default 0.5,0.25)")
    p.add_argument("--signals", default="kill,freeze",
                   help="kill (kill -9) and/or freeze (SIGSTOP) for the failure-detection runs")
    p.add_argument("--only", default="cpu,throughput,failover",
                   help="comma-separated subset of cpu,throughput,failover")
    p.add_argument("--no-warmup", action="store_true", help="skip the discarded 1 s CPU runs")
    p.add_argument("--no-write", action="store_true", help="do not append to RESULTS.md")
    args = p.parse_args(argv)
    args.only = {x.strip() for x in args.only.split(",") if x.strip()}
    if args.only - {"cpu", "throughput", "failover"}:
        p.error(f"--only: unknown {', '.join(sorted(args.only))}")
    args.signals = [x.strip() for x in args.signals.split(",") if x.strip()]
    if set(args.signals) - set(ACTION):
        p.error("--signals: kill and/or freeze")
    if not 1 <= args.seconds <= 60:
        p.error("--seconds: 1 to 60")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    started = datetime.datetime.now(datetime.UTC)
    info = machine_info(None)
    binary = None
    if args.only & {"cpu", "throughput"}:
        binary = args.amqbench or build_amqbench(OUT_DIR)
        if binary is None:
            return 1
        if shutil.which("ss") is None and "throughput" in args.only:
            print("`ss` (iproute2) is needed for the throughput runs")
            return 1
    workdir = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    cpu: list[CpuRun] = []
    tp: list[TpRun] = []
    kills: list[KillRun] = []
    pair: Cluster | None = None
    solo: OurBroker | None = None
    try:
        if args.only & {"cpu", "throughput"}:
            (workdir / "pair").mkdir()
            pair, a, b = start_pair(workdir / "pair", 0.5)
            print(f"cluster: A {a.address} (pid {a.proc.pid}), B {b.address} (pid {b.proc.pid})",
                  flush=True)
            if "cpu" in args.only:
                print(f"1. CPU per message, {args.rate:,} msg/s, {args.seconds} s per run",
                      flush=True)
                cpu = measure_cpu(binary, a, b, args.rate, args.seconds, args.rounds,
                                  not args.no_warmup)
            if "throughput" in args.only:
                (workdir / "solo").mkdir()
                solo = OurBroker(workdir / "solo", [])
                solo.start()
                print(f"2. throughput, {args.seconds} s per run; single broker on port "
                      f"{solo.port} (pid {solo.proc.pid})", flush=True)
                tp = measure_throughput(binary, solo, a, b, args.seconds, args.rounds)
            pair.stop_all()
            pair = None
            if solo is not None:
                solo.stop()
                solo = None
        if "failover" in args.only:
            intervals = [float(x) for x in args.ping_intervals.split(",") if x.strip()]
            print(f"3. failure detection, ping intervals {intervals}, {args.repeats} kills each",
                  flush=True)
            kills = measure_failover(workdir, intervals, args.repeats, args.signals)
    finally:
        if pair is not None:
            pair.stop_all()
        if solo is not None:
            solo.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    summary = summary_table(cpu, tp, kills, args.rate)
    raw = raw_tables(cpu, tp, kills)
    print()
    print(summary)
    print()
    print(raw)
    if not args.no_write:
        with open(RESULTS_MD, "a", encoding="utf-8") as f:  # appended: others add sections too
            f.write(section(summary, raw, args, started, info))
        print(f"\nappended to {RESULTS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
