"""Starting and stopping the brokers the benchmark measures: ours and a private RabbitMQ node.

Split out of ``benchmarks/run.py``. :class:`OurBroker` runs ``python -m amqp_broker`` on a free
port with its data in a temp dir; :class:`RabbitMQ` runs a private node (its own node name, ports,
data and log dirs) when ``rabbitmq-server`` is installed. Both run in their own session and are
stopped with bounded waits (SIGTERM, then SIGKILL); the process helpers here also read a broker
process's CPU time and bytes written to storage (psutil, when installed).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

try:
    import psutil
except ImportError:  # CPU figures are then left out; everything else still works
    psutil = None

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
# extra directories where Debian puts the RabbitMQ scripts (often not on a non-root PATH)
RABBITMQ_PATH = os.pathsep.join(["/usr/sbin", "/usr/lib/rabbitmq/bin"])
EPMD_PORT = 4369  # Erlang's port mapper daemon
_NODE_NUMBERS = itertools.count(1)


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


def free_listen_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for a server that binds it only seconds later
    (a RabbitMQ node boots for 15-100 s): a random one in 20000-32767. Below Linux's default
    ephemeral range (32768-60999), so no outgoing connection takes it as its source port
    meanwhile (a port 0 pick can be: the management listener of a booting node failed with
    eaddrinuse so); random, so two nodes booting at once (two pytest-xdist workers) do not pick
    the same one, as they did with a fixed preferred port (dist_port_already_used). Falls back
    to :func:`free_port` after 50 taken candidates."""
    pick = random.SystemRandom()
    for _ in range(50):
        candidate = pick.randrange(20000, 32768)
        with socket.socket() as s:
            try:
                s.bind((HOST, candidate))
            except OSError:
                continue
            return candidate
    return free_port()


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
        return [sys.executable, "-m", "amqp_broker", "--host", HOST, "--log-level", "warning",
                "--management-port", "0", "--prometheus-port", "0"]

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

    def __init__(self, conf: str = "# defaults, for the benchmark\n", plugins: str = "[]",
                 files: dict[str, bytes] | None = None) -> None:
        """``conf``: rabbitmq.conf text; ``plugins``: the enabled_plugins term ("[a,b]");
        ``files``: name -> bytes written into the node's base directory (readable by the node;
        e.g. TLS certificates its conf names as ``{base}/NAME``: ``{base}`` is replaced)."""
        self.conf = conf
        self.plugins = plugins
        self.files = files or {}
        # unique per node, not only per process: a test run may start several (TLS, plain)
        self.node = f"bench{os.getpid()}x{next(_NODE_NUMBERS)}@localhost"
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
        # no management listener to collide (unless asked for)
        (self.base / "enabled_plugins").write_text(f"{self.plugins}.\n")
        (self.base / "rabbitmq.conf").write_text(self.conf.replace("{base}", str(self.base)))
        for name, data in self.files.items():
            (self.base / name).write_bytes(data)
        if os.geteuid() == 0:
            import pwd

            try:
                user = pwd.getpwnam("rabbitmq")
            except KeyError:
                user = None
            if user is not None:
                for path in (self.base, *self.base.iterdir()):
                    os.chown(path, user.pw_uid, user.pw_gid)
        self.port = free_listen_port()
        dist_port = free_listen_port()
        self._started_epmd = not port_accepts(EPMD_PORT)
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
            # loopback only (DESIGN.md §6): Erlang's port mapper and the distribution listener
            # bind every interface unless told otherwise
            ERL_EPMD_ADDRESS=HOST,
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
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
        if getattr(self, "_started_epmd", False):  # the port mapper our node started
            epmd = shutil.which("epmd", path=os.environ.get("PATH", "") + os.pathsep + "/usr/bin")
            if epmd:
                subprocess.run([epmd, "-kill"], capture_output=True, timeout=10,
                               env=dict(os.environ, ERL_EPMD_ADDRESS=HOST))


@contextlib.contextmanager
def rabbitmq_cluster(size: int = 3, prefix: str = "rbench") -> Iterator[list[RabbitMQ]]:
    """``size`` private RabbitMQ nodes (:class:`RabbitMQ`, named ``<prefix><pid>n<i>@localhost``,
    sharing the ``rabbitmq`` user's Erlang cookie) in one cluster: nodes 2.. run ``rabbitmqctl
    stop_app``, ``join_cluster`` node 1, ``start_app`` (RabbitMQ "Clustering Guide"). Yields the
    nodes, ``[]`` when rabbitmq-server is not installed; stops them all at the end (node 1, whose
    port mapper the others use, last). Raises ``RuntimeError`` when a node does not boot or
    join."""
    nodes: list[RabbitMQ] = []
    try:
        for i in range(size):
            node = RabbitMQ()
            if not node.installed():
                yield []
                return
            node.node = f"{prefix}{os.getpid()}n{i}@localhost"
            node.start()
            nodes.append(node)
        for node in nodes[1:]:
            for args in (("stop_app",), ("join_cluster", nodes[0].node), ("start_app",)):
                done = node.rabbitmqctl(*args, timeout=120)
                if done.returncode:
                    raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip()}")
        yield nodes
    finally:
        for node in reversed(nodes):
            node.stop()


def stop_brokers(ours: OurBroker, rabbit: RabbitMQ | None, workdir: Path) -> None:
    """The end of a benchmark run: stop RabbitMQ (when it was started) and our broker, then
    remove the run's work directory."""
    if rabbit is not None:
        rabbit.stop()
    ours.stop()
    shutil.rmtree(workdir, ignore_errors=True)
