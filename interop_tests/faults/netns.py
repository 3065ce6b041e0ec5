"""Network namespaces for the fault harness: one per broker, a hub for the clients, and cuts.

Layout (all made here with iproute2, all inside namespaces; the machine's own interfaces and
routes are never touched)::

    hub namespace  <tag>-hub   bridge br0 10.213.0.1/24, one veth end per broker
    host namespace <tag>-nK    eth0 10.213.0.(10+K)/24, lo

The harness process enters the hub namespace (:func:`enter_namespace`), so its clients reach every
broker while brokers reach each other over the bridge. A cut is a ``blackhole`` route inside the
sending host's namespace: ``cut(a, b)`` drops what ``a`` sends to ``b`` (``b`` no longer hears
``a``), the same one-way "drop packets from" grudge Jepsen's nemeses install with iptables
(jepsen.nemesis / jepsen.net), made with routes only (no iptables here; the ``lossy-link``
nemesis, :mod:`interop_tests.faults.lossy`, adds nftables and tc rules of its own). Clients in the
hub are never cut.

Names carry the harness's pid (``amqpf<pid>-...``), so :func:`remove_stale` can find and remove
the namespaces (and kill the processes) of runs whose harness died. Errors: every iproute2 call
that fails raises ``NetnsError`` with its stderr.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["NetnsError", "Network", "PREFIX", "available", "enter_namespace", "remove_stale",
           "unavailable_reason"]

PREFIX = "amqpf"
SUBNET = "10.213.0"
HUB_ADDRESS = f"{SUBNET}.1"
_CLONE_NEWNET = 0x40000000
_NAME = re.compile(rf"^{PREFIX}(\d+)-(hub|n\d+)$")


class NetnsError(RuntimeError):
    """An iproute2 command failed (message: the command and its stderr)."""


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (None when they can): needs root and ``ip``."""
    if shutil.which("ip") is None:
        return "iproute2 `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); not root here"
    if not os.path.isdir("/proc/self/ns") or not os.path.exists("/proc/self/ns/net"):
        return "this kernel has no network namespaces"
    return None


def available() -> bool:
    """True when :func:`unavailable_reason` is None."""
    return unavailable_reason() is None


def enter_namespace(name: str) -> None:
    """Move the calling thread into network namespace ``name`` (setns(2) on
    ``/run/netns/NAME``). Call it before starting threads: threads started later inherit it, and
    sockets opened later live there. Raises ``OSError`` when setns fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


def _namespace_names() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_namespace_processes(name: str) -> None:
    pids = _run("ip", "netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        if pid == str(os.getpid()):   # the harness itself, when it is inside the hub
            continue
        try:
            os.kill(int(pid), signal.SIGCONT)
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError, PermissionError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Delete the namespaces left by harness runs whose process is gone, killing what still runs
    in them (brokers of a harness that was killed -9). Returns the names removed."""
    removed = []
    for name in _namespace_names():
        match = _NAME.match(name)
        if match and not _alive(int(match.group(1))):
            _kill_namespace_processes(name)
            _run("ip", "netns", "del", name, check=False)
            removed.append(name)
    return removed


@dataclass
class Network:
    """The hub and ``size`` host namespaces of one harness process.

    ``hosts[i]`` is the namespace of broker ``i`` (0-based), ``addresses[i]`` its IPv4 address.
    ``create()`` builds everything (raises ``NetnsError``), ``destroy()`` kills what runs in the
    namespaces and deletes them (idempotent, never raises). ``cuts`` is the set of one-way cuts
    ``(from, to)`` (broker indexes) installed now."""

    size: int
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    cuts: set[tuple[int, int]] = field(default_factory=set)

    @property
    def hub(self) -> str:
        """The hub namespace's name."""
        return f"{self.tag}-hub"

    @property
    def hosts(self) -> list[str]:
        """The host namespaces' names, broker 0 first."""
        return [f"{self.tag}-n{i + 1}" for i in range(self.size)]

    @property
    def addresses(self) -> list[str]:
        """The brokers' IPv4 addresses, broker 0 first."""
        return [f"{SUBNET}.{11 + i}" for i in range(self.size)]

    def create(self) -> None:
        """Make the hub (bridge br0, 10.213.0.1/24) and one host per broker, veth-linked."""
        if not 1 <= self.size <= 200:
            raise ValueError(f"size must be 1..200, not {self.size}")
        self.destroy()
        _run("ip", "netns", "add", self.hub)
        _run("ip", "-n", self.hub, "link", "set", "lo", "up")
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for i, (ns, addr) in enumerate(zip(self.hosts, self.addresses, strict=True)):
            port = f"veth{i + 1}"
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "link", "add", port, "netns", self.hub, "type", "veth",
                 "peer", "name", "eth0", "netns", ns)
            _run("ip", "-n", self.hub, "link", "set", port, "master", "br0")
            _run("ip", "-n", self.hub, "link", "set", port, "up")
            _run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")

    def destroy(self) -> None:
        """Kill every process in this network's namespaces and delete them (never raises)."""
        existing = set(_namespace_names())
        for ns in [*self.hosts, self.hub]:
            if ns in existing:
                _kill_namespace_processes(ns)
                _run("ip", "netns", "del", ns, check=False)
        self.cuts.clear()

    def exec_prefix(self, index: int) -> list[str]:
        """The argv prefix that runs a command in broker ``index``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[index]]

    def cut(self, src: int, dst: int) -> None:
        """Drop what broker ``src`` sends to broker ``dst`` (a blackhole route in ``src``)."""
        if (src, dst) in self.cuts or src == dst:
            return
        _run("ip", "-n", self.hosts[src], "route", "add", "blackhole",
             f"{self.addresses[dst]}/32")
        self.cuts.add((src, dst))

    def restore(self, src: int, dst: int) -> None:
        """Undo ``cut(src, dst)`` (nothing when it is not cut)."""
        if (src, dst) not in self.cuts:
            return
        _run("ip", "-n", self.hosts[src], "route", "del", "blackhole",
             f"{self.addresses[dst]}/32", check=False)
        self.cuts.discard((src, dst))

    def cut_both(self, a: int, b: int) -> None:
        """Cut ``a``-``b`` in both directions."""
        self.cut(a, b)
        self.cut(b, a)

    def restore_both(self, a: int, b: int) -> None:
        """Restore ``a``-``b`` in both directions."""
        self.restore(a, b)
        self.restore(b, a)

    def apply_grudge(self, grudge: Mapping[int, Iterable[int]]) -> None:
        """Install a Jepsen grudge: ``{node: nodes it must not hear from}``; a node hears nobody
        in its set, so each ``src`` in ``grudge[node]`` gets ``cut(src, node)``. Cuts already
        installed stay; call :meth:`heal` first for a fresh pattern."""
        for node, deaf_to in grudge.items():
            for src in deaf_to:
                self.cut(src, node)

    def heal(self) -> None:
        """Remove every cut."""
        for src, dst in sorted(self.cuts):
            self.restore(src, dst)
