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
Not summed: what every member holds alike (the queue and exchange definitions, so
``object_totals.queues`` / ``exchanges``), a queue's message counts and consumers, and
``queue_totals``. A forwarded request (``member_apis.forwarded``) is answered with this
member's own figures.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request

from .context import Management
from .member_apis import ask_members, forwarded

__all__ = ["add_stats", "quoted", "summed_items", "summed_item", "summed_overview"]


def add_stats(into: dict[str, Any], other: Any) -> None:
    """Add ``other``'s ``message_stats`` (an object as the API shows it; anything else adds
    nothing) to ``into``'s, in place: counts (ints) summed, ``<key>_details.rate`` summed
    (rounded to 0.1 as ``shapes.rate``), keys only ``other`` has appended; ``into`` gets a
    ``message_stats`` when only ``other`` had one."""
    theirs = other.get("message_stats") if isinstance(other, dict) else None
    if not isinstance(theirs, dict) or not theirs:
        return
    ours = into.setdefault("message_stats", {})
    for key, value in theirs.items():
        if isinstance(value, int) and not isinstance(value, bool):
            mine = ours.get(key, 0)
            ours[key] = (mine if isinstance(mine, int) else 0) + value
        elif isinstance(value, dict) and isinstance(value.get("rate"), int | float):
            mine = ours.get(key)
            base = mine.get("rate", 0.0) if isinstance(mine, dict) else 0.0
            ours[key] = {"rate": round(float(base) + float(value["rate"]), 1)}


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
            add_stats(item, other)
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
                add_stats(item, other)
    return item


async def summed_overview(request: Request, mgmt: Management,
                          overview: dict[str, Any]) -> dict[str, Any]:
    """``overview`` (this member's ``/api/overview``) with ``message_stats`` and
    ``object_totals``' ``connections`` and ``channels`` summed over the members."""
    if forwarded(request):
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
    return overview


def quoted(*parts: str) -> str:
    """``parts`` percent-encoded as path segments, each after a "/" (``quoted("%", "q")`` is
    ``/%25/q``)."""
    return "".join("/" + quote(p, safe="") for p in parts)
