"""The RabbitMQ node that differential tests compare our broker with.

A test that asserts a behaviour RabbitMQ also has runs against both brokers and expects the same
outcome (the brief's "differential tests"). The RabbitMQ side is, in order of preference:

1. the broker named by ``AMQP_TEST_RABBITMQ_URI`` (``amqp://guest:guest@127.0.0.1:5673/``);
2. a private node started here, once per test process, with Debian's ``rabbitmq-server``
   (``interop_tests/setup.sh`` installs it): its own node name, loopback-only AMQP, Erlang
   distribution and port-mapper listeners, data in a temporary directory
   (``benchmarks.processes.RabbitMQ``), stopped when the process exits;
3. none: :func:`rabbitmq_uri` raises :class:`RabbitMQUnavailable` and the caller skips with its
   text (rabbitmq-server is not installed, or the node did not boot within ~2 minutes).

Source: RabbitMQ "Configuration" (RABBITMQ_NODENAME, RABBITMQ_NODE_PORT, RABBITMQ_DIST_PORT,
RABBITMQ_MNESIA_BASE) and Erlang's ``ERL_EPMD_ADDRESS`` / ``inet_dist_use_interface``.
"""

from __future__ import annotations

import atexit
import os
import threading

__all__ = ["RABBIT_ENV", "RabbitMQUnavailable", "rabbitmq_uri"]

RABBIT_ENV = "AMQP_TEST_RABBITMQ_URI"

_lock = threading.Lock()
_uri: str | None = None
_failure: str | None = None


class RabbitMQUnavailable(Exception):
    """No RabbitMQ to compare with; the message says why (callers skip with it)."""


def rabbitmq_uri() -> str:
    """``amqp://guest:guest@127.0.0.1:PORT/`` of the RabbitMQ to compare with (see the module
    docstring for which one). The first call may take ~10 s (a node booting); later calls return
    at once. Raises :class:`RabbitMQUnavailable` when there is none."""
    global _uri, _failure
    external = os.environ.get(RABBIT_ENV)
    if external:
        return external
    with _lock:
        if _uri is not None:
            return _uri
        if _failure is not None:
            raise RabbitMQUnavailable(_failure)
        from benchmarks.processes import RabbitMQ

        node = RabbitMQ()
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
        _uri = f"amqp://guest:guest@127.0.0.1:{node.port}/"
        return _uri
