"""Real broker processes on loopback addresses (127.0.0.2, .3, ...) for the cluster tests.

Each broker listens on its own address and a port free there, with its own data dir, node name
``n<last octet>`` and the test's cluster secret. ``Cluster`` starts, stops, kills, freezes (SIGSTOP)
and thaws them, and reads a broker's view from its Connection.Start server properties. Every wait is
bounded. Network rule (DESIGN.md §6): only 127.0.0.0/8.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pika
from pamqp import commands, frame

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def free_port(host: str) -> int:
    """A TCP port free on ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_properties(host: str, port: int, timeout: float = 3.0) -> dict:
    """Connection.Start server properties of the broker at host:port (raises OSError)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(PROTOCOL_HEADER)
        data = b""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            try:
                _, _, start = frame.unmarshal(data)
            except Exception:
                continue
            if isinstance(start, commands.Connection.Start):
                return dict(start.server_properties)
    raise OSError(f"no Connection.Start from {host}:{port}")


@dataclass
class Member:
    """One broker process."""

    name: str
    host: str
    port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def uri(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.uri))

    def view_number(self) -> int:
        """The number of the view this broker is in (0: none, or it does not answer)."""
        try:
            return int(server_properties(self.host, self.port, timeout=1.0).get("cluster_view")
                       or 0)
        except OSError:
            return 0

    def serving(self) -> bool:
        """True when a client can open a connection here (a member still syncing after it
        joined refuses clients with 320 "this node is joining the cluster")."""
        try:
            params = pika.URLParameters(self.uri + "?connection_attempts=1&socket_timeout=2")
            pika.BlockingConnection(params).close()
            return True
        except (pika.exceptions.AMQPError, OSError):
            return False

    def has_queue(self, queue: str) -> bool:
        """True when a client here sees ``queue`` (a passive Queue.Declare gets Declare-Ok);
        False when it is not there (404) and while this broker refuses clients (320 while it
        joins, 541 while a minority) or does not answer."""
        try:
            conn = self.connect()
        except pika.exceptions.AMQPError:
            return False
        try:
            conn.channel().queue_declare(queue, passive=True)
            return True
        except pika.exceptions.AMQPError:
            return False
        finally:
            if conn.is_open:
                conn.close()

    def members(self) -> list[str] | None:
        """The addresses of this broker's current view (None when it does not answer)."""
        try:
            props = server_properties(self.host, self.port, timeout=1.0)
        except OSError:
            return None
        members = props.get("cluster_members")
        return [m.decode() if isinstance(m, bytes) else m for m in members] if members else None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Cluster:
    """Brokers of one test; ``stop_all`` at the end."""

    base: Path
    secret_file: Path
    extra_args: tuple[str, ...] = ()
    members: dict[str, Member] = field(default_factory=dict)

    @classmethod
    def create(cls, base: Path, *extra_args: str) -> Cluster:
        secret = base / "cluster.secret"
        secret.write_text(secrets.token_hex(32))
        os.chmod(secret, 0o600)
        return cls(base, secret, tuple(extra_args))

    def start(self, octet: int, seed: Member | None = None, *args: str,
              wait: bool = True) -> Member:
        host = f"127.0.0.{octet}"
        name = f"n{octet}"
        member = self.members.get(name)
        if member is None:
            member = Member(name, host, free_port(host), self.base / name, self.base / f"{name}.log")
            self.members[name] = member
        cmd = [sys.executable, "-m", "amqp_broker", "--host", host, "--port", str(member.port),
               "--data-dir", str(member.data_dir), "--node-name", name, "--cluster-secret",
               str(self.secret_file), "--ping-interval", "0.25", "--log-level", "info",
               "--management-port", "0", "--prometheus-port", "0", *self.extra_args, *args]
        if seed is not None:
            cmd += ["--seed", seed.address]
        member.proc = subprocess.Popen(cmd, stdout=open(member.log_path, "a"),
                                       stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            wait_for(lambda: member.members() is not None and member.address in member.members(),
                     20, f"{name} did not come up:\n{member.log_tail()}")
            # joining through a seed, or in a view (not a restarted minority): once synced,
            # it serves clients (a restarted broker lists itself before it has rejoined)
            if seed is not None or member.view_number():
                wait_for(member.serving, 20,
                         f"{name} never served a client:\n{member.log_tail()}")
        return member

    def start_three(self, timeout: float = 15.0) -> tuple[Member, Member, Member]:
        """n2 (the leader), n3 and n4, joined through n2, in one agreed view (bounded)."""
        n2 = self.start(2)
        n3 = self.start(3, n2)
        n4 = self.start(4, n2)
        view = [n2.address, n3.address, n4.address]
        wait_for(lambda: all(m.members() == view for m in (n2, n3, n4)), timeout,
                 "the three brokers did not agree on one view")
        return n2, n3, n4

    def kill(self, member: Member) -> None:
        assert member.proc is not None
        member.proc.kill()
        member.proc.wait(10)

    def kill_together(self, members: list[Member]) -> None:
        """kill -9 of ``members`` at one instant, as a power loss: each is stopped (SIGSTOP) before
        any is killed, so that no survivor sees one die (its sockets close) while the others still
        run and can agree a view without it."""
        for m in members:
            self.freeze(m)
        for m in members:
            self.kill(m)

    def terminate(self, member: Member) -> int:
        assert member.proc is not None
        member.proc.terminate()
        return member.proc.wait(15)

    def freeze(self, member: Member) -> None:
        assert member.proc is not None
        os.kill(member.proc.pid, signal.SIGSTOP)

    def thaw(self, member: Member) -> None:
        assert member.proc is not None
        os.kill(member.proc.pid, signal.SIGCONT)

    def stop_all(self) -> None:
        for member in self.members.values():
            proc = member.proc
            if proc is not None and proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                proc.kill()
                proc.wait(10)


def wait_for(check: Callable[[], bool], timeout: float, message: str = "condition not met",
             interval: float = 0.05) -> float:
    """Poll ``check`` until True; returns the seconds it took; AssertionError after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(interval)
    raise AssertionError(message)


_GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()


def start_with_api(cluster: Cluster, octet: int, seed: Member | None) -> tuple[Member, str]:
    """Start broker ``n<octet>`` with its management API on a free port; (member, API base URL)."""
    port = free_port(f"127.0.0.{octet}")
    member = cluster.start(octet, seed, "--management-port", str(port))
    return member, f"http://127.0.0.{octet}:{port}"


def api_get(url: str, path: str) -> object:
    """GET ``url``/api``path`` as guest: the decoded JSON, None for an error status or an API
    that does not answer."""
    req = urllib.request.Request(url + "/api" + path, headers={"Authorization": _GUEST})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())
    except (urllib.error.HTTPError, OSError):
        return None
