"""A quorum queue's declaration: which arguments it takes, its state machine's configuration, and
which members hold its replicas.

Owns: RabbitMQ's argument rules for ``x-queue-type: quorum`` (406 for the arguments of other queue
types), the ``FifoConfig`` the arguments describe, the deterministic choice of the group's
members, and the hidden arguments that carry that choice to every member with the declaration
(``x-quorum-members``, ``x-quorum-group``), as ``core.proxies`` carries ``x-cluster-home``. Pure.

Group choice: the members of the cluster view at declare time, sorted by name and rotated by a
hash of (vhost, queue) so that leaders spread over the brokers, the first
``x-quorum-initial-group-size`` (default 3; the view's size when smaller). The group id hashes
(vhost, queue, members, view number): two members declaring the same new queue at once in the same
view choose the same group, and a queue deleted and declared again after a view change gets a new
id, so an old replica that missed the delete is never mixed into the new group.
Sources: RabbitMQ "Quorum Queues" (feature matrix; x-quorum-initial-group-size, x-delivery-limit),
``rabbit_quorum_queue:capabilities/0`` (3.10: the queue arguments it accepts).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from cluster.raft.fifo import FifoConfig
from queues.dedup import DEFAULT_DEDUP_CACHE_SIZE
from queues.errors import InvalidArgument

__all__ = ["MEMBERS_ARG", "GROUP_ARG", "DEFAULT_GROUP_SIZE", "UNSUPPORTED", "check_arguments",
           "fifo_config", "choose_members", "group_id"]

MEMBERS_ARG = "x-quorum-members"
GROUP_ARG = "x-quorum-group"
DEFAULT_GROUP_SIZE = 3
#: Arguments of other queue types (RabbitMQ 3.10 refuses them for quorum queues with 406).
UNSUPPORTED = ("x-max-priority", "x-queue-mode", "x-max-age", "x-max-segment-size",
               "x-initial-cluster-size", "x-stream-max-segment-size-bytes",
               "x-queue-master-locator", "x-max-in-memory-length", "x-max-in-memory-bytes")


def check_arguments(arguments: Mapping[str, Any]) -> None:
    """Refuse what a quorum queue does not take: raises ``InvalidArgument`` (the core's 406
    "invalid arg 'X' for queue 'q' in vhost '/': ...") for an argument of ``UNSUPPORTED``,
    ``x-overflow: reject-publish-dlx``, and a ``x-delivery-limit`` that is not an integer >= 0.
    The common arguments are checked by ``queues.arguments.parse_arguments`` before."""
    for name in UNSUPPORTED:
        if name in arguments:
            raise InvalidArgument(name, "not allowed for queue type quorum")
    if arguments.get("x-overflow") == "reject-publish-dlx":
        raise InvalidArgument("x-overflow", "reject-publish-dlx not allowed for queue type "
                                            "quorum")
    limit = arguments.get("x-delivery-limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)
                              or limit < 0):
        raise InvalidArgument("x-delivery-limit", f"expected a non-negative integer, got "
                                                  f"{limit!r}")


def fifo_config(settings: Any, arguments: Mapping[str, Any]) -> FifoConfig:
    """The state machine's configuration for ``settings`` (``queues.arguments.QueueSettings``)
    and the raw ``arguments`` (x-delivery-limit is not in ``QueueSettings``)."""
    dedup = 0
    if settings.deduplication:
        dedup = settings.dedup_cache_size or DEFAULT_DEDUP_CACHE_SIZE
    return FifoConfig(max_length=settings.max_length, max_length_bytes=settings.max_length_bytes,
                      overflow=settings.overflow or "drop-head",
                      delivery_limit=arguments.get("x-delivery-limit"),
                      message_ttl_ms=settings.message_ttl,
                      single_active_consumer=bool(settings.single_active_consumer),
                      dedup_window=dedup)


def choose_members(view: Iterable[str], size: int, vhost: str, name: str) -> tuple[str, ...]:
    """The group for queue ``name`` of ``vhost``: ``size`` members of ``view`` (see the module
    docstring), sorted. Raises ``ValueError`` for an empty view or a size < 1."""
    names = sorted(set(view))
    if not names or size < 1:
        raise ValueError("a quorum queue needs at least one member")
    start = zlib.crc32(f"{vhost}\x00{name}".encode()) % len(names)
    rotated = names[start:] + names[:start]
    return tuple(sorted(rotated[:size]))


def group_id(vhost: str, name: str, members: Iterable[str], view: int) -> str:
    """The group's id (16 hex digits, see the module docstring)."""
    text = "\x00".join((vhost, name, ",".join(sorted(members)), str(view)))
    return hashlib.sha1(text.encode()).hexdigest()[:16]
