"""Shared fixtures for the interop suite: real broker processes, real third-party clients.

Every test under ``interop_tests/`` talks to a broker over TCP with a client library written
for RabbitMQ (pika, aio-pika, kombu/celery, py-amqp, amqplib, ...).  A test that passes against
RabbitMQ is the specification for our broker, so the whole suite can be pointed at RabbitMQ:

    AMQP_TEST_URI=amqp://guest:guest@127.0.0.1:5673/%2F python -m pytest interop_tests

Fixture API (keep these names stable: other interop test modules use them)
-------------------------------------------------------------------------
``broker`` (session scope, parametrised "ours" / "rabbitmq") -> :class:`Broker`
    Differential: every test using it runs against our broker (``our_broker``) and against
    RabbitMQ (``rabbitmq``) and expects the same outcome; our-only checks skip the RabbitMQ run
    with ``skip_if_rabbitmq``. ``our_broker`` (session scope) is our broker alone:
    ``.host`` ``.port`` ``.uri`` ("amqp://guest:guest@127.0.0.1:PORT/%2F"), ``.data_dir``
    (``Path`` or None when external), ``.pid`` (None when external), ``.log_path``,
    ``.server_properties`` (dict from Connection.Start), ``.product`` ("RabbitMQ", ...),
    ``.is_rabbitmq``, ``.uri_with(user=..., password=..., vhost=..., query=...)``.
    With ``AMQP_TEST_URI`` set, that external broker is used; otherwise our broker is started
    as ``python -m amqp_broker --host 127.0.0.1 --port PORT --data-dir DIR --log-level warning``
    on a free port and terminated (SIGTERM, then SIGKILL) at the end of the session.
``broker_factory`` (function scope) -> callable ``(*extra_args, data_dir=None) -> Broker``
    Starts a fresh private broker process with extra CLI args (same readiness check);
    ``Broker.stop()`` stops one early (e.g. to restart on the same ``data_dir``).  Every
    process is stopped at the end of the test.  Tests using it are skipped when
    ``AMQP_TEST_URI`` is set.
``rabbitmq`` (session scope) -> :class:`Broker`
    RabbitMQ to compare with: ``AMQP_TEST_RABBITMQ_URI`` or a private node started once
    (``interop_tests/rabbitmq_node.py``); skipped with the reason when there is none.
``management_broker`` (session scope, parametrised "ours" / "rabbitmq") -> :class:`Broker`
    Differential management tests: a broker with ``.api_url`` (its management API): ours
    started once with ``--management-port``, or the RabbitMQ node (its rabbitmq_management
    plugin, ``interop_tests/rabbitmq_node.py``). Skipped when either is external.
``unique_name`` (function scope) -> str
    A queue/exchange name unique to this test (test name + uuid), so tests sharing one
    broker don't interfere.

Helpers importable as ``from interop_tests.conftest import ...``:
``is_rabbitmq(broker)``, ``skip_if_rabbitmq(broker, reason)``, ``skip_unless_rabbitmq(...)``,
``read_connection_start(host, port)``.

Every test collected under this directory gets the ``interop`` marker.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from interop_tests.rabbitmq_node import RabbitMQUnavailable, rabbitmq_api_url, rabbitmq_uri

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
STARTUP_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
EXTERNAL_ENV = "AMQP_TEST_URI"
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_connection_start(host: str, port: int, timeout: float = 5.0) -> dict:
    """Send the AMQP 0-9-1 protocol header and return the Connection.Start server_properties.

    Raises OSError / TimeoutError / ValueError when the peer is not (yet) an AMQP broker.
    """
    from pamqp import commands, frame
    from pamqp.exceptions import UnmarshalingException

    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(PROTOCOL_HEADER)
        buf = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no Connection.Start within {timeout:.1f}s")
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"connection closed before Connection.Start: {buf!r}")
            buf += chunk
            if buf.startswith(b"AMQP"):
                raise ValueError(f"broker rejected the protocol header: {buf[:8]!r}")
            try:
                _, channel, method = frame.unmarshal(buf)
            except UnmarshalingException:
                continue
            if channel != 0 or not isinstance(method, commands.Connection.Start):
                raise ValueError(f"expected Connection.Start on channel 0, got {method!r}")
            if (method.version_major, method.version_minor) != (0, 9):
                raise ValueError("unexpected protocol version in Connection.Start")
            return dict(method.server_properties or {})


def _log_tail(path: Path | None, lines: int = 60) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:]) or "(log empty)"


@dataclass
class Broker:
    """A broker the tests talk to: started here (``pid`` set) or external (``pid`` None)."""

    host: str
    port: int
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    data_dir: Path | None = None
    log_path: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)
    server_properties: dict = field(default_factory=dict, repr=False)
    extra_args: tuple = ()
    #: ``http://127.0.0.1:PORT`` of its management API (``management_broker``), else None
    api_url: str | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def uri(self) -> str:
        return self.uri_with()

    def uri_with(self, *, user=None, password=None, vhost=None, query: str = "") -> str:
        user = self.user if user is None else user
        password = self.password if password is None else password
        vhost = self.vhost if vhost is None else vhost
        q = urllib.parse.quote
        uri = f"amqp://{q(user, safe='')}:{q(password, safe='')}@{self.host}:{self.port}/{q(vhost, safe='')}"
        return uri + (f"?{query}" if query else "")

    @property
    def product(self) -> str:
        return str(self.server_properties.get("product", ""))

    @property
    def is_rabbitmq(self) -> bool:
        return self.product == "RabbitMQ"

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        return _log_tail(self.log_path, lines)

    def kill(self) -> int | None:
        """SIGKILL at once (a crash), wait for it.  Returns the exit code (None if external)."""
        return self._end(graceful=False)

    def stop(self) -> int | None:
        """SIGTERM, wait, then SIGKILL.  Returns the exit code (None for external brokers)."""
        return self._end(graceful=True)

    def _end(self, graceful: bool) -> int | None:
        """SIGTERM (``graceful``) or SIGKILL to the broker's process group, then wait at most
        ``STOP_TIMEOUT`` s (after a SIGTERM that was not enough: SIGKILL, and wait again); close
        its log file.  Returns the exit code (None for external brokers)."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                if not graceful:
                    raise
                _signal_group(proc, signal.SIGKILL)
                proc.wait(STOP_TIMEOUT)
        if getattr(proc, "_log_file", None) is not None:
            proc._log_file.close()
        return proc.returncode


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to ``proc``'s process group (it runs in a session of its own); gone already: no-op."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def is_rabbitmq(broker: Broker) -> bool:
    """True when the broker under test says it is RabbitMQ (Connection.Start "product")."""
    return broker.is_rabbitmq


