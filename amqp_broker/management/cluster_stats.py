"""The message figures of ``/api/queues``, ``/api/exchanges`` (lists and single objects) and
``/api/overview`` summed over the members of the cluster, as RabbitMQ's management API shows
them: each member counts only what its own clients did (publishes through it, its consumers'
deliveries and acks, its clients' gets: ``core.stats``), and RabbitMQ's answer on any node is
the sum over the nodes ("Management HTTP API": ``message_stats``; the management database
aggregates every node's per-object stats).

Owns ``summed_items``, ``summed_item`` and ``summed_overview``: this member's answer plus the
other members' answers to the same path with ``?local=1`` (``member_apis.ask_members``: all
members at once, one request per member per answer, never per object, 2 s in all; a member
that does not answer adds nothing, as RabbitMQ leaves out a down node's figures). What is
summed: every count of ``message_stats`` and the ``rate`` of its ``<key>_details`` (each member
samples its own rates, per second; the sum of the members' rates is the cluster's rate), and
``/api/overview``'s ``object_totals`` ``connections`` and ``channels`` (each member's clients).
A *shared classic queue*'s depth (``shared_classic``: classic, not exclusive, not replicated)
too: each member keeps the messages published through it (a message relayed to another
member's consumer stays the sender's, never entering the receiver's copy: ``core.relay_inbox``),
so ``QUEUE_PARTS`` (``messages``, ``messages_ready``, ``messages_unacknowledged``, their
``_details`` rates, ``message_bytes``, ``message_bytes_ready``) are summed, and the overview's
``queue_totals`` adds the other members' shared classic parts (``shared_queue_totals``, which a
member puts in its ``?local=1`` overview for this). Not summed: what every member holds alike
(the queue and exchange definitions, so ``object_totals.queues`` / ``exchanges``; a quorum
queue's, mirrored (``ha-mode``) queue's or stream's depth: replicated, each member shows the
same count), a private (exclusive) queue's depth (it lives on its home member; the others hold
only a proxy, which no listing shows), and ``consumers`` (each member already counts another
member's consumer of a shared queue once, as a relay consumer: ``core.relay``; summing would
count it once per member). A forwarded request (``member_apis.forwarded``) is answered with
this member's own figures.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request

from .context import Management
from .member_apis import ask_members, forwarded

__all__ = ["QUEUE_PARTS", "add_stats", "quoted", "shared_classic", "shared_queue_totals",
           "summed_items", "summed_item", "summed_overview"]

#: a shared classic queue's figures of which each member holds its own part (module docstring)
QUEUE_PARTS = ("messages", "messages_ready", "messages_unacknowledged", "messages_details",
               "messages_ready_details", "messages_unacknowledged_details", "message_bytes",
               "message_bytes_ready")
#: the overview's key, in a ``?local=1`` answer only, for this member's shared classic parts
SHARED_TOTALS = "shared_queue_totals"


def _add(ours: dict[str, Any], theirs: dict[str, Any], keys: Any) -> None:
    """Add ``theirs``' ``keys`` to ``ours`` in place: counts (ints) summed, ``{"rate": r}``
    objects' rates summed (rounded to 0.1 as ``shapes.rate``), keys only ``theirs`` has
    appended; other values ignored."""
    for key in keys:
        value = theirs.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            mine = ours.get(key, 0)
            ours[key] = (mine if isinstance(mine, int) else 0) + value
        elif isinstance(value, dict) and isinstance(value.get("rate"), int | float):
            mine = ours.get(key)
            base = mine.get("rate", 0.0) if isinstance(mine, dict) else 0.0
            ours[key] = {"rate": round(float(base) + float(value["rate"]), 1)}


def add_stats(into: dict[str, Any], other: Any) -> None:
    """Add ``other``'s ``message_stats`` (an object as the API shows it; anything else adds
    nothing) to ``into``'s, in place (``_add``: counts and ``<key>_details.rate`` summed);
    ``into`` gets a ``message_stats`` when only ``other`` had one."""
    theirs = other.get("message_stats") if isinstance(other, dict) else None
    if isinstance(theirs, dict) and theirs:
        _add(into.setdefault("message_stats", {}), theirs, list(theirs))


def shared_classic(item: dict[str, Any]) -> bool:
    """True for a queue (as ``shapes.queue_json`` shows it) whose messages each member keeps its
    part of: ``type`` classic (a mirrored queue shows ``quorum``), not ``exclusive`` (a private
    queue) and without a ``leader`` (no replicated queue)."""
    return item.get("type") == "classic" and not item.get("exclusive") and "leader" not in item


def _add_queue(item: dict[str, Any], other: Any) -> None:
    """Add ``other`` (another member's answer for the same queue) to ``item``: its
    ``message_stats``, and its ``QUEUE_PARTS`` for a shared classic queue."""
    add_stats(item, other)
    if isinstance(other, dict) and shared_classic(item) and shared_classic(other):
        _add(item, other, QUEUE_PARTS)


def shared_queue_totals(mgmt: Management) -> dict[str, Any]:
    """This member's part of its shared classic queues (of every vhost): ``messages``,
    ``messages_ready``, ``messages_unacknowledged`` (counts) and their ``_details`` (the sum
    of the queues' sampled rates, per second), as ``queue_totals`` shows them."""
    broker, sampler = mgmt.broker, mgmt.sampler
    out: dict[str, Any] = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
    rates = dict.fromkeys(out, 0.0)
    for vhost in broker.vhosts.values():
        for q in vhost.queues.values():
            if (getattr(q.settings, "queue_type", "classic") or "classic") != "classic" \
                    or q.exclusive_owner is not None \
                    or getattr(q.capabilities, "replicated", False):
                continue
            ready, unacked = q.message_count, q.unacked_count
            for key, value in (("messages", ready + unacked), ("messages_ready", ready),
                               ("messages_unacknowledged", unacked)):
                out[key] += value
            mine = sampler.objects.queue(q) if sampler is not None else {}
            for key in rates:
                rates[key] += float(mine.get(key, 0.0))
    out.update({f"{key}_details": {"rate": round(value, 1)} for key, value in rates.items()})
    return out


def _key(item: Any) -> tuple[Any, Any] | None:
    return (item.get("vhost"), item.get("name")) if isinstance(item, dict) else None


async def summed_items(request: Request, mgmt: Management, path: str,
                       items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` (this member's listing of ``path``, e.g. ``/api/queues/%2F``: objects with
    ``vhost`` and ``name``) with each object's ``message_stats`` summed with the same object's
    (same vhost and name) in the other members' listings of ``path``; ``items`` as they are
    for a forwarded request or a broker not clustered."""
    if forwarded(request):
        return items
    answers = await ask_members(mgmt, request.headers.get("authorization"), path)
    theirs: dict[tuple[Any, Any] | None, list[Any]] = {}
    for answer in answers.values():
        for other in answer if isinstance(answer, list) else []:
            theirs.setdefault(_key(other), []).append(other)
    for item in items:
        for other in theirs.get(_key(item), []):
            _add_queue(item, other)
    return items


async def summed_item(request: Request, mgmt: Management, path: str,
                      item: dict[str, Any]) -> dict[str, Any]:
    """``item`` (this member's answer for the object at ``path``, e.g.
    ``/api/queues/%2F/q``) with its ``message_stats`` summed with the other members' answers
    for ``path`` (a member without the object answers 404 and adds nothing)."""
    if not forwarded(request):
        answers = await ask_members(mgmt, request.headers.get("authorization"), path)
        for other in answers.values():
            if _key(other) == _key(item):
                _add_queue(item, other)
    return item


async def summed_overview(request: Request, mgmt: Management,
                          overview: dict[str, Any]) -> dict[str, Any]:
    """``overview`` (this member's ``/api/overview``) with ``message_stats`` and
    ``object_totals``' ``connections`` and ``channels`` summed over the members, and
    ``queue_totals`` plus the other members' shared classic parts; a forwarded request's
    answer carries this member's part as ``shared_queue_totals`` instead."""
    if forwarded(request):
        overview[SHARED_TOTALS] = shared_queue_totals(mgmt)
        return overview
    answers = await ask_members(mgmt, request.headers.get("authorization"), "/api/overview")
    totals = overview.get("object_totals", {})
    for other in answers.values():
        if not isinstance(other, dict):
            continue
        add_stats(overview, other)
        theirs = other.get("object_totals")
        for key in ("connections", "channels"):
            value = theirs.get(key) if isinstance(theirs, dict) else None
            if isinstance(value, int) and key in totals:
                totals[key] += value
        shared = other.get(SHARED_TOTALS)
        if isinstance(shared, dict) and isinstance(overview.get("queue_totals"), dict):
            _add(overview["queue_totals"], shared, QUEUE_PARTS)
    return overview


def quoted(*parts: str) -> str:
    """``parts`` percent-encoded as path segments, each after a "/" (``quoted("%", "q")`` is
    ``/%25/q``)."""
    return "".join("/" + quote(p, safe="") for p in parts)
