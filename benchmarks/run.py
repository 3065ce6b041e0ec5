"""Side-by-side benchmark: our broker against RabbitMQ, both driven by amqbench.

``python -m benchmarks.run`` (or ``make bench``) from the repository root:

1. builds amqbench (a C load generator on rabbitmq-c, ``../shared/bench``) into ``benchmarks/out/``;
2. starts our broker as a real process (``python -m amqp_broker``) on a free port, data in a temp dir;
3. starts a private RabbitMQ node (its own node name, ports, data and log dirs) when
   ``rabbitmq-server`` is installed, and stops it at the end;
4. runs each case against both brokers one right after the other, alternating which goes first, so
   that both see the same machine noise; measures our broker's (and RabbitMQ's) CPU time per
   message from the process's CPU times;
5. prints a markdown table and rewrites ``benchmarks/RESULTS.md`` with it.

Every process started here is stopped in a ``finally`` and every wait is bounded.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

try:
    import psutil
except ImportError:  # CPU figures are then left out; everything else still works
    psutil = None

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_SRC = REPO_ROOT.parent / "shared" / "bench"
OUT_DIR = REPO_ROOT / "benchmarks" / "out"
RESULTS_MD = REPO_ROOT / "benchmarks" / "RESULTS.md"
HOST = "127.0.0.1"
# extra directories where Debian puts the RabbitMQ scripts (often not on a non-root PATH)
RABBITMQ_PATH = os.pathsep.join(["/usr/sbin", "/usr/lib/rabbitmq/bin"])


@dataclass(frozen=True)
class Case:
    """One benchmark case: a short key for ``--cases``, a title for the table, amqbench options."""

    key: str
    title: str
    args: tuple[str, ...]

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


# --------------------------------------------------------------------------- helpers


def free_port(preferred: int | None = None) -> int:
    """A TCP port free on 127.0.0.1 right now: ``preferred`` when it is free, else any."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            try:
                s.bind((HOST, candidate))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


def port_accepts(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float, what: str) -> None:
    """Wait until ``port`` accepts, failing early when ``proc`` exits; bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening")
        if port_accepts(port):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not accept connections on port {port} within {timeout:.0f} s")


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a text file ('' when unreadable)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a process we started (in its own session): SIGTERM its group, then SIGKILL; bounded."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def process_written_bytes(proc: psutil.Process | None) -> int | None:
    """Bytes ``proc`` has caused to be written to storage so far (None when unknown or gone)."""
    if proc is None:
        return None
    try:
        return proc.io_counters().write_bytes
    except Exception:  # psutil.Error, or no /proc/<pid>/io
        return None


def process_cpu_seconds(proc: psutil.Process | None) -> float | None:
    """User + system CPU seconds used so far by ``proc`` (None when unknown or gone)."""
    if proc is None:
        return None
    try:
        times = proc.cpu_times()
    except Exception:  # psutil.Error: the process is gone
        return None
    return times.user + times.system


# --------------------------------------------------------------------------- amqbench


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


LAST_LINE = re.compile(r"(\w+)=([0-9.]+)")


def parse_amqbench(stdout: str) -> dict[str, float] | None:
    """Parse amqbench's machine-readable last line (``published=N consumed=N ... p999_us=L``)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("published="):
            return {k: float(v) for k, v in LAST_LINE.findall(line)}
    return None


def run_amqbench(binary: Path, broker: Broker, case: Case, seconds: int) -> Result:
    """Run one case against one broker, measuring the broker's CPU time over the run."""
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


# --------------------------------------------------------------------------- brokers


class Broker:
    """A broker process started (and stopped) by this script."""

    label = "?"
    port = 0

    def cpu_seconds(self) -> float | None:
        """CPU seconds used so far by the broker's main process."""
        return None

    def written_bytes(self) -> int | None:
        """Bytes written to storage so far by the broker's main process."""
        return None

    def alive(self) -> bool:
        """True while the broker process runs."""
        return False

    def stop(self) -> None:
        """Stop the broker; bounded, never raises."""


