"""Fixtures of the Spark sink tests: a real broker process and pika helpers to read what landed.

``broker`` (session scope): ``python -m amqp_broker --host 127.0.0.1 --port <free> --data-dir
<tmp> --log-level warning``, stopped (SIGTERM, then SIGKILL) at the end; ``.uri``, ``.port``.
``amqp`` (function scope): a pika ``BlockingChannel`` on it. ``unique`` : a name unique to the
test. ``drain(channel, queue, expected, timeout)``: consume until ``expected`` messages arrived
and then the queue stayed empty for a moment. ``session`` (session scope): one
``spark.local.local_session()`` (master ``local[2]``, run as ``local[2,4]``: task retries, as
users get it) for every Spark test module, stopped at the end: a session takes 10-17 s to start,
and the modules all used the same master. (``test_examples`` runs the examples as their own
processes, with their own sessions, as a user runs them.) Tests using ``session`` are timed
without their fixtures (``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class BrokerProcess:
    port: int
    process: subprocess.Popen
    log_path: Path

    @property
    def uri(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def start_broker(data_dir: Path) -> BrokerProcess:
    port = _free_port()
    log_path = data_dir / "broker.log"
    cmd = [sys.executable, "-m", "amqp_broker", "--host", "127.0.0.1", "--port", str(port),
           "--data-dir", str(data_dir), "--log-level", "warning"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    broker = BrokerProcess(port, proc, log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"broker exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"AMQP\x00\x00\x09\x01")
                if s.recv(8):
                    return broker
        except OSError:
            time.sleep(0.1)
    broker.stop()
    pytest.fail(f"broker did not start within 20 s:\n{log_path.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = start_broker(tmp_path_factory.mktemp("spark-broker"))
    yield b
    b.stop()


def pytest_collection_modifyitems(config, items):
    """Tests here that use the shared ``session`` are timed without their fixtures
    (pytest-timeout's ``func_only``): its start (10-85 s on a loaded machine) counted against the
    first test's 120 s, and a timeout inside a py4j call leaves the gateway out of step, so every
    later Spark test of the run failed with it. A test's own timeout marker keeps its seconds."""
    here = Path(__file__).resolve().parent
    for item in items:
        if "session" not in getattr(item, "fixturenames", ()) or here not in item.path.parents:
            continue
        own = item.get_closest_marker("timeout")
        seconds = (own.kwargs.get("timeout", own.args[0] if own.args else None)
                   if own is not None else None)
        if seconds is None:
            item.add_marker(pytest.mark.timeout(func_only=True), append=False)
        else:
            item.add_marker(pytest.mark.timeout(seconds, func_only=True), append=False)


@pytest.fixture(scope="session")
def session():
    """The local ``SparkSession`` of every Spark test (see the module docstring)."""
    from spark.local import local_session

    s = local_session("local[2]", app_name="amqp-spark-tests")
    yield s
    s.stop()


@pytest.fixture
def amqp(broker):
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    try:
        yield conn.channel()
    finally:
        conn.close()


@pytest.fixture
def unique(request) -> str:
    return f"spark.{request.node.name[:40]}.{uuid.uuid4().hex[:8]}"


def drain(channel, queue: str, expected: int, timeout: float = 30.0,
          settle: float = 0.5) -> list[tuple]:
    """Consume ``queue`` (auto-ack) until ``expected`` messages arrived and then nothing more for
    ``settle`` seconds, or ``timeout``; returns ``[(properties, body), ...]``."""
    got: list[tuple] = []
    deadline = time.monotonic() + timeout
    quiet_since = None
    for method, props, body in channel.consume(queue, auto_ack=True, inactivity_timeout=0.1):
        now = time.monotonic()
        if method is not None:
            got.append((props, body))
            quiet_since = None
        elif len(got) >= expected:
            quiet_since = quiet_since or now
            if now - quiet_since >= settle:
                break
        if now > deadline:
            break
    channel.cancel()
    return got
