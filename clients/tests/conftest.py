"""Fixtures: a real broker process on a free port, the URIs to test against, anyio backends.

``broker`` (session): our broker, ``python -m amqp_broker``, started once. ``own_broker``: a
fresh broker per test that the test may kill (SIGKILL) and restart on the same port.
``amqp_uri``: parametrised over our broker and RabbitMQ (``AMQP_TEST_RABBITMQ_URI``, else a
private node started once per session by ``interop_tests.rabbitmq_node``; skipped with the reason
when rabbitmq-server is not installed). Every wait is bounded.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from interop_tests.rabbitmq_node import RabbitMQUnavailable, rabbitmq_uri

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_accepting(port: int, timeout: float = 30.0) -> None:
    """Block until 127.0.0.1:port accepts a connection (a bound, not a speed check: a loaded
    machine running two pytest workers can take over 15 s); raises ``TimeoutError``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing accepted on port {port} within {timeout} s")


class BrokerProcess:
    """Our broker as a child process; ``uri`` to reach it, ``kill()``/``start()`` to crash and
    restart it on the same port."""

    def __init__(self, data_dir: Path, port: int | None = None, extra: list[str] | None = None):
        self.port = port or free_port()
        self.data_dir = data_dir
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None
        self.log = data_dir / "broker.log"

    @property
    def uri(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def start(self) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logf = open(self.log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--host", "127.0.0.1", "--port", str(self.port),
             "--data-dir", str(self.data_dir / "data"), "--log-level", "warning", *self.extra],
            cwd=ROOT, stdout=logf, stderr=subprocess.STDOUT)
        logf.close()
        try:
            wait_accepting(self.port)
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"broker did not start: {self.log.read_text()[-2000:]}") from None
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory):
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.kill(signal.SIGTERM)


@pytest.fixture
def own_broker(tmp_path: Path):
    b = BrokerProcess(tmp_path / "own").start()
    yield b
    b.kill()


@pytest.fixture(params=["ours", "rabbitmq"])
def amqp_uri(request: pytest.FixtureRequest) -> str:
    """URI of the broker under test: ours, or RabbitMQ (``AMQP_TEST_RABBITMQ_URI``, else a
    private node started once, ``interop_tests.rabbitmq_node``; skipped when there is none)."""
    if request.param == "rabbitmq":
        try:
            return rabbitmq_uri()
        except RabbitMQUnavailable as exc:
            pytest.skip(str(exc))
    return request.getfixturevalue("broker").uri


def _backends() -> list[str]:
    try:
        import trio  # noqa: F401
    except ImportError:
        return ["asyncio"]
    return ["asyncio", "trio"]


@pytest.fixture(params=_backends())
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def name() -> str:
    """A unique queue/exchange name for this test."""
    return f"t-{uuid.uuid4().hex[:10]}"
