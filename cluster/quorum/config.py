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
RabbitMQ 4.0 (issue 25): ``x-delivery-limit`` defaults to 20 (``DEFAULT_DELIVERY_LIMIT``; a
negative value, -1, means no limit, and an integer of any sign is accepted, as 4.0 does);
``x-dead-letter-strategy`` is ``at-most-once`` (default) or ``at-least-once``, which takes effect
only with ``x-overflow: reject-publish`` and a dead-letter exchange, else falls back with
RabbitMQ's warning (``dead_letter_strategy``); ``x-max-priority`` is still refused with 406, as
4.0 does (its quorum queues prioritise without it: two levels; 4.3 added up to 32 with it).
Sources: RabbitMQ "Quorum Queues" (feature matrix; x-quorum-initial-group-size, x-delivery-limit;
4.0: priorities, poison message handling, at-least-once dead-lettering),
``rabbit_quorum_queue:capabilities/0`` (3.10 and 4.0: the queue arguments it accepts),
``rabbit_quorum_queue:gather_policy_config/2`` and ``dlh/5`` (4.0), ``rabbit_amqqueue``
``check_dlxstrategy_arg/2``.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from cluster.raft.fifo import FifoConfig
from queues.dedup import DEFAULT_DEDUP_CACHE_SIZE
from queues.errors import InvalidArgument

__all__ = ["MEMBERS_ARG", "GROUP_ARG", "DEFAULT_GROUP_SIZE", "DEFAULT_DELIVERY_LIMIT",
           "UNSUPPORTED", "STRATEGIES", "check_arguments", "fifo_config", "dead_letter_strategy",
           "choose_members", "group_id"]

MEMBERS_ARG = "x-quorum-members"
GROUP_ARG = "x-quorum-group"
DEFAULT_GROUP_SIZE = 3
#: RabbitMQ 4.0's delivery limit for a quorum queue declared without one (-1: no limit).
DEFAULT_DELIVERY_LIMIT = 20
#: The values of x-dead-letter-strategy (the first is the default).
STRATEGIES = ("at-most-once", "at-least-once")
#: Arguments of other queue types (RabbitMQ 3.10 refuses them for quorum queues with 406).
UNSUPPORTED = ("x-max-priority", "x-queue-mode", "x-max-age", "x-max-segment-size",
               "x-initial-cluster-size", "x-stream-max-segment-size-bytes",
               "x-queue-master-locator", "x-max-in-memory-length", "x-max-in-memory-bytes")


def check_arguments(arguments: Mapping[str, Any]) -> None:
    """Refuse what a quorum queue does not take: raises ``InvalidArgument`` (the core's 406
    "invalid arg 'X' for queue 'q' in vhost '/': ...") for an argument of ``UNSUPPORTED``,
    ``x-overflow: reject-publish-dlx``, a ``x-delivery-limit`` that is not an integer (negative:
    no limit, as RabbitMQ 4.0), and a ``x-dead-letter-strategy`` other than ``STRATEGIES``
    ("invalid_dlx_strategy", RabbitMQ's reason). The common arguments are checked by
    ``queues.arguments.parse_arguments`` before."""
    for name in UNSUPPORTED:
        if name in arguments:
            raise InvalidArgument(name, "not allowed for queue type quorum")
    if arguments.get("x-overflow") == "reject-publish-dlx":
        raise InvalidArgument("x-overflow", "reject-publish-dlx not allowed for queue type "
                                            "quorum")
    limit = arguments.get("x-delivery-limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
        raise InvalidArgument("x-delivery-limit", f"expected an integer, got {limit!r}")
    strategy = arguments.get("x-dead-letter-strategy")
    if strategy is not None and strategy not in STRATEGIES:
        raise InvalidArgument("x-dead-letter-strategy", "invalid_dlx_strategy")


def fifo_config(settings: Any, arguments: Mapping[str, Any]) -> FifoConfig:
    """The state machine's configuration for ``settings`` (``queues.arguments.QueueSettings``)
    and the raw ``arguments`` (x-delivery-limit and x-dead-letter-strategy are not in
    ``QueueSettings``): delivery limit ``DEFAULT_DELIVERY_LIMIT`` when not given, None (no
    limit) when negative; at-least-once dead-lettering as ``dead_letter_strategy`` decides."""
    dedup = 0
    if settings.deduplication:
        dedup = settings.dedup_cache_size or DEFAULT_DEDUP_CACHE_SIZE
    limit = arguments.get("x-delivery-limit")
    if limit is None:
        limit = DEFAULT_DELIVERY_LIMIT
    return FifoConfig(max_length=settings.max_length, max_length_bytes=settings.max_length_bytes,
                      overflow=settings.overflow or "drop-head",
                      delivery_limit=None if int(limit) < 0 else int(limit),
                      message_ttl_ms=settings.message_ttl,
                      single_active_consumer=bool(settings.single_active_consumer),
                      dedup_window=dedup,
                      dlx_at_least_once=dead_letter_strategy(settings, arguments)[0])


def dead_letter_strategy(settings: Any, arguments: Mapping[str, Any],
                         queue: str = "queue") -> tuple[bool, str | None]:
    """(at least once?, the warning to log or None) for a quorum queue's dead-lettering, as
    RabbitMQ 4.0's ``rabbit_quorum_queue:dlh/5``: at least once only with
    ``x-dead-letter-strategy: at-least-once``, a dead-letter exchange and ``x-overflow:
    reject-publish``; with drop-head it falls back to at most once, without a dead-letter
    exchange dead-lettering is off -- each with RabbitMQ's warning text (``queue``: how the
    queue is named in it, e.g. "queue 'q' in vhost '/'")."""
    strategy = arguments.get("x-dead-letter-strategy")
    dlx = settings.dead_letter_exchange
    if strategy is None:
        return False, None
    if dlx is None:
        return False, (f"Disabling dead-lettering for {queue} despite configured "
                       f"dead-letter-strategy '{strategy}' because dead-letter-exchange is not "
                       f"configured.")
    if strategy != "at-least-once":
        return False, None
    if (settings.overflow or "drop-head") != "reject-publish":
        return False, (f"Falling back to dead-letter-strategy at-most-once for {queue} because "
                       f"configured dead-letter-strategy at-least-once is incompatible with "
                       f"effective overflow strategy drop-head. To enable dead-letter-strategy "
                       f"at-least-once, set overflow strategy to reject-publish.")
    return True, None


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
