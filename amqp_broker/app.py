"""Composition root: build the broker from a ``Config`` and run it on anyio (uvloop when installed).

Source: DESIGN.md §2. ``run(config)`` blocks until SIGINT/SIGTERM.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

import anyio

from .config import Config
from .core.broker import Broker
from .server.listener import run_broker

__all__ = ["run", "serve", "shutdown"]

log = logging.getLogger("amqp_broker")


async def serve(config: Config, ready: Callable[[int], None] | None = None) -> None:
    """Start a broker for ``config`` and serve until cancelled or a SIGINT/SIGTERM arrives."""
    os.makedirs(config.data_dir, exist_ok=True)
    broker = Broker(config.broker_settings())
    async with anyio.create_task_group() as tg:
        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("signal %s: shutting down", signal.Signals(signum).name)
                    await shutdown(broker)
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        await run_broker(broker, config.host, config.port, ready)


async def shutdown(broker: Broker, grace: float = 2.0) -> None:
    """Close every client connection with 320 CONNECTION_FORCED (as RabbitMQ does on shutdown)
    and give the writers up to ``grace`` seconds to send it."""
    for conn in list(broker.connections.values()):
        conn.close_forced("CONNECTION_FORCED - broker forced connection closure with reason "
                          "'shutdown'")
    with anyio.move_on_after(grace):
        while any(c.output_size for c in broker.connections.values()):
            await anyio.sleep(0.02)


def run(config: Config) -> None:
    """Run the broker in this thread until stopped."""
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def ready(port: int) -> None:
        log.info("broker %s ready on %s:%s (data dir %s)", config.node_name, config.host, port,
                 config.data_dir)

    backend_options = {}
    try:
        import uvloop  # noqa: F401
        backend_options["use_uvloop"] = True
    except ImportError:
        pass
    anyio.run(serve, config, ready, backend="asyncio", backend_options=backend_options)
