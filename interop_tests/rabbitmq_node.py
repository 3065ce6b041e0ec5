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
   shared machine's load, not the plugin), so one node serves every test. It also has an AMQPS
   listener (``listeners.ssl.default`` on a free loopback port, ``rabbitmq_tls_port``) with the
   server certificate of ``tls_pki()`` (a CA made once per test process with ``cluster.ca``;
   tests issue client certificates from it), ``ssl_options.verify = verify_peer`` and
   ``fail_if_no_peer_cert = false``; the ``rabbitmq_auth_mechanism_ssl`` plugin is enabled
   with ``ssl_cert_login_from = common_name`` but ``auth_mechanisms`` stays RabbitMQ's default
   (PLAIN, AMQPLAIN): ``rabbitmq_auth_mechanisms(...)`` changes it for a test (the node reads
   it for every new connection). The ``rabbitmq_prometheus`` plugin is enabled too, its
   listener on a free loopback port (``rabbitmq_prometheus_url``), for the dashboard test,
   and ``rabbitmq_shovel`` with ``rabbitmq_shovel_management`` for the shovel tests
   (``rabbitmq_federation`` with ``rabbitmq_federation_management`` for the federation ones);
3. none: :func:`rabbitmq_uri` raises :class:`RabbitMQUnavailable` and the caller skips with its
   text (rabbitmq-server is not installed, or the node did not boot within ~2 minutes).

``rabbitmq_ctl(*args)`` runs ``rabbitmqctl`` against the private node (e.g. ``export_definitions``);
an external broker has none (``RabbitMQUnavailable``), nor a TLS listener known here.
``AMQP_TEST_RABBITMQ_API`` (``http://127.0.0.1:15672``) names an external broker's management API.

Source: RabbitMQ "Configuration" (RABBITMQ_NODENAME, RABBITMQ_NODE_PORT, RABBITMQ_DIST_PORT,
RABBITMQ_MNESIA_BASE, ``management.tcp.port`` / ``management.tcp.ip``), "Management Plugin",
"TLS Support" (``listeners.ssl``, ``ssl_options``), "Access Control" (``auth_mechanisms``,
``ssl_cert_login_from``) and Erlang's ``ERL_EPMD_ADDRESS`` / ``inet_dist_use_interface``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["RABBIT_ENV", "RABBIT_API_ENV", "RabbitMQUnavailable", "rabbitmq_uri",
           "rabbitmq_api_url", "rabbitmq_ctl", "tls_pki", "rabbitmq_tls_port",
           "rabbitmq_auth_mechanisms", "rabbitmq_prometheus_url"]

RABBIT_ENV = "AMQP_TEST_RABBITMQ_URI"
RABBIT_API_ENV = "AMQP_TEST_RABBITMQ_API"

_lock = threading.RLock()  # tls_pki() is called with it held
_uri: str | None = None
_api_url: str | None = None
_node: Any = None
_failure: str | None = None
_tls_port: int | None = None
_prometheus_url: str | None = None
_pki: Path | None = None


class RabbitMQUnavailable(Exception):
    """No RabbitMQ to compare with; the message says why (callers skip with it)."""


def rabbitmq_uri() -> str:
    """``amqp://guest:guest@127.0.0.1:PORT/`` of the RabbitMQ to compare with (see the module
    docstring for which one). The first call may take ~10 s (a node booting); later calls return
    at once. Raises :class:`RabbitMQUnavailable` when there is none."""
    global _uri, _failure, _api_url, _node, _tls_port, _prometheus_url
    external = os.environ.get(RABBIT_ENV)
    if external:
        return external
    with _lock:
        if _uri is not None:
            return _uri
        if _failure is not None:
            raise RabbitMQUnavailable(_failure)
        from benchmarks.processes import RabbitMQ, free_listen_port, wait_for_port

        api_port, tls_port, prom_port = (free_listen_port() for _ in range(3))
        pki = tls_pki()
        node = RabbitMQ(conf=f"management.tcp.port = {api_port}\nmanagement.tcp.ip = 127.0.0.1\n"
                        f"prometheus.tcp.port = {prom_port}\nprometheus.tcp.ip = 127.0.0.1\n"
                        + _TLS_CONF.format(port=tls_port),
                        plugins="[rabbitmq_management,rabbitmq_auth_mechanism_ssl,"
                                "rabbitmq_prometheus,rabbitmq_shovel,"
                                "rabbitmq_shovel_management,rabbitmq_federation,"
                                "rabbitmq_federation_management]",
                        files={"ca.crt": (pki / "ca.crt").read_bytes(),
                               "server.crt": (pki / "localhost.crt").read_bytes(),
                               "server.key": (pki / "localhost.key").read_bytes()})
        if not node.installed():
            _failure = ("rabbitmq-server is not installed (interop_tests/setup.sh installs it) "
                        f"and {RABBIT_ENV} is not set")
            raise RabbitMQUnavailable(_failure)
        try:
            node.start()
            # the TLS listener may open a moment after the plain one
            assert node.proc is not None  # start() made it
            wait_for_port(tls_port, node.proc, 30, f"RabbitMQ node {node.node} (AMQPS)")
        except Exception as exc:  # boot failure: say why once, for every test that needs it
            node.stop()
            _failure = f"the private RabbitMQ node did not start: {exc}"
            raise RabbitMQUnavailable(_failure) from None
        atexit.register(node.stop)
        _node, _api_url, _tls_port = node, f"http://127.0.0.1:{api_port}", tls_port
        _prometheus_url = f"http://127.0.0.1:{prom_port}"
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