def skip_if_rabbitmq(broker: Broker, reason: str) -> None:
    if broker.is_rabbitmq:
        pytest.skip(f"RabbitMQ behaves differently here: {reason}")


def skip_unless_rabbitmq(broker: Broker, reason: str) -> None:
    if not broker.is_rabbitmq:
        pytest.skip(f"RabbitMQ-only behaviour: {reason}")


def _broker_command() -> list[str]:
    python = os.environ.get("AMQP_BROKER_PYTHON", sys.executable)
    return [python, "-m", "amqp_broker"]


def start_broker(data_dir: Path, *extra_args: str, port: int | None = None) -> Broker:
    """Start ``python -m amqp_broker`` and wait until it answers with Connection.Start."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    log_path = data_dir / f"broker-{port}.log"
    cmd = _broker_command() + [
        "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir),
        "--log-level", "warning", "--management-port", "0", "--prometheus-port", "0", *extra_args,
    ]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    log_file = open(log_path, "ab")
    log_file.write(("$ " + " ".join(cmd) + "\n").encode())
    log_file.flush()
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    proc._log_file = log_file  # closed by Broker.stop()
    broker = Broker("127.0.0.1", port, data_dir=data_dir, log_path=log_path, process=proc,
                    extra_args=tuple(extra_args))  # fmt: skip
    deadline = time.monotonic() + STARTUP_TIMEOUT
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            broker.stop()
            pytest.fail(
                f"broker exited with code {proc.returncode} during startup: {' '.join(cmd)}\n"
                f"--- log tail ({log_path}) ---\n{_log_tail(log_path)}",
                pytrace=False,
            )
        try:
            broker.server_properties = read_connection_start("127.0.0.1", port, timeout=2.0)
            return broker
        except (OSError, ValueError) as exc:  # TimeoutError/ConnectionError are OSErrors
            last_error = exc
            time.sleep(0.1)
    broker.stop()
    pytest.fail(
        f"broker did not answer the AMQP header with Connection.Start within "
        f"{STARTUP_TIMEOUT:.0f}s (last error: {last_error!r}): {' '.join(cmd)}\n"
        f"--- log tail ({log_path}) ---\n{_log_tail(log_path)}",
        pytrace=False,
    )


def _external_broker(uri: str) -> Broker:
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme != "amqp":
        raise pytest.UsageError(f"{EXTERNAL_ENV} must be an amqp:// URI, got {uri!r}")
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    vhost = urllib.parse.unquote(path) if parts.path else "/"
    broker = Broker(
        parts.hostname or "127.0.0.1",
        parts.port or 5672,
        user=urllib.parse.unquote(parts.username or "guest"),
        password=urllib.parse.unquote(parts.password or "guest"),
        vhost=vhost or "/",
    )
    try:
        broker.server_properties = read_connection_start(broker.host, broker.port)
    except (OSError, ValueError) as exc:
        pytest.fail(f"external broker {EXTERNAL_ENV}={uri!r} is not answering: {exc!r}",
                    pytrace=False)  # fmt: skip
    return broker


# --------------------------------------------------------------------------- fixtures

_SESSION_BROKERS: list[Broker] = []
_DEATH_NOTES: list[str] = []


@pytest.fixture(scope="session", params=["ours", "rabbitmq"])
def broker(request):
    """The broker a test talks to, once per param: differential tests (the brief), so every
    interop test that asserts a behaviour asserts it of RabbitMQ too. "ours": ``our_broker``
    (or the external AMQP_TEST_URI broker); "rabbitmq": ``rabbitmq``. A test that checks
    something RabbitMQ does not have skips its RabbitMQ run with ``skip_if_rabbitmq``."""
    if request.param == "rabbitmq":
        if os.environ.get(EXTERNAL_ENV):
            pytest.skip(f"{EXTERNAL_ENV} names the broker under test")
        return request.getfixturevalue("rabbitmq")
    return request.getfixturevalue("our_broker")


@pytest.fixture(scope="session")
def our_broker(tmp_path_factory):
    """Our broker shared by the whole session (external via AMQP_TEST_URI, else our process)."""
    uri = os.environ.get(EXTERNAL_ENV)
    if uri:
        yield _external_broker(uri)
        return
    b = start_broker(tmp_path_factory.mktemp("broker-data"))
    _SESSION_BROKERS.append(b)
    try:
        yield b
    finally:
        died = b.process.poll() is not None
        code = b.stop()
        if died:
            note = (f"session broker (pid {b.pid}) died during the session with exit code "
                    f"{code}\n--- log tail ({b.log_path}) ---\n{b.log_tail()}")  # fmt: skip
            _DEATH_NOTES.append(note)
            print(note, file=sys.stderr)
        _SESSION_BROKERS.remove(b)


@pytest.fixture(scope="session")
def rabbitmq() -> Broker:
    """The RabbitMQ to compare with (``interop_tests.rabbitmq_node``): ``AMQP_TEST_RABBITMQ_URI``
    or a private node started once per session; skips with the reason when there is none."""
    try:
        uri = rabbitmq_uri()
    except RabbitMQUnavailable as exc:
        pytest.skip(str(exc))
    return _external_broker(uri)


@pytest.fixture(scope="session", params=["ours", "rabbitmq"])
def management_broker(request, tmp_path_factory):
    """A broker with its management API (``.api_url``), once per param (see module docstring)."""
    if request.param == "rabbitmq":
        rabbit = request.getfixturevalue("rabbitmq")
        try:
            rabbit.api_url = rabbitmq_api_url()
        except RabbitMQUnavailable as exc:
            pytest.skip(str(exc))
        yield rabbit
        return
    if os.environ.get(EXTERNAL_ENV):
        pytest.skip(f"needs our broker's process; {EXTERNAL_ENV} points at an external broker")
    http = _free_port()
    b = start_broker(tmp_path_factory.mktemp("mgmt-broker-data"), "--management-port", str(http))
    b.api_url = f"http://127.0.0.1:{http}"
    _SESSION_BROKERS.append(b)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:  # the HTTP listener opens beside the AMQP one: wait for it, bounded
        try:
            with socket.create_connection(("127.0.0.1", http), timeout=1.0):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield b
    finally:
        b.stop()
        _SESSION_BROKERS.remove(b)


@pytest.fixture
def broker_factory(tmp_path):
    """Start private broker processes with extra CLI args: ``broker_factory("--flag", "v")``."""
    if os.environ.get(EXTERNAL_ENV):
        pytest.skip(f"needs private broker processes; {EXTERNAL_ENV} points at an external broker")
    started: list[Broker] = []

    def factory(*extra_args: str, data_dir: Path | None = None, port: int | None = None) -> Broker:
        d = data_dir if data_dir is not None else tmp_path / f"broker-{len(started)}"
        b = start_broker(Path(d), *extra_args, port=port)
        started.append(b)
        return b

    yield factory
    for b in started:
        b.stop()


@pytest.fixture
def unique_name(request) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60].strip("-")
    return f"it.{base}.{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------- hooks


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.interop)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for b in _SESSION_BROKERS:
            if not b.alive():
                report.sections.append(
                    ("broker died", f"exit code {b.process.returncode}\n{b.log_tail()}")
                )


def pytest_terminal_summary(terminalreporter):
    for note in _DEATH_NOTES:
        terminalreporter.write_sep("=", "broker process died")
        terminalreporter.write_line(note)
