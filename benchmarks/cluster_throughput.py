"""Cluster benchmark 2, throughput of one broker vs two (see ``benchmarks/cluster.py``)."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.cluster_bench import Bench, bench_cmd, bench_timeout, cpu_seconds, delivery_bytes
from benchmarks.processes import OurBroker
from cluster.tests.processes import Member

SS_PID = re.compile(r"pid=(\d+)")
SS_RECEIVED = re.compile(r"bytes_received:(\d+)")


def ss_received(ports: Sequence[int], pids: set[int]) -> dict[int, int]:
    """Bytes received so far by each of ``pids``' TCP connections to ``ports`` (``ss -tinp``)."""
    filt = "( " + " or ".join(f"dport = :{p}" for p in ports) + " )"
    out = subprocess.run(["ss", "-tinpH", "state", "established", filt], capture_output=True,
                         text=True, timeout=5).stdout
    totals = dict.fromkeys(pids, 0)
    record: list[str] = []

    def flush() -> None:
        text = " ".join(record)
        got = SS_RECEIVED.search(text)
        for pid in {int(p) for p in SS_PID.findall(text)} & pids:
            totals[pid] += int(got.group(1)) if got else 0

    for line in out.splitlines():
        if line and not line[0].isspace() and record:
            flush()
            record = []
        record.append(line)
    if record:
        flush()
    return totals


@dataclass
class Sample:
    t: float
    received: dict[int, int]
    broker_cpu: float
    machine: tuple[float, float]  # (busy, total) CPU seconds of the whole machine


class Sampler:
    """Samples every ``interval`` s until stopped: amqbench's received bytes, broker CPU, machine."""

    def __init__(self, ports: Sequence[int], bench_pids: set[int], broker_pids: Sequence[int],
                 interval: float = 0.25) -> None:
        self.ports, self.bench_pids, self.broker_pids = list(ports), bench_pids, list(broker_pids)
        self.interval = interval
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                received = ss_received(self.ports, self.bench_pids)
            except (OSError, subprocess.SubprocessError):
                received = {}
            m = psutil.cpu_times()
            idle = m.idle + getattr(m, "iowait", 0.0)
            total = sum(m)
            cpu = sum(cpu_seconds(p) for p in self.broker_pids)
            self.samples.append(Sample((t0 + time.monotonic()) / 2, received, cpu,
                                       (total - idle, total)))
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)

    def window(self, start: float, end: float) -> tuple[Sample, Sample] | None:
        inside = [s for s in self.samples if start <= s.t <= end and s.received]
        return (inside[0], inside[-1]) if len(inside) >= 2 else None


# amqbench deletes a queue that exists when it starts: when one of two processes on one shared
# queue declared it and attached its consumer before the other looked, the other deletes it under
# that consumer, which is not told (rabbitmq-c does not ask for consumer_cancel_notify) and gets
# nothing from then on. Such a run is stopped early and tried again on a new queue.
STARVED = "one amqbench's consumer got (almost) nothing: the other deleted the queue under it"


def check_starved(benches: Sequence[Bench], sampler: Sampler, after: float = 1.5) -> bool:
    """True when, ``after`` s into the run, one process has received almost nothing."""
    deadline = min(b.started for b in benches) + after
    while time.monotonic() < deadline and all(b.proc.poll() is None for b in benches):
        time.sleep(0.05)
    if not sampler.samples:
        return False
    got = list(sampler.samples[-1].received.values())
    return bool(got) and max(got) > 1_000_000 and min(got) < max(got) / 20


@dataclass
class TpRun:
    config: str  # ONE | TWO | APART
    queue: str
    benches: list[Bench]
    rate: float = float("nan")  # msg/s delivered in the window, summed over the processes
    broker_cores: float = float("nan")
    machine_busy: float = float("nan")  # fraction of all CPUs
    attempts: int = 1
    aborted: str = ""

    @property
    def problem(self) -> str:
        """Why the run does not count ('' when it does)."""
        if self.aborted:
            return self.aborted
        failed = [b.error for b in self.benches if b.figures is None]
        if failed:
            return "; ".join(failed)
        total = sum(b.figures["consumed"] for b in self.benches)
        if len(self.benches) > 1 and min(b.figures["consumed"] for b in self.benches) < total / 10:
            return STARVED
        if self.rate != self.rate:
            return "too few samples in the window"
        return ""

    @property
    def ok(self) -> bool:
        return not self.problem

    @property
    def amqbench_sum(self) -> float:
        return sum(b.figures["consumed_per_s"] for b in self.benches if b.figures)

    @property
    def lost(self) -> int:
        return int(sum(b.figures["published"] - b.figures["consumed"]
                       for b in self.benches if b.figures))


