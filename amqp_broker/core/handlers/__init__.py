"""One module per AMQP class (GarageMQ style); ``HANDLERS`` maps a pamqp method class to its handler.

A handler is ``handler(channel, method) -> None``; it answers through ``channel.connection`` and raises
``ChannelException`` / ``ConnectionException`` (protocol/errors.py) for the spec's error cases.
"""

from __future__ import annotations

from amqp_broker_native import extend_path

extend_path(__path__, __name__)  # the compiled build first, when in use (amqp_broker_native)

from collections.abc import Callable
from typing import Any

from . import basic, channel_class, confirm_tx, exchange, queue

__all__ = ["HANDLERS"]

HANDLERS: dict[type, Callable[[Any, Any], None]] = {}
for _module in (channel_class, exchange, queue, basic, confirm_tx):
    HANDLERS.update(_module.HANDLERS)
