"""Serving the management and Prometheus HTTP apps inside the broker's own event loop.

``start(broker, config, tg)`` binds the HTTP listeners at once (so a taken port stops the broker
at start with an ``OSError``, as RabbitMQ does), then serves them with Hypercorn in ``tg``:
no extra process or thread, no signal handlers of its own (we pass a shutdown trigger that
fires when the broker's task group cancels us). It also starts the rate sampler when any HTTP
listener is on (the rates are only served there). A port of 0 in the
configuration disables that listener. The AMQP port is added to the listeners when known
(``amqp_ready``), the AMQPS port too (``amqps_ready``, protocol "amqp/ssl"). With
``management_tls`` the management API is served over HTTPS with ``tls_cert``/``tls_key``
(listener protocol "https", as RabbitMQ's management.ssl listener); Prometheus stays plain HTTP.
The HTTP listeners are published in the broker's Connection.Start server properties
(``peers.publish``) so that the other cluster members list them in ``/api/overview``.
Source: Hypercorn "API usage" (serve with a shutdown_trigger), its certfile/keyfile settings.
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

import anyio
from hypercorn.config import Config as HyperConfig
from starlette.types import ASGIApp

from ..server import bind_errors
from . import maintenance
from .context import Listener, Management
from .peers import publish

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..config import Config
    from ..core.broker import Broker

__all__ = ["start", "amqp_ready", "amqps_ready", "bind", "serve_http"]

log = logging.getLogger("amqp_broker.management")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port). Raises ``OSError``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _backend() -> str:
    try:
        import sniffio  # comes with anyio's and Hypercorn's dependencies
        return sniffio.current_async_library()
    except Exception:
        return "asyncio"


async def serve_http(app: ASGIApp, sock: socket.socket,
                     tls: tuple[str, str] | None = None) -> None:
    """Serve ``app`` on the listening ``sock`` (taken over) until cancelled; then Hypercorn
    shuts down gracefully (open requests get ``graceful_timeout``), shielded from the
    cancellation so it never sees a CancelledError in its own task group. ``tls``: (certificate
    file, key file) to serve HTTPS (TLS 1.2+, Hypercorn's defaults)."""
    config = HyperConfig()
    if tls is not None:
        config.certfile, config.keyfile = tls
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("amqp_broker.management.http")
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = 30.0
    serve: Any
    if _backend() == "trio":
        from hypercorn.trio import serve
    else:
        from hypercorn.asyncio import serve
    stop = anyio.Event()

    async def run() -> None:
        with anyio.CancelScope(shield=True):
            await serve(app, config, shutdown_trigger=stop.wait)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            await anyio.sleep_forever()
        finally:
            stop.set()


async def _sampler(mgmt: Management) -> None:
    sampler = mgmt.sampler
    assert sampler is not None
    while True:
        sampler.sample()
        await anyio.sleep(sampler.interval)


async def start(broker: Broker, config: Config, tg: TaskGroup) -> Management:
    """Bind and serve the management API (``config.management_port``) and the Prometheus
    endpoint (``config.prometheus_port``) on ``config.host``; 0 disables either. Raises
    ``bind_errors.BindError`` (an ``OSError`` naming the listener and its flag) when a port is
    taken."""
    from .app import build_app
    from .prometheus import build_metrics_app
    mgmt = Management(broker, data_dir=config.data_dir)
    apps = []
    if config.management_port:
        apps.append(("http", config.management_port, build_app))
    if config.prometheus_port:
        apps.append(("http/prometheus", config.prometheus_port, build_metrics_app))
    bound = []
    try:
        for protocol, port, _ in apps:
            listener = bind_errors.MANAGEMENT if protocol == "http" else bind_errors.PROMETHEUS
            with bind_errors.naming(listener, config.host, port):
                bound.append(bind(config.host, port))
    except OSError:
        for sock in bound:
            sock.close()
        raise
    for (protocol, _, build), sock in zip(apps, bound, strict=True):
        port = sock.getsockname()[1]
        tls = None
        if protocol == "http" and config.management_tls:
            protocol, tls = "https", (config.tls_cert, config.tls_key)
        mgmt.listeners.append(Listener(protocol, config.host, port))
        log.info("%s listening on %s://%s:%s/", "prometheus metrics" if "prom" in protocol
                 else "management API", "https" if tls else "http", config.host, port)
        tg.start_soon(serve_http, build(mgmt), sock, tls)
    if apps:   # the rates feed the HTTP endpoints only: no periodic scan without them
        tg.start_soon(_sampler, mgmt)
    from .routes_parameters import run_parameters
    tg.start_soon(run_parameters, mgmt, tg)   # the shovels and federation links this member runs
    if config.management_port:   # drain / revive come through the API; asleep until a drain
        tg.start_soon(maintenance.enforce, mgmt)
    publish(mgmt)
    return mgmt


def amqp_ready(mgmt: Management, host: str, port: int) -> None:
    """The AMQP listener is up on ``port``: list it first."""
    mgmt.listeners.insert(0, Listener("amqp", host, port))


def amqps_ready(mgmt: Management, host: str, port: int) -> None:
    """The AMQPS listener is up on ``port``: listed as "amqp/ssl" (RabbitMQ's name)."""
    mgmt.listeners.append(Listener("amqp/ssl", host, port))