class OurBroker(Broker):
    """Our broker: ``<python> -m amqp_broker`` on a free port with its data in a temp dir."""

    label = "ours"

    def __init__(self, workdir: Path, extra_args: Sequence[str]) -> None:
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.log_path = workdir / "amqp_broker.log"
        self.proc: subprocess.Popen | None = None
        self.ps: psutil.Process | None = None
        self.starts = 0
        self._log: IO[bytes] | None = None

    def command(self) -> list[str]:
        """The command line the broker is started with (without the per-start port/data dir)."""
        return [sys.executable, "-m", "amqp_broker", "--host", HOST, "--log-level", "warning"]

    def start(self) -> None:
        """Start the broker and wait (at most 30 s) until its port accepts connections."""
        self.starts += 1
        self.port = free_port()
        data_dir = self.workdir / f"data-{self.starts}"
        data_dir.mkdir()
        cmd = self.command() + ["--port", str(self.port), "--data-dir", str(data_dir)]
        cmd += self.extra_args
        self._log = open(self.log_path, "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for_port(self.port, self.proc, 30, "our broker")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{tail(self.log_path)}") from None
        self.ps = psutil.Process(self.proc.pid) if psutil else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float | None:
        return process_cpu_seconds(self.ps)

    def written_bytes(self) -> int | None:
        return process_written_bytes(self.ps)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        if self._log is not None:
            self._log.close()
            self._log = None


