"""amqbench, the C load generator on rabbitmq-c that drives both brokers: cases, build, run, parse.

Split out of ``benchmarks/run.py``. amqbench's sources live in ``../shared/bench`` (``build.sh``
and ``amqbench.c``); :func:`build_amqbench` builds it into ``benchmarks/out/``, and
:func:`build_manyqueues` the "many queues" generator (``benchmarks/manyqueues.c``: amqbench's
options and output over Q queues, which amqbench's one queue cannot do) beside it,
:func:`run_amqbench` runs one :class:`Case` against one broker (measuring the broker process's CPU
time and disk writes over the run) and :func:`parse_amqbench` reads its machine-readable last line
into a :class:`Result`.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchmarks.processes import HOST, REPO_ROOT, Broker

BENCH_SRC = REPO_ROOT.parent / "shared" / "bench"
OUT_DIR = REPO_ROOT / "benchmarks" / "out"


@dataclass(frozen=True)
class Case:
    """One benchmark case: a short key for ``--cases``, a title for the table, the options of
    its load generator ``tool`` (amqbench, or manyqueues for several queues)."""

    key: str
    title: str
    args: tuple[str, ...]
    tool: str = "amqbench"

    @property
    def size(self) -> int:
        """Body size in bytes (amqbench's default 1024 when the case does not set it)."""
        return int(self.args[self.args.index("--size") + 1]) if "--size" in self.args else 1024

    @property
    def persistent(self) -> bool:
        """True when messages are published persistent."""
        return "--persistent" in self.args


CASES: tuple[Case, ...] = (
    Case("16b", "16 B transient, no-ack", ("--size", "16")),
    Case("1k", "1 KiB transient, no-ack", ("--size", "1024")),
    Case("64k", "64 KiB transient, no-ack", ("--size", "65536")),
    # large bodies (issue 28): several body frames each; 16 MiB is max_message_size's default
    Case("1m", "1 MiB transient, no-ack", ("--size", "1048576")),
    Case("16m", "16 MiB transient, no-ack", ("--size", "16777216")),
    Case(
        "1k-ack",
        "1 KiB manual ack, prefetch 1000",
        ("--size", "1024", "--ack", "--prefetch", "1000"),
    ),
    Case(
        "1k-persistent",
        "1 KiB persistent, confirms, ack",
        ("--size", "1024", "--persistent", "--confirm", "--ack"),
    ),
    Case("latency", "latency at 1,000 msg/s (1 KiB, no-ack)", ("--size", "1024", "--rate", "1000")),
    Case(
        "many-queues",
        "many queues: 100 queues, 10 producers, 10 consumers (1 KiB, no-ack)",
        ("--size", "1024", "--queues", "100", "--producers", "10", "--consumers", "10"),
        tool="manyqueues",
    ),
)
CASES_BY_KEY = {case.key: case for case in CASES}
WARMUP = Case("warmup", "warm-up (discarded)", ("--size", "1024"))


@dataclass
class Result:
    """What one amqbench run against one broker produced."""

    broker: str
    case: Case
    returncode: int | None = None  # None: amqbench did not finish (timed out, could not start)
    figures: dict[str, float] | None = None  # amqbench's last line, parsed
    cpu_us_per_msg: float | None = None
    disk_bytes: int | None = None  # bytes the broker process wrote to storage during the run
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when amqbench printed its figures (exit 0, or 3 = some messages not consumed)."""
        return self.figures is not None

    @property
    def lost(self) -> int:
        """Messages published but not consumed within amqbench's drain time."""
        if not self.figures:
            return 0
        return int(self.figures["published"] - self.figures["consumed"])

    @property
    def body_bytes(self) -> int:
        """Total body bytes published in the run."""
        if not self.figures:
            return 0
        return int(self.figures["published"]) * self.case.size


def build_amqbench(out_dir: Path) -> Path | None:
    """Build amqbench into ``out_dir`` (reused while newer than its sources); None when missing."""
    build_sh = BENCH_SRC / "build.sh"
    source = BENCH_SRC / "amqbench.c"
    if not build_sh.is_file() or not source.is_file():
        print(
            f"amqbench sources not found at {BENCH_SRC} (need build.sh and amqbench.c): skipping."
        )
        return None
    binary = out_dir / "amqbench"
    newest = max(build_sh.stat().st_mtime, source.stat().st_mtime)
    if binary.is_file() and os.access(binary, os.X_OK) and binary.stat().st_mtime >= newest:
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"building amqbench -> {binary}", flush=True)
    proc = subprocess.run(
        ["sh", str(build_sh), str(binary)], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0 or not binary.is_file():
        raise RuntimeError(f"building amqbench failed:\n{proc.stdout}{proc.stderr}")
    return binary


MANYQUEUES_SRC = REPO_ROOT / "benchmarks" / "manyqueues.c"


def build_manyqueues(out_dir: Path) -> Path:
    """Build ``benchmarks/manyqueues.c`` into ``out_dir`` (reused while newer than its source)
    with gcc and rabbitmq-c (librabbitmq-dev, which amqbench's build installs); raises
    ``RuntimeError`` when the build fails."""
    binary = out_dir / "manyqueues"
    if binary.is_file() and binary.stat().st_mtime >= MANYQUEUES_SRC.stat().st_mtime:
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"building manyqueues -> {binary}", flush=True)
    proc = subprocess.run(
        ["gcc", "-O2", "-Wall", "-o", str(binary), str(MANYQUEUES_SRC), "-lrabbitmq", "-lpthread"],
        capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0 or not binary.is_file():
        raise RuntimeError(f"building manyqueues failed:\n{proc.stdout}{proc.stderr}")
    return binary


LAST_LINE = re.compile(r"(\w+)=([0-9.]+)")


def parse_amqbench(stdout: str) -> dict[str, float] | None:
    """Parse amqbench's machine-readable last line (``published=N consumed=N ... p999_us=L``)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("published="):
            return {k: float(v) for k, v in LAST_LINE.findall(line)}
    return None


def run_amqbench(binary: Path, broker: Broker, case: Case, seconds: int) -> Result:
    """Run one case against one broker with ``binary`` (the case's ``tool``), measuring the
    broker's CPU time over the run."""
    result = Result(broker=broker.label, case=case)
    cmd = [str(binary), "--host", HOST, "--port", str(broker.port), "--seconds", str(seconds)]
    cmd += case.args
    timeout = seconds + 45  # publishing + up to 5 s of confirms + 5 s of drain + set-up
    cpu_before, disk_before = broker.cpu_seconds(), broker.written_bytes()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        result.error = f"amqbench did not finish within {timeout} s (killed)"
        return result
    cpu_after, disk_after = broker.cpu_seconds(), broker.written_bytes()
    if disk_before is not None and disk_after is not None:
        result.disk_bytes = disk_after - disk_before
    result.returncode = proc.returncode
    result.figures = parse_amqbench(proc.stdout)
    if result.figures is None:
        err = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        result.error = f"amqbench exited {proc.returncode}: {err}"
        return result
    consumed = result.figures["consumed"]
    if cpu_before is not None and cpu_after is not None and consumed > 0:
        result.cpu_us_per_msg = (cpu_after - cpu_before) * 1e6 / consumed
    return result
