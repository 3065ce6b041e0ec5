"""Answering a client after its change reached the cluster (Qpid ClusteringHA "Outline": the
broker that received Exchange.Declare, Queue.Declare, Queue.Bind ... answers its client after n
members replied, n set by policy).

Two paths. In a cluster, a definition change (Exchange and Queue Declare, Delete, Bind, Unbind)
is a command of the cluster metadata log (issue 23): ``propose`` hands the client's method to
``broker.metadata`` (``MetadataHooks``, ``amqp_broker.clustering.metadata``), which answers
once the command committed and was applied (by ``--sync-replies`` members): the Ok, or the
refusal every member decided alike (a channel or connection error with RabbitMQ's code and
text); the broker's objects change only when the log is applied. ``metadata_of`` says whether
that path is on. Other changes that reach the members (Queue.Purge) travel as the client's own
AMQP method (with nowait cleared, so members answer) and a member applies it through its
ordinary handlers: ``reply`` sends the Ok at once when there is no cluster, the connection is
itself a peer link (no re-propagation), or the change is local only.
Must not know: links, membership, Raft (``broker.cluster_hooks`` and ``broker.metadata`` are the
seams: ``core.broker.ClusterHooks``, ``MetadataHooks`` here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ...protocol.errors import ChannelException, ConnectionException

if TYPE_CHECKING:
    from pamqp.base import Frame

    from ..channel import Channel

__all__ = ["reply", "propose", "metadata_of", "MetadataHooks", "MetadataDone"]

#: ``done(None)``: Ok; ``done((reply code, text, connection level))``: refused.
MetadataDone = Callable[[tuple[int, str, bool] | None], None]


class MetadataHooks(Protocol):
    """``broker.metadata`` in a cluster: the metadata log (``clustering.metadata``)."""

    def change(self, vhost: str, connection: Any, method: Frame, done: MetadataDone) -> None:
        """Propose ``method`` (a client's definition change in ``vhost`` on ``connection``,
        None for the broker itself); ``done`` once decided (541 after the metadata timeout)."""
        ...


def metadata_of(ch: Channel) -> MetadataHooks | None:
    """The metadata log a change of ``ch``'s client goes through; None on a single broker (and
    on a peer link)."""
    conn = ch.connection
    if conn.is_peer:
        return None
    return getattr(conn.broker, "metadata", None)


def propose(ch: Channel, method: Frame, ok: Callable[[], Frame | None], *,
            then: Callable[[], None] | None = None) -> None:
    """Propose ``method`` through ``metadata_of(ch)`` (not None); once decided, send ``ok()``
    (None: nowait) or close the channel (the connection for a connection-level refusal:
    503, 530, 541) with the refusal. ``then`` runs after the Ok (or the close)."""
    conn = ch.connection
    hooks = metadata_of(ch)
    assert hooks is not None

    def done(result: tuple[int, str, bool] | None) -> None:
        if not ch.closing and conn.channels.get(ch.id) is ch:
            if result is None:
                frame = ok()
                if frame is not None:
                    conn.send_method(ch.id, frame)
            elif result[2]:
                conn.close_with(ConnectionException(result[0], result[1]))
            else:
                ch.close_with(ChannelException(result[0], result[1]))
        if then is not None:
            then()

    hooks.change(ch.vhost.name, conn, method, done)


def reply(ch: Channel, method: Frame, ok: Frame | None, *, local_only: bool = False,
          then: Callable[[], None] | None = None) -> None:
    """Send ``ok`` (None: the client asked nowait) once ``method`` was propagated; a member's
    refusal closes the channel with that member's reply code and text. ``then`` runs right
    after the ``ok`` was queued (or would have been), e.g. the Basic.Cancel notifications that
    RabbitMQ sends after Queue.Delete-Ok."""
    conn = ch.connection
    hooks = conn.broker.cluster_hooks
    if hooks is None or conn.is_peer or local_only:
        if ok is not None:
            conn.send_method(ch.id, ok)
        if then is not None:
            then()
        return

    def done(error: tuple[int, str] | None) -> None:
        if not ch.closing and conn.channels.get(ch.id) is ch:
            if error is None:
                if ok is not None:
                    conn.send_method(ch.id, ok)
            else:
                ch.close_with(ChannelException(error[0], error[1]))
        if then is not None:
            then()

    if hasattr(method, "nowait"):
        method.nowait = False
    hooks.propagate(ch.vhost.name, method, done)
