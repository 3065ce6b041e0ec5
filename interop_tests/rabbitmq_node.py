"""The RabbitMQ node that differential tests compare our broker with.

A test that asserts a behaviour RabbitMQ also has runs against both brokers and expects the same
outcome (the brief's "differential tests"). The RabbitMQ side is, in order of preference:

1. the broker named by ``AMQP_TEST_RABBITMQ_URI`` (``amqp://guest:guest@127.0.0.1:5673/``);
2. a private node started here, once per test process, with Debian's ``rabbitmq-server``
   (``interop_tests/setup.sh`` installs it): its own node name, loopback-only AMQP, Erlang
   distribution and port-mapper listeners, data in a temporary directory
   (``benchmarks.processes.RabbitMQ``), stopped when the process exits. The
   ``rabbitmq_management`` plugin (shipped with the server) is enabled on it, its HTTP listener
   on a free loopback port (``rabbitmq_api_url``), for the differential management tests:
   measured on this machine, a node boots in 14-19 s with or without it (the spread is the
   shared machine's load, not the plugin), so one node serves every test;
3. none: :func:`rabbitmq_uri` raises :class:`RabbitMQUnavailable` and the caller skips with its
   text (rabbitmq-server is not installed, or the node did not boot within ~2 minutes).

``rabbitmq_ctl(*args)`` runs ``rabbitmqctl`` against the private node (e.g. ``export_definitions``);
an external broker has none (``RabbitMQUnavailable``). ``AMQP_TEST_RABBITMQ_API``
(``http://127.0.0.1:15672``) names an external broker's management API.

Source: RabbitMQ "Configuration" (RABBITMQ_NODENAME, RABBITMQ_NODE_PORT, RABBITMQ_DIST_PORT,
RABBITMQ_MNESIA_BASE, ``management.tcp.port`` / ``management.tcp.ip``), "Management Plugin"
and Erlang's ``ERL_EPMD_ADDRESS`` / ``inet_dist_use_interface``.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
from typing import Any

__all__ = ["RABBIT_ENV", "RABBIT_API_ENV", "RabbitMQUnavailable", "rabbitmq_uri",
           "rabbitmq_api_url", "rabbitmq_ctl"]

RABBIT_ENV = "AMQP_TEST_RABBITMQ_URI"
RABBIT_API_ENV = "AMQP_TEST_RABBITMQ_API"

_lock = threading.Lock()
_uri: str | None = None
_api_url: str | None = None
_node: Any = None
_failure: str | None = None


class RabbitMQUnavailable(Exception):
    """No RabbitMQ to compare with; the message says why (callers skip with it)."""


def rabbitmq_uri() -> str:
    """``amqp://guest:guest@127.0.0.1:PORT/`` of the RabbitMQ to compare with (see the module
    docstring for which one). The first call may take ~10 s (a node booting); later calls return
    at once. Raises :class:`RabbitMQUnavailable` when there is none."""
    global _uri, _failure, _api_url, _node
    external = os.environ.get(RABBIT_ENV)
    if external:
        return external
    with _lock:
        if _uri is not None:
            return _uri
        if _failure is not None:
            raise RabbitMQUnavailable(_failure)
        from benchmarks.processes import RabbitMQ, free_port

        api_port = free_port(15680)
        node = RabbitMQ(conf=f"management.tcp.port = {api_port}\nmanagement.tcp.ip = 127.0.0.1\n",
                        plugins="[rabbitmq_management]")
        if not node.installed():
            _failure = ("rabbitmq-server is not installed (interop_tests/setup.sh installs it) "
                        f"and {RABBIT_ENV} is not set")
            raise RabbitMQUnavailable(_failure)
        try:
            node.start()
        except Exception as exc:  # boot failure: say why once, for every test that needs it
            node.stop()
            _failure = f"the private RabbitMQ node did not start: {exc}"
            raise RabbitMQUnavailable(_failure) from None
        atexit.register(node.stop)
        _node, _api_url = node, f"http://127.0.0.1:{api_port}"
        _uri = f"amqp://guest:guest@127.0.0.1:{node.port}/"
        return _uri


def rabbitmq_api_url() -> str:
    """``http://127.0.0.1:PORT`` of the RabbitMQ's management API (``AMQP_TEST_RABBITMQ_API`` for
    an external broker, else the private node's). Raises :class:`RabbitMQUnavailable`."""
    external = os.environ.get(RABBIT_API_ENV)
    if external:
        return external.rstrip("/")
    if os.environ.get(RABBIT_ENV):
        raise RabbitMQUnavailable(f"{RABBIT_ENV} is set without {RABBIT_API_ENV}")
    rabbitmq_uri()
    assert _api_url is not None
    return _api_url


def rabbitmq_ctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``rabbitmqctl -n <the private node> ARGS`` (bounded); raises :class:`RabbitMQUnavailable`
    for an external broker (not ours to drive)."""
    if os.environ.get(RABBIT_ENV):
        raise RabbitMQUnavailable(f"rabbitmqctl needs the private node; {RABBIT_ENV} is set")
    rabbitmq_uri()
    return _node.rabbitmqctl(*args, timeout=timeout)
