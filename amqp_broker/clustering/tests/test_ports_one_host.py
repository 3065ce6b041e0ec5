"""Several brokers on one host with only ``--port`` apart (issue 22 item 2), as a user sees them:
the management and Prometheus ports follow the AMQP port, a taken port stops the broker with a line
that names the listener that failed and the flag to set, and a derived port above 65535 is refused
naming its flag. Real broker processes; the environment is a user's shell (no AMQP_BROKER_*_PORT)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .ports import HOST, free_base, http_json, http_text, user_env


def _start(tmp_path: Path, name: str, port: int) -> tuple[subprocess.Popen, Path]:
    """``make run ARGS="--port PORT"`` in effect: only the AMQP port (and a data dir) given."""
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "amqp_broker", "--port", str(port),
                                 "--data-dir", str(tmp_path / name), "--node-name", name],
                                stdout=out, stderr=subprocess.STDOUT, env=user_env())
    return proc, log


def _wait_http(proc: subprocess.Popen, log: Path, url: str) -> dict:
    """The JSON at ``url`` once the broker answers there (at most 30 s)."""
    for _ in range(150):
        if proc.poll() is not None:
            pytest.fail(f"broker exited with {proc.returncode}:\n{log.read_text()}")
        try:
            return http_json(url, 2.0)
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"no answer from {url} within 30 s:\n{log.read_text()}")


def test_two_brokers_with_only_the_amqp_port_apart_each_serve_http_on_derived_ports(
        tmp_path: Path) -> None:
    p = free_base()
    q = free_base(exclude={p, p + 10000, p + 10020})
    procs = []
    try:
        for name, port in (("a", p), ("b", q)):
            procs.append((port, *_start(tmp_path, name, port)))
        for (port, proc, log), name in zip(procs, ("a", "b"), strict=True):
            overview = _wait_http(proc, log, f"http://{HOST}:{port + 10000}/api/overview")
            assert overview["node"] == name
            listened = {(x["protocol"], x["port"]) for x in overview["listeners"]}
            assert {("amqp", port), ("http", port + 10000),
                    ("http/prometheus", port + 10020)} <= listened
            assert "rabbitmq_" in http_text(f"http://{HOST}:{port + 10020}/metrics")
        assert all(proc.poll() is None for _, proc, _ in procs)
    finally:
        for _, proc, _ in procs:
            proc.terminate()
            proc.wait(20)


@pytest.mark.parametrize(("offset", "listener", "flag"), [
    (10000, "management HTTP listener", "--management-port"),
    (10020, "Prometheus listener", "--prometheus-port"),
])
def test_a_taken_http_port_is_named_with_its_flag(tmp_path: Path, offset: int, listener: str,
                                                  flag: str) -> None:
    p = free_base()
    with socket.socket() as taken:
        taken.bind((HOST, p + offset))
        taken.listen()
        out = subprocess.run([sys.executable, "-m", "amqp_broker", "--port", str(p),
                              "--data-dir", str(tmp_path / "data")],
                             capture_output=True, text=True, timeout=60, env=user_env())
    assert out.returncode == 1, out.stderr
    assert (f"{listener} on {HOST}:{p + offset}: [Errno 98] Address already in use "
            f"(set {flag}, 0 = off)") in out.stderr
    assert "Traceback" not in out.stderr


def test_a_derived_port_above_65535_is_refused_naming_its_flag(tmp_path: Path) -> None:
    # --management-port 0 alone: the Prometheus port is still derived (70020)
    cmd = [sys.executable, "-m", "amqp_broker", "--port", "60000", "--management-port", "0",
           "--data-dir", str(tmp_path / "data")]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, env=user_env())
    except subprocess.TimeoutExpired:
        pytest.fail("the broker started instead of refusing the configuration")
    assert out.returncode == 2
    assert "70020, is above 65535; set --prometheus-port (0 = off)" in out.stderr
