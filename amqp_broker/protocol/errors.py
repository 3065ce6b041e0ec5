"""The two kinds of AMQP error: a channel exception and a connection exception.

Each carries (reply_code, reply_text, class_id, method_id) and maps to exactly one Channel.Close or
Connection.Close. Source: AMQP 0-9-1 §1.4.2 (exceptions), "Constants" table for which codes are
channel- and which are connection-level. Must not know: sockets, channel state.
"""

from __future__ import annotations

from typing import Self

__all__ = ["AMQPException", "ChannelException", "ConnectionException"]


class AMQPException(Exception):
    """Base: an error the peer is told about with a Close method.

    ``reply_code``: the spec's reply code (e.g. 404); ``reply_text``: short text (at most 255 bytes
    once encoded, truncated when longer); ``class_id``/``method_id``: the method that failed (0, 0
    when none did).
    """

    def __init__(self, reply_code: int, reply_text: str, class_id: int = 0,
                 method_id: int = 0) -> None:
        super().__init__(reply_code, reply_text)
        self.reply_code = reply_code
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id

    def for_method(self, class_id: int, method_id: int) -> Self:
        """Set the failing method's ids when not set yet; returns self for raise chains."""
        if not self.class_id:
            self.class_id, self.method_id = class_id, method_id
        return self

    def __str__(self) -> str:
        return f"{self.reply_code} {self.reply_text} (class {self.class_id}, method {self.method_id})"


class ChannelException(AMQPException):
    """A soft error: closes one channel with Channel.Close; the connection carries on (403-406)."""


class ConnectionException(AMQPException):
    """A hard error: closes the whole connection with Connection.Close (320, 402, 501-506, 530, 540)."""
