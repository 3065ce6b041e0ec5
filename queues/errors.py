"""Errors raised by the queue model.

Owns: the exception types the broker core maps to AMQP replies. ``InvalidArgument`` becomes
406 PRECONDITION_FAILED on Queue.Declare (AMQP 0-9-1 §1.7.2.1, "RabbitMQ: Queues" optional
arguments); ``NotServed`` becomes 406 PRECONDITION_FAILED on the method it refuses (a queue type
that cannot serve it on this broker); the others signal a broken contract between the core and a queue (a bug in the caller),
which the core should treat as an internal error.

Must not know: channels, frames, reply codes.
"""

from __future__ import annotations

__all__ = ["QueueError", "InvalidArgument", "UnknownEntry", "QueueDeleted", "NotServed"]


class QueueError(Exception):
    """Base class of every error raised by ``queues``."""


class InvalidArgument(QueueError):
    """A Queue.Declare x-argument (or a message's ``expiration``) is refused.

    ``argument`` names the argument (e.g. ``"x-message-ttl"``); ``str(exc)`` is a one-line reason
    that names it, suitable as the 406 reply text. Source: RabbitMQ ``rabbit_amqqueue:declare_args``
    ("invalid arg '<name>' for queue ...").
    """

    def __init__(self, argument: str, reason: str) -> None:
        super().__init__(f"invalid arg '{argument}': {reason}")
        self.argument = argument
        self.reason = reason


class UnknownEntry(QueueError):
    """``ack``/``requeue``/``reject`` of an entry that is not currently unacked in this queue.

    Raised when the entry was delivered to a no-ack consumer, already settled, or never came from
    this queue. The core's delivery-tag bookkeeping should make this impossible.
    """


class QueueDeleted(QueueError):
    """An operation that needs a live queue (publish, add_consumer) was called after ``delete()``."""


class NotServed(QueueError):
    """This queue cannot serve the operation on this broker (e.g. Basic.Get of a quorum queue on
    a broker holding no replica of it). ``str(exc)`` is the one-line reason, suitable as the
    text of the 406 PRECONDITION_FAILED channel close the core answers with."""