class RabbitMQ(Broker):
    """A private RabbitMQ node: own node name, AMQP and distribution ports, data and log dirs.

    Run in the foreground as our child (in its own session) and stopped with ``rabbitmqctl stop``
    (then signals, if that did not work). As root, Debian's wrapper scripts drop to the
    ``rabbitmq`` user, so the node's base directory is handed to that user.
    """

    label = "RabbitMQ"

    def __init__(self) -> None:
        self.node = f"bench{os.getpid()}@localhost"
        self.base: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.beam: psutil.Process | None = None
        self.version = "?"
        self.erlang = "?"
        self._log: IO[bytes] | None = None
        self.server, self.ctl = self.scripts()

    @staticmethod
    def scripts() -> tuple[str | None, str | None]:
        """Paths of rabbitmq-server and rabbitmqctl to use (None when not installed).

        As root, the wrappers on the PATH (they switch to the ``rabbitmq`` user); otherwise the
        scripts themselves, which run as the current user with its own Erlang cookie.
        """
        search = os.environ.get("PATH", "") + os.pathsep + RABBITMQ_PATH
        if os.geteuid() != 0:
            search = "/usr/lib/rabbitmq/bin" + os.pathsep + search
        return shutil.which("rabbitmq-server", path=search), shutil.which(
            "rabbitmqctl", path=search
        )

    def installed(self) -> bool:
        """True when rabbitmq-server and rabbitmqctl were found."""
        return bool(self.server and self.ctl)

    def rabbitmqctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``rabbitmqctl -n <our node> ARGS`` (bounded by ``timeout``)."""
        return subprocess.run(
            [self.ctl, "-n", self.node, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def start(self) -> None:
        """Start the node and wait (bounded) until it has booted and accepts AMQP connections."""
        import json

        self.base = Path(tempfile.mkdtemp(prefix="amqbench-rabbitmq-"))
        (self.base / "enabled_plugins").write_text("[].\n")  # no management listener to collide
        (self.base / "rabbitmq.conf").write_text("# defaults, for the benchmark\n")
        if os.geteuid() == 0:
            import pwd

            try:
                user = pwd.getpwnam("rabbitmq")
            except KeyError:
                user = None
            if user is not None:
                for path in (self.base, *self.base.iterdir()):
                    os.chown(path, user.pw_uid, user.pw_gid)
        self.port = free_port(5674)
        dist_port = free_port(25674)
        env = dict(
            os.environ,
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS=HOST,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(dist_port),
            RABBITMQ_MNESIA_BASE=str(self.base / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.base / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.base / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(self.base / "rabbitmq.conf"),
        )
        self._log = open(self.base / "console.log", "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            [self.server],
            cwd=self.base,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for_port(self.port, self.proc, 120, f"RabbitMQ node {self.node}")
            self.rabbitmqctl("await_startup", "--timeout", "60", timeout=90)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"{exc}\n{tail(self.base / 'console.log')}") from None
        try:
            status = json.loads(self.rabbitmqctl("status", "--formatter", "json").stdout)
            self.version = status.get("rabbitmq_version", "?")
            self.erlang = status.get("erlang_version", "?").split(" [")[0]
        except (ValueError, subprocess.TimeoutExpired):
            pass
        if psutil:
            try:
                kids = psutil.Process(self.proc.pid).children(recursive=True)
                self.beam = next((p for p in kids if p.name().startswith("beam")), None)
            except psutil.Error:
                self.beam = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float | None:
        return process_cpu_seconds(self.beam)

    def written_bytes(self) -> int | None:
        return process_written_bytes(self.beam)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.rabbitmqctl("stop", timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop_process(self.proc)
        if self.beam is not None:  # in case it left its process group behind
            try:
                if self.beam.is_running():
                    self.beam.kill()
                    self.beam.wait(timeout=5)
            except Exception:  # psutil.Error: already gone
                pass
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)


# --------------------------------------------------------------------------- report


def fmt_rate(result: Result | None) -> str:
    """msg/s cell: consumed per second, marked when messages were lost or the run failed."""
    if result is None:
        return "—"
    if not result.ok:
        return "failed"
    cell = f"{result.figures['consumed_per_s']:,.0f}"
    return cell + (" ⚠" if result.lost else "")


def fmt_latency(result: Result | None) -> str:
    """p50 / p99 cell in µs."""
    if result is None or not result.ok:
        return "—"
    return f"{result.figures['p50_us']:,.0f} / {result.figures['p99_us']:,.0f}"


def fmt_cpu(result: Result | None) -> str:
    """CPU µs per consumed message."""
    if result is None or result.cpu_us_per_msg is None:
        return "—"
    return f"{result.cpu_us_per_msg:,.1f}"


def fmt_ratio(ours: Result | None, theirs: Result | None) -> str:
    """ours ÷ RabbitMQ consumed msg/s."""
    if not (ours and theirs and ours.ok and theirs.ok and theirs.figures["consumed_per_s"]):
        return "—"
    return f"{ours.figures['consumed_per_s'] / theirs.figures['consumed_per_s']:.2f}×"


def markdown_table(cases: Sequence[Case], results: dict[tuple[str, str], Result]) -> str:
    """The summary table, one row per case."""
    rows = [
        "| case | ours msg/s | RabbitMQ msg/s | ratio | ours p50/p99 µs | RabbitMQ p50/p99 µs "
        "| ours CPU µs/msg | RabbitMQ CPU µs/msg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        ours, theirs = results.get((case.key, "ours")), results.get((case.key, "RabbitMQ"))
        rows.append(
            f"| {case.title} | {fmt_rate(ours)} | {fmt_rate(theirs)} | {fmt_ratio(ours, theirs)} "
            f"| {fmt_latency(ours)} | {fmt_latency(theirs)} | {fmt_cpu(ours)} | {fmt_cpu(theirs)} |"
        )
    return "\n".join(rows)


def fmt_mib(n: int | None) -> str:
    """Bytes as MiB with one decimal ('—' when unknown)."""
    return "—" if n is None else f"{n / 2**20:,.1f}"


def raw_table(cases: Sequence[Case], results: dict[tuple[str, str], Result]) -> str:
    """Every amqbench figure of every run, for checking the summary."""
    rows = [
        "| case | broker | exit | published | consumed | seconds | published/s | consumed/s "
        "| p50 µs | p99 µs | p99.9 µs | disk written MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        for label in ("ours", "RabbitMQ"):
            r = results.get((case.key, label))
            if r is None:
                continue
            if not r.ok:
                rows.append(f"| {case.key} | {label} | {r.returncode} | {r.error} ||||||||")
                continue
            f = r.figures
            rows.append(
                f"| {case.key} | {label} | {r.returncode} | {f['published']:,.0f} "
                f"| {f['consumed']:,.0f} | {f['seconds']:.2f} | {f['published_per_s']:,.0f} "
                f"| {f['consumed_per_s']:,.0f} | {f['p50_us']:,.0f} | {f['p99_us']:,.0f} "
                f"| {f['p999_us']:,.0f} | {fmt_mib(r.disk_bytes)} |"
            )
    return "\n".join(rows)


def notes(
    cases: Sequence[Case], results: dict[tuple[str, str], Result], extra: list[str]
) -> list[str]:
    """Anything odd: lost messages (amqbench exit 3), failures, restarts, persistence not on disk."""
    out = list(extra)
    for case in cases:
        for label in ("ours", "RabbitMQ"):
            r = results.get((case.key, label))
            if r is None:
                continue
            if r.error:
                out.append(f"{case.title}, {label}: {r.error}")
            elif r.lost:
                f = r.figures
                out.append(
                    f"{case.title}, {label}: amqbench exited {r.returncode}: "
                    f"{f['consumed']:,.0f} of {f['published']:,.0f} published messages consumed "
                    f"within the 5 s drain ({r.lost:,} not)"
                )
            if case.persistent and r.ok and r.disk_bytes is not None:
                if r.disk_bytes < r.body_bytes / 2:  # not even half the bodies reached the disk
                    out.append(
                        f"{case.title}, {label}: the broker process wrote only "
                        f"{fmt_mib(r.disk_bytes)} MiB to disk while {fmt_mib(r.body_bytes)} MiB of "
                        "persistent message bodies were published and confirmed, so it did not "
                        "store them on disk (this row is not like for like)"
                    )
    return out


def machine_info(rabbit: RabbitMQ | None) -> list[str]:
    """Lines describing the machine, Python, our broker's commit and RabbitMQ."""
    cpus = os.cpu_count()
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    commit = (
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        or "?"
    )
    dirty = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout.strip()
    uvloop = "with uvloop" if importlib.util.find_spec("uvloop") else "asyncio event loop"
    lines = [
        f"- machine: {cpus} CPUs ({model}), Linux {platform.release()}, "
        f"load average {load} at the start",
        f"- Python {platform.python_version()} ({uvloop}); our broker at commit {commit}"
        + (" plus uncommitted changes" if dirty else ""),
    ]
    if rabbit is not None:
        lines.append(
            f"- RabbitMQ {rabbit.version} ({rabbit.erlang}), default configuration, "
            "a private node on 127.0.0.1"
        )
    else:
        lines.append("- RabbitMQ: not measured")
    return lines


