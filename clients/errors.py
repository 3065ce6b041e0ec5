"""Exceptions raised by the client.

``ChannelClosed`` and ``ConnectionClosed`` carry the broker's Close arguments (reply_code,
reply_text, class_id, method_id), e.g. 404 NOT_FOUND for a passive declare of a missing queue,
406 PRECONDITION_FAILED for an inequivalent redeclare, 320 CONNECTION_FORCED at broker shutdown.
Reply codes: AMQP 0-9-1 "Constants" table. Must not know: sockets, event loops.
"""

from __future__ import annotations

__all__ = ["AMQPClientError", "ChannelClosed", "ConnectionClosed", "NoBrokerAvailable",
           "ConfirmsLost", "PublishNacked", "MessageReturned"]


class AMQPClientError(Exception):
    """Base class of every error this package raises on purpose."""


class _Closed(AMQPClientError):
    def __init__(self, reply_code: int, reply_text: str, class_id: int = 0,
                 method_id: int = 0) -> None:
        super().__init__(reply_code, reply_text, class_id, method_id)
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id

    def __str__(self) -> str:
        where = f" (class {self.class_id}, method {self.method_id})" if self.class_id else ""
        return f"{self.reply_code} {self.reply_text}{where}"


class ChannelClosed(_Closed):
    """The channel was closed: by the broker with Channel.Close (``reply_code`` 403 ACCESS_REFUSED,
    404 NOT_FOUND, 405 RESOURCE_LOCKED, 406 PRECONDITION_FAILED ...), by us (200), or because its
    connection went away (the connection's code and text)."""


class ConnectionClosed(_Closed):
    """The connection is gone: Connection.Close from the broker (320 CONNECTION_FORCED, 403
    ACCESS_REFUSED at login, 501-506 framing errors, 530 NOT_ALLOWED vhost, 541 INTERNAL_ERROR) or
    a socket error / missed heartbeats (``reply_code`` 0 then, text says why)."""


class NoBrokerAvailable(ConnectionClosed):
    """No address in the list accepted a connection within the allowed attempts.

    ``errors``: list of ``(address, exception)`` of the last round, one per address tried.
    """

    def __init__(self, errors: list[tuple[str, BaseException]]) -> None:
        text = "; ".join(f"{addr}: {exc!r}" for addr, exc in errors) or "no address given"
        super().__init__(0, f"no broker available ({text})")
        self.errors = errors


class ConfirmsLost(ConnectionClosed):
    """Confirm-mode publishes were written but the connection was lost before the broker answered
    them: each of those messages may or may not have reached the broker (a message still in our
    socket buffer or unread by the broker is gone; one the broker already stored is kept).
    Re-publish them, ideally with the same ``message_id`` so a deduplicating queue drops copies.

    Raised by ``Channel.wait_for_confirms``, ``Channel.wait_confirmations``,
    ``Channel.publish_batch`` and the blocking ``publish_many``/``publish_batch``/
    ``wait_confirmations``, also when the client reconnected since (a reconnect never makes a
    lost publish look confirmed). A ``ConnectionClosed`` subclass, so existing handlers catch it.
    ``unconfirmed``: how many publishes were lost unanswered; ``delivery_tags``: their tags on the
    lost connection (at most the first 1000); ``error``: the connection error that lost them
    (``reply_code``/``class_id``/``method_id`` are copied from it, 0 for a socket error).
    """

    def __init__(self, unconfirmed: int, error: BaseException,
                 delivery_tags: list[int] | None = None) -> None:
        super().__init__(getattr(error, "reply_code", 0),
                         f"{unconfirmed} publish(es) unconfirmed when the connection was lost "
                         f"({error})", getattr(error, "class_id", 0),
                         getattr(error, "method_id", 0))
        self.unconfirmed = unconfirmed
        self.error = error
        self.delivery_tags = list(delivery_tags or [])[:1000]

    def __reduce__(self) -> tuple:
        return (self.__class__, (self.unconfirmed, self.error, self.delivery_tags))


class PublishNacked(AMQPClientError):
    """The broker answered a confirm-mode publish with Basic.Nack (it could not take the message:
    e.g. a queue with ``x-overflow: reject-publish`` was full). ``delivery_tags``: the tags nacked."""

    def __init__(self, delivery_tags: list[int]) -> None:
        super().__init__(f"broker nacked {len(delivery_tags)} message(s): {delivery_tags[:10]}")
        self.delivery_tags = delivery_tags


class MessageReturned(AMQPClientError):
    """A mandatory publish came back with Basic.Return (312 NO_ROUTE: no queue bound for its
    routing key). ``message`` is the returned ``clients.message.Message``."""

    def __init__(self, reply_code: int, reply_text: str, message: object) -> None:
        super().__init__(f"{reply_code} {reply_text}")
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.message = message
