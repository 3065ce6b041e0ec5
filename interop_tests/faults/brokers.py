"""Broker processes of one run, each in its own network namespace, and their cluster views.

Each broker ``nK`` runs as ``ip netns exec <ns> python -m amqp_broker --host 10.213.0.(10+K)
--port 5672 --data-dir <run>/nK --node-name nK --cluster-secret <run>/cluster.secret
--ping-interval 0.25 [--seed ...]`` (docs/clustering.md, "By hand"; ``ip netns exec`` execs, so
the Popen pid is the broker's). Broker 0 founds the cluster; the others, and every restart, seed
from every other member (any member forwards a Join to the leader). Output goes to
``<run>/nK.log``, appended across restarts.

Views are read as ``amqp-broker cluster-status`` reads them (Connection.Start server properties,
``amqp_broker.clustering.cli.broker_status``); the calling thread must be in the hub namespace.
:class:`ViewMonitor` polls them in a thread and records each change in the history.
Every wait is bounded; a wait that times out raises ``TimeoutError`` with the brokers' log tails.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amqp_broker.clustering.cli import broker_status

from .history import History
from .lazyfs_mount import LazyMount
from .loopdisk import LoopDisk
from .netns import Network

__all__ = ["Broker", "Brokers", "ViewMonitor"]

PORT = 5672
#: The management API's port (RabbitMQ's 15672; the kill-queue-leader nemesis asks it who leads).
MANAGEMENT_PORT = 15672
USER = "jepsen"        # a user of our own: guest may log in from loopback only, as in RabbitMQ
PASSWORD = "jepsen"


@dataclass
class Broker:
    """One broker: ``index`` (0-based), ``name`` ``n<index+1>``, ``host`` its address."""

    index: int
    name: str
    host: str
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def address(self) -> str:
        """``host:port`` as the cluster lists its members."""
        return f"{self.host}:{PORT}"

    @property
    def url(self) -> str:
        """An AMQP URL for pika / aio-pika (the harness's user, vhost ``/``)."""
        return f"amqp://{USER}:{PASSWORD}@{self.host}:{PORT}/%2F"

    @property
    def running(self) -> bool:
        """True while the process exists (paused counts as running)."""
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the broker's log ("" when unreadable)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Brokers:
    """Start, kill -9, SIGSTOP/SIGCONT and restart the brokers of one run; read their views.

    ``net``: the namespaces (already created); ``base``: the run's directory (data dirs, logs,
    the 64-byte hex secret file); ``extra_args``: more broker flags (e.g. ``--sync-policy
    none``); ``ping_interval`` in seconds; ``source``: a source tree to run the brokers from
    (cwd and ``PYTHONPATH``; e.g. a ``git archive`` snapshot, so that edits to the working tree
    do not change the brokers under a run), default the installed ``amqp_broker``; ``lazyfs``:
    each data dir ``nK`` is a lazyfs mount (:mod:`interop_tests.faults.lazyfs`) over ``nK.disk``
    (state ``nK.lazyfs``, log ``nK.lazyfs.log``), mounted before the broker first starts and kept
    across restarts, so that :meth:`power_loss` can drop what was not fsynced; ``disk``: ``(size,
    limit)`` bytes: each data dir is an ext4 file system of ``size`` bytes on a loop device
    (:mod:`interop_tests.faults.loopdisk`, image ``nK.img``, mounted before the broker first
    starts, kept across restarts; ``disks[index]``), and every broker gets ``--disk-free-limit
    limit`` (before ``extra_args``, which may override it)."""

    def __init__(self, net: Network, base: Path, history: History,
                 extra_args: tuple[str, ...] = (), ping_interval: float = 0.25,
                 source: Path | None = None, lazyfs: bool = False,
                 disk: tuple[int, int] | None = None) -> None:
        self.net = net
        self.disk = disk
        self.disks: dict[int, LoopDisk] = {}
        self.lazyfs = lazyfs
        self.mounts: dict[int, LazyMount] = {}
        self.source = source
        self.base = base
        self.history = history
        self.extra_args = extra_args
        self.ping_interval = ping_interval
        self.secret = base / "cluster.secret"
        self.secret.write_text(secrets.token_hex(32))
        os.chmod(self.secret, 0o600)
        self.config = base / "broker.toml"   # guest may log in from loopback only
        self.config.write_text(f'[[users]]\nname = "{USER}"\npassword = "{PASSWORD}"\n'
                               'vhosts = ["*"]\n')
        self.brokers = [Broker(i, f"n{i + 1}", host, base / f"n{i + 1}", base / f"n{i + 1}.log")
                        for i, host in enumerate(net.addresses)]

    def __len__(self) -> int:
        return len(self.brokers)

    def __getitem__(self, index: int) -> Broker:
        return self.brokers[index]

    def start(self, index: int, seeds: list[int] | None = None) -> None:
        """Start broker ``index`` (seeding from ``seeds``, default every other broker; ``[]``
        founds a cluster). Does not wait."""
        b = self.brokers[index]
        if b.running:
            return
        if seeds is None:
            seeds = [i for i in range(len(self.brokers)) if i != index]
        if self.lazyfs and index not in self.mounts:
            mount = LazyMount(b.data_dir, self.base / f"{b.name}.disk",
                              self.base / f"{b.name}.lazyfs", self.base / f"{b.name}.lazyfs.log")
            mount.start()       # raises LazyFSError
            self.mounts[index] = mount
        limit: list[str] = []
        if self.disk is not None:
            if index not in self.disks:
                loop = LoopDisk(b.data_dir, self.base / f"{b.name}.img", self.disk[0])
                loop.start()    # raises LoopDiskError
                self.disks[index] = loop
            limit = ["--disk-free-limit", str(self.disk[1])]
        cmd = [*self.net.exec_prefix(index), sys.executable, "-m", "amqp_broker",
               "--host", b.host, "--port", str(PORT), "--data-dir", str(b.data_dir),
               "--node-name", b.name, "--cluster-secret", str(self.secret),
               "--config", str(self.config),
               "--ping-interval", str(self.ping_interval), "--log-level", "info",
               "--management-port", str(MANAGEMENT_PORT),   # also under pytest (its env: 0)
               *limit, *self.extra_args]
        for s in seeds:
            cmd += ["--seed", self.brokers[s].address]
        with open(b.log_path, "ab") as log:
            log.write(f"\n==== start {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n".encode())
            log.flush()
            env = dict(os.environ)
            if self.source is not None:
                env["PYTHONPATH"] = str(self.source)
            b.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                      cwd=self.source, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        b.paused = False

    def start_all(self, timeout: float = 60.0) -> None:
        """Start every broker (broker 0 founds, the rest join it) and wait for one view of all.
        Raises ``TimeoutError``."""
        self.start(0, seeds=[])
        self.wait(lambda: self.status(0).get("in_view", False), timeout, "n1 did not come up")
        for i in range(1, len(self.brokers)):
            self.start(i, seeds=[0])
        self.wait_agreed(timeout)

    def kill(self, index: int) -> None:
        """kill -9 broker ``index`` and reap it (a paused broker is killed too)."""
        b = self.brokers[index]
        if b.proc is not None and b.proc.poll() is None:
            b.proc.send_signal(signal.SIGKILL)
            b.proc.wait(10)
        b.paused = False

    def power_loss(self, indexes: list[int]) -> dict[str, dict[str, Any]]:
        """Power loss of brokers ``indexes`` at once: kill -9 each, then drop every write its
        data dir had not fsynced (lazyfs). Returns per broker name what was dropped (files,
        bytes, dirs, missing, names). Raises ``RuntimeError`` without ``lazyfs``,
        ``LazyFSError``."""
        if not self.lazyfs:
            raise RuntimeError("power loss needs the brokers on lazyfs (Brokers(lazyfs=True))")
        for i in indexes:
            self.kill(i)
        return {self.brokers[i].name: self.mounts[i].power_loss() for i in indexes}

    def pause(self, index: int) -> None:
        """SIGSTOP broker ``index`` (its sockets stay open; only the ring ping notices)."""
        b = self.brokers[index]
        if b.running and not b.paused:
            os.kill(b.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            b.paused = True

    def resume(self, index: int) -> None:
        """SIGCONT broker ``index``."""
        b = self.brokers[index]
        if b.running and b.paused:
            os.kill(b.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        b.paused = False

    def heal(self) -> list[int]:
        """SIGCONT every paused broker and restart every dead one; returns the restarted."""
        restarted = []
        for b in self.brokers:
            self.resume(b.index)
            if not b.running:
                self.start(b.index)
                restarted.append(b.index)
        return restarted

    def stop_all(self) -> None:
        """kill -9 every broker (after SIGCONT), then unmount lazyfs and loop disks; never
        raises."""
        for b in self.brokers:
            try:
                self.resume(b.index)
                self.kill(b.index)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for mount in self.mounts.values():
            mount.stop()
        self.mounts.clear()
        for loop in self.disks.values():
            loop.stop()
        self.disks.clear()

    def status(self, index: int, timeout: float = 1.0) -> dict[str, Any]:
        """Broker ``index``'s view as ``amqp-broker cluster-status`` prints it (one broker)."""
        return broker_status(f"amqp://{self.brokers[index].address}/", timeout)

    def leader(self) -> int | None:
        """The index of the first member (the leader) of the view a running broker reports."""
        by_address = {b.address: b.index for b in self.brokers}
        for b in self.brokers:
            if not b.running or b.paused:
                continue
            members = self.status(b.index, 0.5).get("cluster_members") or []
            if members and members[0] in by_address:
                return by_address[members[0]]
        return None

    def agreed(self) -> bool:
        """True when every broker answers, is in its view, and all report one view of all."""
        want = sorted(b.address for b in self.brokers)
        views = set()
        for b in self.brokers:
            s = self.status(b.index)
            if not s.get("reachable") or not s.get("in_view"):
                return False
            if sorted(s.get("cluster_members") or []) != want:
                return False
            views.add((s.get("cluster_view"), tuple(s["cluster_members"])))
        return len(views) == 1

    def wait_agreed(self, timeout: float = 60.0) -> float:
        """Wait until :meth:`agreed`; returns the seconds it took. Raises ``TimeoutError``."""
        return self.wait(self.agreed, timeout, "the brokers did not agree on one view")

    def wait(self, check: Any, timeout: float, message: str) -> float:
        """Poll ``check()`` every 0.2 s for at most ``timeout`` s; ``TimeoutError`` with the
        log tails when it never holds."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if check():
                return time.monotonic() - start
            time.sleep(0.2)
        tails = "\n".join(f"--- {b.name} ---\n{b.log_tail(15)}" for b in self.brokers)
        raise TimeoutError(f"{message} within {timeout:g} s\n{tails}")


class ViewMonitor:
    """A thread that polls every broker's view every ``interval`` s and records each change
    (``op: view``) in the history, until :meth:`stop`."""

    def __init__(self, brokers: Brokers, history: History, interval: float = 0.5) -> None:
        self.brokers = brokers
        self.history = history
        self.interval = interval
        self._stop = threading.Event()
        self._last: dict[int, tuple[Any, ...]] = {}
        self._thread = threading.Thread(target=self._run, name="view-monitor", daemon=True)

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling and wait (at most 5 s) for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def poll_once(self) -> None:
        """Read every broker's view once and record those that changed."""
        for b in self.brokers.brokers:
            s = self.brokers.status(b.index, timeout=0.5)
            key = (s.get("reachable"), s.get("cluster_view"), tuple(s.get("cluster_members") or ()))
            if self._last.get(b.index) != key:
                self._last[b.index] = key
                self.history.record("view", broker=b.name, reachable=bool(s.get("reachable")),
                                    view=s.get("cluster_view"),
                                    members=list(s.get("cluster_member_names") or []))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll_once()