HEADER = """# Benchmark results

Our broker against RabbitMQ on the same machine in the same run, both driven by amqbench
(`../shared/bench`, a C load generator on rabbitmq-c): one producer and one consumer connection on
one queue. Reproduce with `make bench` (options: `python -m benchmarks.run --help`); the script
rewrites this file. Compare the ratios of one run, not absolute figures across runs or machines
(see `benchmarks/README.md`).
"""

LEGEND = """msg/s is messages consumed per second over the run (publishing time plus up to 5 s for
the consumer to drain the queue); ratio is ours ÷ RabbitMQ. Latency is publish-to-deliver, measured
by the consumer; in the as-fast-as-possible cases it mostly measures the backlog the producer builds
up in the queue, so read latency in the fixed-rate row. CPU µs/msg is the broker process's user +
system CPU time during the run divided by the messages consumed; disk written (raw figures) is what
that process wrote to storage (/proc/<pid>/io). ⚠ marks runs where not every published message was
consumed (amqbench exit 3)."""


def write_results(
    path: Path,
    args: argparse.Namespace,
    cases: Sequence[Case],
    results: dict[tuple[str, str], Result],
    info: list[str],
    odd: list[str],
) -> None:
    """Rewrite RESULTS.md: header, run details, the table, notes and the raw figures."""
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    settings = f"- {args.seconds} s of publishing per case"
    if args.our_args:
        settings += f"; our broker started with extra arguments `{args.our_args}`"
    parts = [
        HEADER,
        f"## Run of {now}\n",
        "\n".join(info + [settings]) + "\n",
        markdown_table(cases, results) + "\n",
        LEGEND + "\n",
    ]
    if odd:
        parts.append("Notes:\n\n" + "\n".join(f"- {n}" for n in odd) + "\n")
    parts.append("### Raw amqbench figures\n\n" + raw_table(cases, results) + "\n")
    path.write_text("\n".join(parts))


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Benchmark our broker against RabbitMQ with amqbench; writes benchmarks/RESULTS.md.",
    )
    parser.add_argument(
        "--seconds", type=int, default=5, help="publishing time per case, 1-60 (default 5)"
    )
    parser.add_argument(
        "--cases",
        default=",".join(c.key for c in CASES),
        help="comma-separated cases to run, from: " + ", ".join(c.key for c in CASES),
    )
    parser.add_argument("--no-rabbitmq", action="store_true", help="measure our broker only")
    parser.add_argument(
        "--our-args", default="", help="extra command-line arguments for our broker"
    )
    parser.add_argument(
        "--amqbench", type=Path, help="use this amqbench binary instead of building one"
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the 1 s warm-up run per broker"
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not rewrite {RESULTS_MD.name}")
    args = parser.parse_args(argv)
    if not 1 <= args.seconds <= 60:
        parser.error("--seconds must be between 1 and 60 (amqbench's limit)")
    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    unknown = [k for k in keys if k not in CASES_BY_KEY]
    if unknown or not keys:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES_BY_KEY)}")
    args.case_list = [CASES_BY_KEY[k] for k in keys]
    return args


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop our processes


