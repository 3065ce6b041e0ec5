"""Our own AMQP 0-9-1 client: sans-IO core on ``amqp_broker.protocol``, anyio and blocking facades.

Modules: ``uri`` (amqp:// and amqps:// URIs), ``errors`` (ChannelClosed, ConnectionClosed,
NoBrokerAvailable, ...), ``message`` (Properties and Message, the publish fast path encoding),
``protocol`` (sans-IO client connection: handshake, channels, frames -> events), ``aio`` (anyio
transport, failover/reconnect, public async API), ``channel`` (the async Channel), ``consumer`` (Consumer, an async iterator), ``confirms``
(publisher-confirm tracking by delivery tag), ``topology`` (what is replayed after a reconnect),
``blocking`` (thread-safe facade over ``aio`` through an anyio blocking portal), ``reliable``
(put/get/subscribe/unsubscribe with a SQLite in-flight log), ``cli`` (the ``amqp-client`` command).
Must not import ``amqp_broker.core`` or ``amqp_broker.server``.
"""

from .errors import (
    AMQPClientError,
    ChannelClosed,
    ConfirmsLost,
    ConnectionClosed,
    MessageReturned,
    NoBrokerAvailable,
    PublishNacked,
)
from .message import Message, Properties
from .uri import ConnectionParams, parse_uri

__all__ = [
    "AMQPClientError", "ChannelClosed", "ConfirmsLost", "ConnectionClosed", "MessageReturned", "NoBrokerAvailable",
    "PublishNacked", "Message", "Properties", "ConnectionParams", "parse_uri",
]