def rabbitmq_prometheus_url() -> str:
    """``http://127.0.0.1:PORT`` of the private node's rabbitmq_prometheus listener (``/metrics``,
    ``/metrics/per-object``). Raises :class:`RabbitMQUnavailable` for an external broker."""
    if os.environ.get(RABBIT_ENV):
        raise RabbitMQUnavailable(f"the Prometheus listener needs the private node; {RABBIT_ENV} "
                                  "is set")
    rabbitmq_uri()
    assert _prometheus_url is not None
    return _prometheus_url


def rabbitmq_ctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``rabbitmqctl -n <the private node> ARGS`` (bounded); raises :class:`RabbitMQUnavailable`
    for an external broker (not ours to drive)."""
    if os.environ.get(RABBIT_ENV):
        raise RabbitMQUnavailable(f"rabbitmqctl needs the private node; {RABBIT_ENV} is set")
    rabbitmq_uri()
    return _node.rabbitmqctl(*args, timeout=timeout)


#: The private node's AMQPS listener (RabbitMQ "TLS Support"); ``{base}`` is its directory.
_TLS_CONF = """listeners.ssl.default = 127.0.0.1:{port}
ssl_options.cacertfile = {{base}}/ca.crt
ssl_options.certfile = {{base}}/server.crt
ssl_options.keyfile = {{base}}/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = false
ssl_cert_login_from = common_name
"""


def tls_pki() -> Path:
    """A directory with a test CA (``ca.crt``, ``ca.key``) and a server certificate for
    ``localhost`` / 127.0.0.1 (``localhost.crt``, ``localhost.key``), made once per test
    process with ``cluster.ca`` and removed at exit. The private node's AMQPS listener uses
    them; tests give our broker the same files and issue client certificates here
    (``cluster.ca.issue_node(tls_pki(), NAME)``: CN=NAME)."""
    global _pki
    with _lock:
        if _pki is None:
            from cluster import ca

            d = Path(tempfile.mkdtemp(prefix="amqp-test-pki-"))
            atexit.register(shutil.rmtree, d, True)
            ca.init_ca(d, name="interop test CA")
            ca.issue_node(d, "localhost", ["127.0.0.1"])
            _pki = d
        return _pki


def rabbitmq_tls_port() -> int:
    """The private node's AMQPS port (certificates from ``tls_pki()``; verify_peer, a client
    certificate optional). Raises :class:`RabbitMQUnavailable` without a private node."""
    if os.environ.get(RABBIT_ENV):
        raise RabbitMQUnavailable(f"the TLS listener needs the private node; {RABBIT_ENV} is set")
    rabbitmq_uri()
    assert _tls_port is not None
    return _tls_port


@contextlib.contextmanager
def rabbitmq_auth_mechanisms(*names: str) -> Iterator[None]:
    """Within the block the private node offers ``names`` (its ``auth_mechanisms``, e.g.
    "EXTERNAL", "PLAIN", "AMQPLAIN"), read for every new connection; RabbitMQ's default
    (PLAIN, AMQPLAIN) is back afterwards. Raises :class:`RabbitMQUnavailable` without a private
    node, ``RuntimeError`` when rabbitmqctl fails."""
    def set_env(mechanisms: tuple[str, ...]) -> None:
        atoms = ",".join(f"'{m}'" for m in mechanisms)
        done = rabbitmq_ctl("eval", f"application:set_env(rabbit, auth_mechanisms, [{atoms}]).")
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl eval failed: {done.stdout}{done.stderr}")

    set_env(names)
    try:
        yield
    finally:
        set_env(("PLAIN", "AMQPLAIN"))
