"""Cluster benchmarks (issue 5): what a shared queue costs when it deals across brokers, what a second
broker buys in throughput, and how fast a killed member disappears from the survivors' view.

Run: ``python -m benchmarks.cluster`` (``--help`` for the options). It starts real broker processes
on 127.0.0.2, .3, ... (``cluster/tests/processes.py``: one shared ``--cluster-secret`` file, the
first broker founds the cluster and the others ``--seed`` it), drives them with amqbench (the C load
generator of ``../shared/bench``), prints markdown tables and appends them, with the date and the
machine, to ``benchmarks/RESULTS.md`` (``--no-write`` to leave it alone). Every process it starts is
killed in a ``finally`` (also on Ctrl-C or SIGTERM) and every wait is bounded.

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
   each, each on a queue of its own. Aim: relayed <= 1.5x local.

2. Throughput, one broker vs two. One standalone broker (not clustered) with one amqbench of 2
   producers + 2 consumers (``--producers 2 --consumers 2``) against a two-broker cluster with one
   amqbench (1 producer + 1 consumer) against each broker, both let go at the same moment on the
   same queue name (so the queue is shared: each broker deals what its producer publishes
   round-robin over its local consumer and the other broker's consumer). For comparison, the same
   two amqbench processes on a queue of their own each (nothing is dealt across: what two brokers
   give when the work splits cleanly). 1 KiB, no-ack, as fast as possible, ``--seconds`` of
   publishing, new queue names per run. Order: 1 broker, shared, separate, then reversed
   (``--rounds``). Aim: shared >= 1.5x one broker.
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
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks.amqbench import OUT_DIR, build_amqbench, parse_amqbench
from benchmarks.processes import OurBroker
from benchmarks.report import RESULTS_MD, machine_info
from cluster.tests.processes import Cluster, Member, wait_for

SIZE = 1024
CTAG_LEN = len("amq.ctag-") + 22  # our broker's generated consumer tags (16 random bytes, base64)


def delivery_bytes(queue: str, size: int = SIZE) -> int:
    """Bytes on the wire of one no-ack delivery from our broker to amqbench on the default exchange:
    Basic.Deliver (consumer tag, delivery tag, redelivered, exchange '', routing key = queue),
    a content header with delivery-mode only, one body frame (frames carry 8 bytes of framing)."""
    deliver = 8 + 4 + (1 + CTAG_LEN) + 8 + 1 + 1 + (1 + len(queue))
    header = 8 + 2 + 2 + 8 + 2 + 1
    return deliver + header + 8 + size


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that kill our processes


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (0.0 when it is gone)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --------------------------------------------------------------------------- amqbench processes
@dataclass
class Bench:
    """One amqbench process: its command, and after ``finish`` its figures."""

    cmd: list[str]
    timeout: float
    proc: subprocess.Popen | None = None
    started: float = 0.0
    returncode: int | None = None
    figures: dict[str, float] | None = None
    error: str = ""
    stderr: str = ""

    def start(self) -> Bench:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)
        return self

    def start_gated(self) -> Bench:
        """Start a shell that execs amqbench (same pid) once ``release`` writes a line to it, so
        several can be let go at the same moment."""
        self.proc = subprocess.Popen(["sh", "-c", 'read _ && exec "$@"', "sh", *self.cmd],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.PIPE, text=True)
        return self

    def release(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.started = time.monotonic()
        self.proc.stdin.write("\n")
        self.proc.stdin.close()

    def finish(self) -> Bench:
        """Wait (bounded by ``timeout`` from the start) and parse the last line."""
        assert self.proc is not None
        left = max(1.0, self.timeout - (time.monotonic() - self.started))
        self.proc.stdin = None  # closed by release(); communicate must not flush it
        try:
            out, err = self.proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate(timeout=10)
            self.error = f"killed after {self.timeout:.0f} s"
        self.returncode = self.proc.returncode
        self.stderr = (err or "").strip()
        self.figures = parse_amqbench(out or "")
        if self.figures is None and not self.error:
            lines = (err or out or "no output").strip().splitlines()
            self.error = f"exit {self.returncode}: {lines[-1] if lines else ''}"
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def bench_cmd(binary: Path, host: str, port: int, queue: str, seconds: int,
              *extra: str) -> list[str]:
    return [str(binary), "--host", host, "--port", str(port), "--queue", queue,
            "--seconds", str(seconds), "--size", str(SIZE), *extra]


def bench_timeout(seconds: int) -> float:
    return seconds + 45.0  # publishing, 5 s of drain, set-up and slack


# --------------------------------------------------------------------------- the splitting proxy
class SplitProxy:
    """A TCP proxy on 127.0.0.1 that sends its n-th accepted connection to ``routes[n]`` (the last
    route for any further ones): lets one amqbench process talk to two brokers."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.routes: list[tuple[str, int]] = []
        self.accepted = 0
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def set_routes(self, routes: Sequence[tuple[str, int]]) -> None:
        with self.lock:
            self.routes = list(routes)
            self.accepted = 0

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                route = self.routes[min(self.accepted, len(self.routes) - 1)]
                self.accepted += 1
            try:
                upstream = socket.create_connection(route, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        buf = bytearray(1 << 18)
        view = memoryview(buf)
        try:
            while True:
                n = src.recv_into(buf)
                if not n:
                    break
                dst.sendall(view[:n])
        except OSError:
            pass
        for s in (src, dst):  # wakes the other direction's pump too
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        with self.lock:
            socks, self.sockets = self.sockets + [self.listener], []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


# --------------------------------------------------------------------------- brokers
def start_pair(base: Path, ping_interval: float) -> tuple[Cluster, Member, Member]:
    """Brokers A (127.0.0.2, founds the cluster) and B (127.0.0.3, seeds A); both in one view."""
    cluster = Cluster.create(base, "--ping-interval", str(ping_interval), "--log-level", "warning")
    a = cluster.start(2)
    b = cluster.start(3, a)
    wait_for(lambda: a.members() == [a.address, b.address] == b.members(), 15,
             "A and B did not agree on a view of two")
    return cluster, a, b


# --------------------------------------------------------------------------- 1. CPU per message
@dataclass
class CpuRun:
    case: str  # "local" | "relayed"
    queue: str
    bench: Bench
    cpu_a: float = 0.0  # CPU seconds of broker A over the run
    cpu_b: float = 0.0
    cpu_proxy: float = 0.0

    @property
    def consumed(self) -> int:
        return int(self.bench.figures["consumed"]) if self.bench.figures else 0

    def us_per_msg(self, cpu: float) -> float:
        return cpu * 1e6 / self.consumed if self.consumed else float("nan")

    @property
    def total_us(self) -> float:
        return self.us_per_msg(self.cpu_a + self.cpu_b)


def cpu_run(binary: Path, proxy: SplitProxy, a: Member, b: Member, case: str, queue: str,
            rate: int, seconds: int) -> CpuRun:
    """One fixed-rate amqbench run through the proxy: admin, consumer, producer connections."""
    admin_consumer = a if case == "local" else b
    proxy.set_routes([(admin_consumer.host, admin_consumer.port)] * 2 + [(a.host, a.port)])
    bench = Bench(bench_cmd(binary, "127.0.0.1", proxy.port, queue, seconds, "--rate", str(rate)),
                  bench_timeout(seconds))
    me = os.getpid()
    pa, pb = a.proc.pid, b.proc.pid
    before = cpu_seconds(pa), cpu_seconds(pb), cpu_seconds(me)
    bench.start().finish()
    after = cpu_seconds(pa), cpu_seconds(pb), cpu_seconds(me)
    run = CpuRun(case, queue, bench, after[0] - before[0], after[1] - before[1],
                 after[2] - before[2])
    if proxy.accepted != 3:
        bench.error = (bench.error + "; " if bench.error else "") + (
            f"the proxy saw {proxy.accepted} connections, expected 3")
    return run


def measure_cpu(binary: Path, a: Member, b: Member, rate: int, seconds: int, rounds: int,
                warmup: bool) -> list[CpuRun]:
    proxy = SplitProxy()
    runs: list[CpuRun] = []
    try:
        if warmup:
            for case in ("local", "relayed"):
                r = cpu_run(binary, proxy, a, b, case, f"cpu-warmup-{case}", rate, 1)
                print(f"  warm-up {case}: {describe_bench(r.bench)}", flush=True)
        order: list[str] = []
        for i in range(rounds):
            order += ["local", "relayed"] if i % 2 == 0 else ["relayed", "local"]
        for n, case in enumerate(order, 1):
            r = cpu_run(binary, proxy, a, b, case, f"cpu-{case}-{n}", rate, seconds)
            runs.append(r)
            print(f"  {case:8} {describe_bench(r.bench)}; CPU µs/msg A {r.us_per_msg(r.cpu_a):.1f}"
                  f" + B {r.us_per_msg(r.cpu_b):.1f} = {r.total_us:.1f} "
                  f"(proxy {r.us_per_msg(r.cpu_proxy):.1f})", flush=True)
    finally:
        proxy.close()
    return runs


# --------------------------------------------------------------------------- 2. throughput
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


# --------------------------------------------------------------------------- 3. failure detection
ACTION = {"kill": "kill -9", "freeze": "SIGSTOP"}

@dataclass
class KillRun:
    victim: str  # "member" | "leader"
    ping_interval: float
    action: str  # "kill" (SIGKILL) | "freeze" (SIGSTOP)
    seconds: float | None  # kill to the last survivor's new view; None: not within the timeout
    per_survivor: list[float | None] = field(default_factory=list)
    error: str = ""


def kill_run(base: Path, victim: str, ping_interval: float, action: str,
             timeout: float = 15.0) -> KillRun:
    cluster = Cluster.create(base, "--ping-interval", str(ping_interval), "--log-level", "warning")
    try:
        n2 = cluster.start(2)
        n3 = cluster.start(3, n2)
        n4 = cluster.start(4, n2)
        view = [n2.address, n3.address, n4.address]
        wait_for(lambda: all(m.members() == view for m in (n2, n3, n4)), 15,
                 "the three brokers did not agree on one view")
        dead = n2 if victim == "leader" else n4  # the view is ordered, the leader first
        survivors = [m for m in (n2, n3, n4) if m is not dead]
        expected = [m.address for m in survivors]
        seen: list[float | None] = [None] * len(survivors)

        def poll(i: int, member: Member, t0: float) -> None:
            while time.monotonic() - t0 < timeout:
                tick = time.monotonic()
                if member.members() == expected:
                    seen[i] = time.monotonic() - t0
                    return
                time.sleep(max(0.0, 0.02 - (time.monotonic() - tick)))

        t0 = time.monotonic()
        if action == "kill":
            dead.proc.kill()  # SIGKILL: the kernel closes its sockets, peers see the links drop
        else:
            cluster.freeze(dead)  # SIGSTOP: sockets stay open, only the ring ping notices
        pollers = [threading.Thread(target=poll, args=(i, m, t0), daemon=True)
                   for i, m in enumerate(survivors)]
        for p in pollers:
            p.start()
        for p in pollers:
            p.join(timeout + 5)
        if action == "kill":
            dead.proc.wait(10)
        took = None if None in seen else max(s for s in seen if s is not None)
        return KillRun(victim, ping_interval, action, took, seen)
    except AssertionError as exc:
        return KillRun(victim, ping_interval, action, None, error=str(exc).splitlines()[0])
    finally:
        cluster.stop_all()


def measure_failover(workdir: Path, ping_intervals: Sequence[float], repeats: int,
                     actions: Sequence[str]) -> list[KillRun]:
    runs = []
    n = 0
    for action in actions:
        for pi in ping_intervals:
            for victim in ("member", "leader"):
                for _ in range(repeats):
                    n += 1
                    base = workdir / f"kill-{n}"
                    base.mkdir()
                    r = kill_run(base, victim, pi, action)
                    runs.append(r)
                    shown = "; ".join("—" if s is None else f"{s:.3f}" for s in r.per_survivor)
                    print(f"  ping {pi} s, {ACTION[action]} of the {victim}: "
                          + (f"{r.seconds:.3f} s (survivors {shown})" if r.seconds is not None
                             else f"NO NEW VIEW {r.error}"), flush=True)
    return runs


# --------------------------------------------------------------------------- report
def describe_bench(bench: Bench) -> str:
    if bench.figures is None:
        return f"FAILED ({bench.error})"
    f = bench.figures
    lost = f", {int(f['published'] - f['consumed']):,} not consumed" if bench.returncode else ""
    return (f"{f['consumed']:,.0f} consumed, {f['consumed_per_s']:,.0f} msg/s, "
            f"p50 {f['p50_us']:,.0f} µs, p99 {f['p99_us']:,.0f} µs{lost}")


def mean(values: Sequence[float]) -> float:
    good = [v for v in values if v == v]
    return sum(good) / len(good) if good else float("nan")


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def per_round(runs: Sequence[CpuRun | TpRun], size: int, base: str, other: str,
              value: Callable[[Any], float]) -> str:
    """', per round a–b×': the range of other/base within each round of ``size`` runs."""
    ratios = []
    for i in range(0, len(runs) - size + 1, size):
        group = runs[i:i + size]
        b = [value(r) for r in group if getattr(r, "case", getattr(r, "config", "")) == base]
        o = [value(r) for r in group if getattr(r, "case", getattr(r, "config", "")) == other]
        if b and o and b[0] == b[0] and o[0] == o[0] and b[0]:
            ratios.append(o[0] / b[0])
    if len(ratios) < 2:
        return ""
    return f", per round {min(ratios):.2f}–{max(ratios):.2f}×"


def summary_table(cpu: list[CpuRun], tp: list[TpRun], kills: list[KillRun], rate: int) -> str:
    rows = ["| measurement | result | aim | |", "|---|---|---|---|"]
    if cpu:
        local = [r for r in cpu if r.case == "local" and r.bench.figures]
        relayed = [r for r in cpu if r.case == "relayed" and r.bench.figures]
        lo = mean([r.total_us for r in local])
        re_ = mean([r.total_us for r in relayed])
        lo_a, lo_b = mean([r.us_per_msg(r.cpu_a) for r in local]), mean(
            [r.us_per_msg(r.cpu_b) for r in local])
        re_a, re_b = mean([r.us_per_msg(r.cpu_a) for r in relayed]), mean(
            [r.us_per_msg(r.cpu_b) for r in relayed])
        rows.append(f"| CPU µs/msg of both brokers, **local** (producer and consumer on A), "
                    f"{rate:,} msg/s, 1 KiB | {lo:.1f} (A {lo_a:.1f} + B {lo_b:.1f}) | | |")
        ratio = re_ / lo if lo else float("nan")
        rows.append(f"| CPU µs/msg of both brokers, **relayed** (producer on A, consumer on B) | "
                    f"{re_:.1f} (A {re_a:.1f} + B {re_b:.1f}) = **{ratio:.2f}×** local"
                    f"{per_round(cpu, 2, 'local', 'relayed', lambda r: r.total_us)} | ≤ 1.5× "
                    f"| {verdict(ratio <= 1.5)} |")
    if tp:
        def figures(config: str) -> tuple[float, str]:
            good = [r for r in tp if r.config == config and r.ok]
            rate = mean([r.rate for r in good])
            return rate, (f"brokers {mean([r.broker_cores for r in good]):.2f} cores, machine "
                          f"{mean([r.machine_busy for r in good]):.0%} busy, {len(good)} runs")

        r1, how1 = figures(ONE)
        r2, how2 = figures(TWO)
        r3, how3 = figures(APART)
        rows.append(f"| delivered msg/s, **1 broker**, 2 producers + 2 consumers, 1 KiB no-ack | "
                    f"{r1:,.0f} ({how1}) | | |")
        ratio = r2 / r1 if r1 else float("nan")
        spread = per_round(tp, 3, ONE, TWO, lambda r: r.rate if r.ok else float("nan"))
        rows.append(f"| delivered msg/s, **2 brokers**, 1 producer + 1 consumer on each, one shared "
                    f"queue | {r2:,.0f} = **{ratio:.2f}×**{spread} ({how2}) | ≥ 1.5× | "
                    f"{verdict(ratio >= 1.5)} |")
        rows.append(f"| for comparison: 2 brokers, 1 producer + 1 consumer on each, a queue of "
                    f"its own on each (nothing dealt across) | {r3:,.0f} = "
                    f"{r3 / r1 if r1 else float('nan'):.2f}× ({how3}) | | |")
    for action, pi in sorted({(k.action, k.ping_interval) for k in kills},
                             key=lambda x: (x[0] != "kill", -x[1])):
        for victim in ("member", "leader"):
            group = [k for k in kills
                     if k.action == action and k.ping_interval == pi and k.victim == victim]
            if not group:
                continue
            times = [k.seconds for k in group if k.seconds is not None]
            failed = len(group) - len(times)
            cell = (f"{min(times):.2f} / {median(times):.2f} / {max(times):.2f} s"
                    if times else "no new view")
            if failed:
                cell += f" ({failed} of {len(group)} kills gave no new view within 15 s)"
            default = " (the default)" if pi == 0.5 else ""
            aim, met = "", ""
            if action == "kill":
                aim = "< 2 s"
                met = verdict(not failed and bool(times) and max(times) < 2)
            rows.append(f"| {ACTION[action]} of the **{victim}** → new view on both survivors, "
                        f"3 brokers, ping interval {pi:g} s{default}, min / median / max of "
                        f"{len(group)} | {cell} | {aim} | {met} |")
    return "\n".join(rows)


def raw_tables(cpu: list[CpuRun], tp: list[TpRun], kills: list[KillRun]) -> str:
    parts = []
    if cpu:
        lines = ["| case | queue | exit | published | consumed | p50 / p99 µs | CPU A s | CPU B s "
                 "| µs/msg A + B | proxy µs/msg (not counted) |",
                 "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in cpu:
            f = r.bench.figures
            if f is None:
                lines.append(f"| {r.case} | {r.queue} | {r.bench.returncode} | failed: "
                             f"{r.bench.error} | | | | | | |")
                continue
            lines.append(
                f"| {r.case} | {r.queue} | {r.bench.returncode} | {f['published']:,.0f} | "
                f"{f['consumed']:,.0f} | {f['p50_us']:,.0f} / {f['p99_us']:,.0f} | {r.cpu_a:.2f} | "
                f"{r.cpu_b:.2f} | {r.us_per_msg(r.cpu_a):.1f} + {r.us_per_msg(r.cpu_b):.1f} = "
                f"{r.total_us:.1f} | {r.us_per_msg(r.cpu_proxy):.1f} |")
        parts.append("CPU per message, every run:\n\n" + "\n".join(lines))
    if tp:
        lines = ["| configuration | queue | attempt | delivered msg/s (window) | broker cores | "
                 "machine busy | amqbench: exit, published, consumed, consumed/s, p50 / p99 µs |",
                 "|---|---|---:|---:|---:|---:|---|"]
        for r in tp:
            benches = "<br>".join(
                f"exit {b.returncode}, {b.figures['published']:,.0f}, {b.figures['consumed']:,.0f},"
                f" {b.figures['consumed_per_s']:,.0f}/s, {b.figures['p50_us']:,.0f} / "
                f"{b.figures['p99_us']:,.0f}" if b.figures else f"failed: {b.error}"
                for b in r.benches)
            note = f"<br>**not counted**: {r.problem}" if r.problem else ""
            lines.append(f"| {r.config} | {r.queue} | {r.attempts} | {r.rate:,.0f} | "
                         f"{r.broker_cores:.2f} | {r.machine_busy:.0%} | {benches}{note} |")
        parts.append("Throughput, every run (2 brokers: one amqbench line per broker, A then B; "
                     "attempt > 1: the earlier ones did not count, see the docstring):"
                     "\n\n" + "\n".join(lines))
    if kills:
        lines = ["| signal | ping interval s | victim | signal → last survivor's new view s | "
                 "each survivor s |", "|---|---:|---|---:|---|"]
        for k in kills:
            each = ", ".join("—" if s is None else f"{s:.3f}" for s in k.per_survivor)
            took = "—" if k.seconds is None else f"{k.seconds:.3f}"
            lines.append(f"| {ACTION[k.action]} | {k.ping_interval:g} | {k.victim} | {took} | "
                         f"{each or k.error} |")
        parts.append("Failure detection, every kill:\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def section(summary: str, raw: str, args: argparse.Namespace, started: datetime.datetime,
            lines: list[str]) -> str:
    info = [line for line in lines if not line.startswith("- RabbitMQ")]
    return "\n".join([
        "",
        f"## Cluster benchmarks, run of {started:%Y-%m-%d %H:%M} UTC",
        "",
        "Brokers on 127.0.0.2, .3, .4 in one cluster (shared secret, `--seed`), driven by amqbench. "
        "Reproduce with `python -m benchmarks.cluster` (options: `--help`; what each figure "
        "measures: the docstring of `benchmarks/cluster.py`).",
        "",
        *info,
        f"- CPU per message: {args.rate:,} msg/s for {args.seconds} s per run, "
        f"{args.rounds} runs per case; throughput: {args.seconds} s of publishing per run, "
        f"{args.rounds} runs per configuration; failure detection: {args.repeats} runs of each "
        f"kind per ping interval",
        "",
        summary,
        "",
        raw,
        "",
        "Notes: CPU µs/msg is the user + system CPU time of both broker processes during the run "
        "divided by the messages consumed (the proxy that splits amqbench's connections between "
        "A and B is in the benchmark process and not counted). Delivered msg/s is measured from "
        "the bytes the amqbench processes received (`ss`) between 1 s after the start and the end "
        "of publishing, summed over the processes; amqbench's own consumed/s is in the raw table "
        "(for two processes on one shared queue it includes one of them waiting out its 5 s "
        "drain). The machine has 2 cores shared by the brokers, amqbench and other work: compare "
        "the ratios of one run, not absolute figures across runs. The 1-broker throughput rows "
        "are a standalone (not clustered) broker. kill -9 on one machine: the kernel closes the "
        "killed broker's sockets, so its peers see the links drop at once; with SIGSTOP the "
        "sockets stay open and only the ring ping notices (a peer unheard for 3 ping intervals "
        "is suspected), as for a crashed machine or a cut cable.",
        "",
    ])


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
