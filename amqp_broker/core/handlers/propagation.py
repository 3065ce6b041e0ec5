"""Answering a client after its change reached the cluster (Qpid ClusteringHA "Outline": the
broker that received Exchange.Declare, Queue.Declare, Queue.Bind ... answers its client after n
members replied, n set by policy).

The change travels as the client's own AMQP method (with nowait cleared, so members answer); a
member applies it through its ordinary handlers. ``reply`` sends the Ok at once when there is no
cluster, the connection is itself a peer link (no re-propagation), or the change is local only.
Must not know: links, membership (``broker.cluster_hooks`` is the seam: ``core.broker.ClusterHooks``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ...protocol.errors import ChannelException

if TYPE_CHECKING:
    from pamqp.base import Frame

    from ..channel import Channel

__all__ = ["reply"]


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
