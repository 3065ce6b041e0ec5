"""The broker process as an operator meets it: command line, configuration sources, shutdown.

Covers: ``amqp-broker --help`` and ``python -m amqp_broker --help`` list the documented flags; the
port comes from a TOML file, from ``AMQP_BROKER_PORT`` over the file, and from ``--port`` over both;
a bad config file exits 2 with a message; SIGTERM closes client connections with 320
CONNECTION_FORCED (RabbitMQ's behaviour on shutdown) and the process exits 0; a second broker on a
data directory in use exits 1 with one line (``amqp_broker.data_lock``), and ``ctl force_boot``
refuses it.
Source: issue "Single-node AMQP 0-9-1 broker" (CLI/env/TOML), AMQP 0-9-1 reply code 320.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pika
import pytest

FLAGS = ("--config", "--host", "--port", "--data-dir", "--node-name", "--log-level")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"broker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listening on {port}")


def _start(tmp_path, args=(), env_extra=None) -> subprocess.Popen:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "amqp_broker", "--data-dir",
                             str(tmp_path / "data"), "--log-level", "warning", *args], env=env)


def _stop(proc: subprocess.Popen) -> int:
    proc.terminate()
    try:
        return proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


@pytest.fixture(autouse=True)
def _ours_only(broker):
    if broker.pid is None:
        pytest.skip("starts our own broker processes (this is the RabbitMQ run, or AMQP_TEST_URI names an external broker)")


def test_help_lists_the_documented_flags():
    out = subprocess.run([sys.executable, "-m", "amqp_broker", "--help"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0
    for flag in FLAGS:
        assert flag in out.stdout
    script = shutil.which("amqp-broker", path=os.path.dirname(sys.executable))
    assert script is not None, "the amqp-broker console script is not installed"
    out = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "--data-dir" in out.stdout


def test_port_precedence_file_then_env_then_flag(tmp_path):
    file_port, env_port, flag_port = _free_port(), _free_port(), _free_port()
    cfg = tmp_path / "broker.toml"
    cfg.write_text(f'host = "127.0.0.1"\nport = {file_port}\n')
    for args, env, expect in (
        (["--config", str(cfg)], {}, file_port),
        (["--config", str(cfg)], {"AMQP_BROKER_PORT": str(env_port)}, env_port),
        (["--config", str(cfg), "--port", str(flag_port)], {"AMQP_BROKER_PORT": str(env_port)},
         flag_port),
    ):
        proc = _start(tmp_path, args, env)
        try:
            _wait_port(expect, proc)
            conn = pika.BlockingConnection(
                pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{expect}/%2F"))
            assert conn.is_open
            conn.close()
        finally:
            _stop(proc)


def test_bad_config_file_exits_2(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("no_such_setting = 1\n")
    out = subprocess.run([sys.executable, "-m", "amqp_broker", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "no_such_setting" in out.stderr


def test_sigterm_closes_clients_with_320_and_exits_0(tmp_path):
    port = _free_port()
    proc = _start(tmp_path, ["--port", str(port)])
    try:
        _wait_port(port, proc)
        conn = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{port}/%2F"))
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            conn.process_data_events(5)
            conn.process_data_events(5)
        assert info.value.reply_code == 320
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            _stop(proc)


def test_port_already_in_use_exits_1_with_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "amqp_broker", "--port", str(port),
                              "--data-dir", str(tmp_path / "data"), "--log-level", "error"],
                             capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert f"amqp-broker on 127.0.0.1:{port} stopped:" in out.stderr
    assert "address already in use" in out.stderr.lower()
    assert "Traceback" not in out.stderr


def test_second_broker_on_a_data_dir_in_use_exits_1_and_the_first_keeps_serving(tmp_path):
    # docs/getting-started.md: `make run` uses ./data, and a second broker started from the same
    # checkout (another --port only) would share its message store and definitions.db
    port = _free_port()
    first = _start(tmp_path, ["--port", str(port), "--management-port", "0",
                              "--prometheus-port", "0"])
    try:
        _wait_port(port, first)
        second_port = _free_port()
        out = subprocess.run([sys.executable, "-m", "amqp_broker", "--port", str(second_port),
                              "--management-port", "0", "--prometheus-port", "0",
                              "--data-dir", str(tmp_path / "data"), "--log-level", "error"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 1, out.stderr
        assert f"amqp-broker on 127.0.0.1:{second_port} stopped:" in out.stderr
        assert f"in use by another broker (pid {first.pid})" in out.stderr
        assert "--data-dir" in out.stderr and "Traceback" not in out.stderr
        # rabbitmqctl's force_boot needs a stopped node: ours refuses a data dir in use
        forced = subprocess.run([sys.executable, "-m", "amqp_broker", "ctl", "force_boot",
                                 "--data-dir", str(tmp_path / "data")],
                                capture_output=True, text=True, timeout=30)
        assert forced.returncode == 1 and "for a stopped broker" in forced.stderr
        assert not (tmp_path / "data" / "force_boot").exists()
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        try:
            assert conn.channel().queue_declare("still-here", durable=True).method.queue
        finally:
            conn.close()
    finally:
        assert _stop(first) == 0
