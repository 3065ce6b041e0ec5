"""What applying a metadata command decided: the answer its client gets, the same on every member.

Owns the outcome values of ``MetadataMachine.apply`` and ``timeout_refusal``, the answer of a
member that cannot get a command committed (a minority). Must not know: Raft, frames, clients.

A member that proposed a command answers its client from the outcome its own machine returned
for that log index: ``Declared`` -> Exchange.Declare-Ok / Queue.Declare-Ok (the queue's name;
message and consumer counts come from the member's queue object, as RabbitMQ's come from the
queue process), ``Deleted`` -> Delete-Ok, ``Bound`` -> Bind-Ok / Unbind-Ok, ``Stored`` -> the
management API's 201/204, ``Refused`` -> Channel.Close (or Connection.Close when
``connection_level``) with ``code`` and ``text``, or the management API's error.
Sources: AMQP 0-9-1 §1.4.2 (channel and connection exceptions), "Constants"; RabbitMQ 4.x
``rabbit_channel`` / ``rabbit_amqqueue_process`` / ``rabbit_quorum_queue`` (the texts of a
metadata store timeout).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import commands as m

__all__ = ["Declared", "Deleted", "Bound", "Stored", "Refused", "Outcome", "timeout_refusal",
           "TIMEOUT_MS", "INTERNAL_ERROR"]

#: AMQP 0-9-1 reply code 541 INTERNAL_ERROR (a connection exception).
INTERNAL_ERROR = 541
#: How long RabbitMQ 4 waits for its metadata store before answering with ``timeout_refusal``
#: (``khepri_default_timeout``, ms).
TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class Declared:
    """The exchange or queue ``name`` exists as declared; ``created``: by this command."""

    name: str
    created: bool


@dataclass(frozen=True, slots=True)
class Deleted:
    """Deleted (``existed`` False: there was nothing to delete, still an Ok). ``cascade``: the
    auto-delete exchanges that went with it (they lost their last binding), sorted."""

    existed: bool
    cascade: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Bound:
    """Bind: ``changed`` when the binding is new. Unbind: ``changed`` when it existed;
    ``cascade`` the auto-delete exchanges that went (sorted)."""

    changed: bool
    cascade: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Stored:
    """A policy, vhost, user or permission set; ``created``: it did not exist before."""

    created: bool


@dataclass(frozen=True, slots=True)
class Refused:
    """The command changed nothing: ``code`` is the AMQP reply code (403, 404, 405, 406, 503,
    530; 400 for a policy the management API would refuse as ``bad_request``), ``text``
    RabbitMQ's reply text, ``connection_level`` whether it closes the connection (503, 530)
    rather than the channel."""

    code: int
    text: str
    connection_level: bool = False


Outcome = Declared | Deleted | Bound | Stored | Refused
"""Every outcome of ``MetadataMachine.apply``."""


def timeout_refusal(command: m.Command, node: str) -> Refused:
    """The answer of member ``node`` when ``command`` could not be committed within
    ``TIMEOUT_MS`` (it is on the minority side, or no leader is elected): RabbitMQ 4's
    541 INTERNAL_ERROR and text for a Khepri timeout (``rabbit_channel``: exchange declare and
    delete, bindings; ``rabbit_amqqueue_process`` / ``rabbit_quorum_queue``: queue declare;
    ``rabbit_amqqueue``: queue delete). Commands without an AMQP method (policies, vhosts,
    users, permissions) get the same code with a text in the same words."""
    if isinstance(command, m.DeclareExchange | m.DeleteExchange):
        what = f"exchange '{command.name}' in vhost '{command.vhost}'"
        text = (f"failed to declare {what} because the operation timed out"
                if isinstance(command, m.DeclareExchange)
                else f"failed to delete {what} due to a timeout")
    elif isinstance(command, m.DeclareQueue):
        kind = "quorum queue" if command.arguments.get("x-queue-type") == "quorum" else "queue"
        text = (f"Could not declare {kind} '{command.name}' in vhost '{command.vhost}' on node "
                f"'{node}' because the metadata store operation timed out")
    elif isinstance(command, m.DeleteQueue):
        text = "The operation to delete the queue from the metadata store timed out"
    elif isinstance(command, m.Bind | m.Unbind):
        text = f"Could not {'add' if isinstance(command, m.Bind) else 'remove'} binding due to " \
               f"timeout"
    else:
        text = f"failed to apply {type(command).__name__} because the metadata store operation " \
               f"timed out"
    return Refused(INTERNAL_ERROR, f"INTERNAL_ERROR - {text}", connection_level=True)
