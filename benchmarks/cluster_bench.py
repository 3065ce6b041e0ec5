"""What the cluster benchmarks (``benchmarks/cluster.py``) share: one amqbench process and its
command line, the bytes of one delivery, the CPU time of a process."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.amqbench import parse_amqbench

SIZE = 1024
CTAG_LEN = len("amq.ctag-") + 22  # our broker's generated consumer tags (16 random bytes, base64)


def delivery_bytes(queue: str, size: int = SIZE) -> int:
    """Bytes on the wire of one no-ack delivery from our broker to amqbench on the default exchange:
    Basic.Deliver (consumer tag, delivery tag, redelivered, exchange '', routing key = queue),
    a content header with delivery-mode only, one body frame (frames carry 8 bytes of framing)."""
    deliver = 8 + 4 + (1 + CTAG_LEN) + 8 + 1 + 1 + (1 + len(queue))
    header = 8 + 2 + 2 + 8 + 2 + 1
    return deliver + header + 8 + size


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (0.0 when it is gone)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


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


def describe_bench(bench: Bench) -> str:
    if bench.figures is None:
        return f"FAILED ({bench.error})"
    f = bench.figures
    lost = f", {int(f['published'] - f['consumed']):,} not consumed" if bench.returncode else ""
    return (f"{f['consumed']:,.0f} consumed, {f['consumed_per_s']:,.0f} msg/s, "
            f"p50 {f['p50_us']:,.0f} µs, p99 {f['p99_us']:,.0f} µs{lost}")
