"""``make cluster`` (``python -m amqp_broker.clustering.local``) as a supervisor, as a user sees it:
three real brokers, one killed with SIGKILL, the survivors still serving pika, the supervisor naming
the dead member and printing the command that restarts it, and that command bringing it back into
the cluster (issue 22 item 1)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pika

from .ports import HOST, free_base, http_json, round_trip, user_env, wait_agreed


class Output:
    """The lines a process writes to ``stream``, collected by a thread."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        """Everything so far."""
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, seconds: float, after: int = 0) -> int:
        """Index of the first line from ``after`` on matching ``pattern`` (a regex); raises
        AssertionError with the output after ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for i in range(after, len(self.lines)):
                if re.search(pattern, self.lines[i]):
                    return i
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r} within {seconds} s:\n{self.text()}")


def test_member_killed_survivors_serve_and_printed_command_restarts_it(tmp_path: Path) -> None:
    base = free_base(3)
    ports = [base, base + 1, base + 2]
    sup = subprocess.Popen(
        [sys.executable, "-m", "amqp_broker.clustering.local", "--size", "3", "--base-port",
         str(base), "--data-dir", str(tmp_path / "cluster")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=user_env(),
        start_new_session=True)
    out = Output(sup.stdout)
    restarted: subprocess.Popen | None = None
    try:
        # the table: every member's AMQP, management and Prometheus address
        formed = out.wait_for(r"cluster of 3 formed", 60)
        table = "\n".join(out.lines[formed:formed + 5])
        for i, port in enumerate(ports, 1):
            assert re.search(rf"n{i}\s+\d+\s+amqp://{HOST}:{port}/\s+http://{HOST}:{port + 10000}/"
                             rf"\s+http://{HOST}:{port + 10020}/metrics", table), table
        assert http_json(f"http://{HOST}:{base + 10001}/api/overview")["node"] == "n2"
        pid = int(re.search(r"n2\s+(\d+)", table).group(1))  # type: ignore[union-attr]

        os.kill(pid, signal.SIGKILL)
        died = out.wait_for(rf"^n2 \(pid {pid}\) died: killed by SIGKILL$", 15, formed)
        at = out.wait_for(r"to restart it", 5, died)
        command = out.lines[at + 1].strip()
        assert str(tmp_path / "cluster" / "n2") in command and f"--port {base + 1}" in command
        assert "--seed" not in command   # it joined once: it finds its last view's members
        out.wait_for(r"^view \d+: n1, n3 \(leader n1\)$", 15, died)

        # the survivors keep serving
        assert sup.poll() is None, out.text()
        assert round_trip(base, "after-kill-n1") == f"to after-kill-n1 via {base}".encode()
        assert round_trip(base + 2, "after-kill-n3") == f"to after-kill-n3 via {base + 2}".encode()

        # the printed command, run as printed, brings n2 back into the cluster
        with open(tmp_path / "n2-restarted.log", "wb") as log:
            restarted = subprocess.Popen(command, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                         env=user_env(), start_new_session=True)
        status = wait_agreed(ports, ["n1", "n2", "n3"])
        assert status["brokers"][1]["node_name"] == "n2"
        out.wait_for(r"^view \d+: n1, n3, n2 \(leader n1\)$", 15, died)
    finally:
        if restarted is not None and restarted.poll() is None:
            os.killpg(restarted.pid, signal.SIGTERM)
            restarted.wait(20)
        if sup.poll() is None:
            sup.send_signal(signal.SIGTERM)
            try:
                sup.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(sup.pid, signal.SIGKILL)
    assert sup.returncode == 0, out.text()
    assert "stopping n3" in out.text() and "stopping n1" in out.text()


def _one_member(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, Output, int, int]:
    """A supervised cluster of one (n1) with ``flags``, formed: (supervisor, its output, n1's
    AMQP port, n1's pid)."""
    base = free_base(1)
    sup = subprocess.Popen(
        [sys.executable, "-m", "amqp_broker.clustering.local", "--size", "1", "--base-port",
         str(base), "--data-dir", str(tmp_path / "cluster"), *flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=user_env(),
        start_new_session=True)
    out = Output(sup.stdout)
    try:
        at = out.wait_for(r"cluster of 1 formed", 60)
    except AssertionError:
        _stop(sup)
        raise
    pid = int(re.search(r"n1\s+(\d+)", out.lines[at + 2]).group(1))  # type: ignore[union-attr]
    return sup, out, base, pid


def _stop(sup: subprocess.Popen) -> None:
    if sup.poll() is None:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)


def test_restart_delay_restarts_a_dead_member(tmp_path: Path) -> None:
    sup, out, port, pid = _one_member(tmp_path, "--restart-delay", "0.5")
    try:
        os.kill(pid, signal.SIGKILL)
        died = out.wait_for(rf"^n1 \(pid {pid}\) died: killed by SIGKILL$", 15)
        out.wait_for(r"^restarting n1 in 0.5 s \(--restart\)$", 5, died)
        at = out.wait_for(r"^n1 restarted \(pid \d+\)$", 15, died)
        assert str(pid) not in out.lines[at]
        got = b""
        for _ in range(100):   # back on its port, serving pika
            try:
                got = round_trip(port, "after-restart")
                break
            except pika.exceptions.AMQPError:   # refused or 320 while it starts
                time.sleep(0.2)
        assert got == f"to after-restart via {port}".encode(), out.text()
    finally:
        _stop(sup)
    assert sup.returncode == 0, out.text()


def test_supervisor_exits_when_every_member_is_dead(tmp_path: Path) -> None:
    sup, out, _port, pid = _one_member(tmp_path)
    try:
        os.kill(pid, signal.SIGKILL)
        assert sup.wait(30) == 1
        out.wait_for(r"^every member is dead: exiting$", 5)
        assert "restarting" not in out.text()   # down by default
    finally:
        _stop(sup)