def tp_run(config: str, targets: Sequence[tuple[str, int, str]], extra: Sequence[str],
           binary: Path, broker_pids: Sequence[int], seconds: int) -> TpRun:
    """amqbench processes (host, port, queue) let go at the same moment, sampled from outside."""
    benches = [Bench(bench_cmd(binary, host, port, queue, seconds, *extra), bench_timeout(seconds))
               for host, port, queue in targets]
    per_msg = {}
    starved = False
    sampler: Sampler | None = None
    try:
        for b in benches:
            b.start_gated()
        for b, (_, _, queue) in zip(benches, targets, strict=True):
            per_msg[b.pid] = delivery_bytes(queue)
        for b in benches:
            b.release()
        sampler = Sampler({p for _, p, _ in targets}, set(per_msg), broker_pids)
        if len({q for _, _, q in targets}) < len(targets):
            starved = check_starved(benches, sampler)
            if starved:
                for b in benches:
                    b.kill()
        for b in benches:
            b.finish()
    finally:
        for b in benches:
            b.kill()
        if sampler is not None:
            sampler.close()
    run = TpRun(config, ", ".join(sorted({q for _, _, q in targets})), benches)
    if starved:
        run.aborted = STARVED
    start = min(b.started for b in benches)
    # publishing starts ~0.25 s after launch (connections, 0.2 s settle) and lasts `seconds`
    edges = sampler.window(start + 1.0, start + 0.2 + seconds) if sampler else None
    if edges is not None:
        s0, s1 = edges
        dt = s1.t - s0.t
        run.rate = sum((s1.received.get(pid, 0) - s0.received.get(pid, 0)) / size
                       for pid, size in per_msg.items()) / dt
        run.broker_cores = (s1.broker_cpu - s0.broker_cpu) / dt
        busy = s1.machine[0] - s0.machine[0]
        total = s1.machine[1] - s0.machine[1]
        run.machine_busy = busy / total if total else float("nan")
    return run


ONE, TWO, APART = "1 broker", "2 brokers", "2 brokers, 2 queues"


def drop_queue(member: Member, queue: str) -> None:
    """Delete ``queue`` through ``member`` (on every broker); errors are only printed."""
    try:
        conn = member.connect()
        try:
            conn.channel().queue_delete(queue)
        finally:
            conn.close()
    except Exception as exc:  # pika's errors, OSError
        print(f"  could not delete queue {queue}: {exc!r}", flush=True)


def measure_throughput(binary: Path, solo: OurBroker, a: Member, b: Member, seconds: int,
                       rounds: int) -> list[TpRun]:
    runs: list[TpRun] = []
    order: list[str] = []
    for i in range(rounds):
        order += [ONE, TWO, APART] if i % 2 == 0 else [APART, TWO, ONE]
    for n, config in enumerate(order, 1):
        for attempt in range(1, 9):
            name = f"{n}-{attempt}"
            if config == ONE:
                run = tp_run(config, [("127.0.0.1", solo.port, f"tp-single-{name}")],
                             ["--producers", "2", "--consumers", "2"], binary, [solo.proc.pid],
                             seconds)
            elif config == TWO:
                # one queue name: shared, each broker deals over both consumers. Both processes
                # are let go at once: amqbench deletes its queue when it exists already.
                queue = f"tp-shared-{name}"
                run = tp_run(config, [(a.host, a.port, queue), (b.host, b.port, queue)], [],
                             binary, [a.proc.pid, b.proc.pid], seconds)
            else:
                # for comparison: a queue per broker, nothing dealt across
                run = tp_run(config, [(a.host, a.port, f"tp-apartA-{name}"),
                                      (b.host, b.port, f"tp-apartB-{name}")], [], binary,
                             [a.proc.pid, b.proc.pid], seconds)
            run.attempts = attempt
            if run.ok:
                break
            print(f"  {config}: attempt {attempt} does not count: {run.problem}", flush=True)
            if config != ONE:  # a killed amqbench leaves its queue (and its backlog) behind
                for queue in run.queue.split(", "):
                    drop_queue(a, queue)
        runs.append(run)
        print(f"  {config:19} {run.rate:,.0f} msg/s delivered (amqbench's sum "
              f"{run.amqbench_sum:,.0f}), brokers {run.broker_cores:.2f} cores, machine "
              f"{run.machine_busy:.0%} busy", flush=True)
    return runs
