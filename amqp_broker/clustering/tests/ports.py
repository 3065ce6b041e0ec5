"""Helpers for the one-host tests: AMQP ports whose derived management and Prometheus ports are
free too, the environment a user's shell has, HTTP and AMQP checks. Every wait is bounded; only
127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pika

from amqp_broker.config import DERIVED_PORTS

HOST = "127.0.0.1"
VENV_BIN = Path(sys.executable).parent


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_base(count: int = 1, exclude: frozenset[int] | set[int] = frozenset()) -> int:
    """An AMQP port p such that p .. p + count - 1 and the management and Prometheus ports derived
    from each are free on 127.0.0.1 (and not in ``exclude``). Tries up to 500 random ports in
    20000-30000 (below Linux's ephemeral range, so no client socket takes them meanwhile)."""
    offsets = [0, *(off for off, _ in DERIVED_PORTS.values())]
    rng = random.Random()
    for _ in range(500):
        p = rng.randrange(20000, 30000 - count)
        wanted = [p + i + off for i in range(count) for off in offsets]
        if not exclude.intersection(wanted) and all(_free(x) for x in wanted):
            return p
    raise RuntimeError("no free port range found")


def user_env() -> dict[str, str]:
    """This environment without the repository conftest's AMQP_BROKER_*_PORT settings (a user's
    shell has none: the brokers derive their ports)."""
    env = dict(os.environ)
    for key in DERIVED_PORTS:
        env.pop(f"AMQP_BROKER_{key.upper()}", None)
    return env


def cluster_status(ports: list[int], timeout: float = 2.0) -> dict[str, Any]:
    """``amqp-broker cluster-status`` (the venv's) for the brokers on ``ports``: its JSON."""
    cmd = [str(VENV_BIN / "amqp-broker"), "cluster-status", "--timeout", str(timeout)]
    for port in ports:
        cmd += ["--uri", f"amqp://{HOST}:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def wait_agreed(ports: list[int], names: list[str], seconds: float = 45.0) -> dict[str, Any]:
    """Poll cluster-status until every broker on ``ports`` answers and all report one view whose
    members are ``names`` (any order); returns that status. Raises AssertionError after
    ``seconds``."""
    status: dict[str, Any] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = cluster_status(ports)
        brokers = status["brokers"]
        if status["agree"] and all(b["reachable"] for b in brokers) and all(
                sorted(b["cluster_member_names"]) == sorted(names) for b in brokers):
            return status
        time.sleep(0.5)
    raise AssertionError(f"brokers on {ports} did not agree on {names}: {status}")


def http_json(url: str, timeout: float = 5.0) -> Any:
    """GET ``url`` as guest/guest; the JSON body. Raises OSError when it does not answer."""
    req = urllib.request.Request(url, headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def http_text(url: str, timeout: float = 5.0) -> str:
    """GET ``url`` (no credentials); the body as text. Raises OSError when it does not answer."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def round_trip(port: int, queue: str) -> bytes:
    """Declare ``queue`` on the broker at ``port`` with pika, publish a body there and get it
    back (waiting up to 5 s for it); returns the body got, b"" when none came."""
    conn = pika.BlockingConnection(pika.URLParameters(f"amqp://guest:guest@{HOST}:{port}/%2F"))
    try:
        ch = conn.channel()
        ch.queue_declare(queue)
        body = f"to {queue} via {port}".encode()
        ch.basic_publish("", queue, body)
        for _ in range(50):
            _, _, got = ch.basic_get(queue, auto_ack=True)
            if got is not None:
                return got
            conn.sleep(0.1)
        return b""
    finally:
        conn.close()