def describe(result: Result) -> str:
    """One progress line for a run."""
    if not result.ok:
        return f"FAILED: {result.error}"
    f = result.figures
    cpu = f", CPU {result.cpu_us_per_msg:.1f} µs/msg" if result.cpu_us_per_msg is not None else ""
    lost = f", {result.lost:,} NOT CONSUMED (exit {result.returncode})" if result.lost else ""
    return (
        f"{f['consumed_per_s']:,.0f} msg/s, p50 {f['p50_us']:,.0f} µs, p99 {f['p99_us']:,.0f} µs"
        f"{cpu}{lost}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (0 also when skipped for lack of amqbench)."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    if psutil is None:
        print("psutil is not installed: CPU per message is not measured (pip install psutil).")

    binary = args.amqbench or build_amqbench(OUT_DIR)
    if binary is None:
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="amqbench-ours-"))
    ours = OurBroker(workdir, shlex.split(args.our_args))
    rabbit: RabbitMQ | None = None
    odd: list[str] = []
    results: dict[tuple[str, str], Result] = {}
    try:
        ours.start()
        print(f"our broker: pid {ours.proc.pid}, port {ours.port}", flush=True)
        brokers: list[Broker] = [ours]
        if args.no_rabbitmq:
            print("RabbitMQ: skipped (--no-rabbitmq)")
        else:
            candidate = RabbitMQ()
            if not candidate.installed():
                print("RabbitMQ: skipped (rabbitmq-server not installed)")
            else:
                print(f"starting RabbitMQ node {candidate.node} ...", flush=True)
                rabbit = candidate  # stopped in finally even if start fails half-way
                try:
                    rabbit.start()
                except RuntimeError as exc:
                    print(f"RabbitMQ: skipped, could not start: {exc}")
                    odd.append(f"RabbitMQ could not start: {str(exc).splitlines()[0]}")
                    rabbit.stop()
                    rabbit = None
                else:
                    print(f"RabbitMQ {rabbit.version}: port {rabbit.port}", flush=True)
                    brokers.append(rabbit)
        info = machine_info(rabbit)

        if not args.no_warmup:
            for broker in brokers:
                r = run_amqbench(binary, broker, WARMUP, 1)
                print(f"warm-up, {broker.label}: {describe(r)}", flush=True)

        for i, case in enumerate(args.case_list):
            order = brokers if i % 2 == 0 else brokers[::-1]
            for broker in order:
                if not broker.alive():
                    if broker is not ours:
                        odd.append(f"{broker.label} was not running for {case.title}")
                        continue
                    odd.append(
                        f"our broker had exited (see its log); restarted before {case.title}"
                    )
                    print(f"our broker exited:\n{tail(ours.log_path)}\nrestarting", flush=True)
                    ours.stop()
                    ours.start()
                print(f"{case.title}, {broker.label} ...", end=" ", flush=True)
                r = run_amqbench(binary, broker, case, args.seconds)
                if not broker.alive():
                    r.error = (
                        r.error + "; " if r.error else ""
                    ) + f"{broker.label} exited during the run"
                results[(case.key, broker.label)] = r
                print(describe(r), flush=True)
                time.sleep(1)

        table = markdown_table(args.case_list, results)
        odd = notes(args.case_list, results, odd)
        print()
        print(table)
        if odd:
            print("\nNotes:\n" + "\n".join(f"- {n}" for n in odd))
        if not args.no_write:
            write_results(RESULTS_MD, args, args.case_list, results, info, odd)
            print(f"\nwrote {RESULTS_MD.relative_to(REPO_ROOT)}")
        return 0
    finally:
        if rabbit is not None:
            rabbit.stop()
        ours.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
