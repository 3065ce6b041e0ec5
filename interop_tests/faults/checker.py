"""The checker: a run's history in, counts out. Pure (no I/O, no clock, no processes).

A "total queue" check in the sense of Jepsen's ``checker/total-queue`` (used by Kingsbury's 2014
RabbitMQ analysis and RabbitMQ's Jepsen suite): every value enqueued should come out, and nothing
else should. Here, over the events of :mod:`interop_tests.faults.history`:

- attempted: ids with a publish ``invoke``;
- confirmed: ids whose publish ended ``ok`` (a late ``ok`` after an ``info`` counts);
- lost: confirmed ids never delivered (the promise broken); split by where they sit in their
  publisher's sequence of ids: ``lost_prefix`` before the first of its ids that was delivered (or
  all of them, when none was), ``lost_suffix`` after the last one delivered, ``lost_middle``
  between delivered ones (a hole: a replica that lost the middle of its log, as Jepsen's NATS
  analysis found, shows here; power loss tends to lose a suffix);
- unexpected: delivered ids never attempted (nothing should appear from nowhere);
- duplicates: deliveries beyond the first of each id (allowed: at-least-once; reported);
- recovered: ids published ``fail`` or ``info`` that were delivered anyway (allowed);
- unavailable_s: for each publisher, the time between workload start and stop spent in gaps of
  more than ``gap_s`` seconds without an ``ok`` confirm (from the start to the first, between
  two, from the last to the stop), summed over publishers, in seconds.

Jepsen counts duplicates inside "unexpected"; here they are apart, because at-least-once delivery
(a requeue after a consumer's broker dies) legitimately duplicates, while an id that was never
published can only come from a bug.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Result", "check", "split_lost", "unavailable_seconds"]

SAMPLE = 20   # how many ids of each kind a Result keeps for the report


@dataclass(frozen=True)
class Result:
    """The counts of one run (ids are the publishers' integers; ``*_ids`` are sorted samples of
    at most ``SAMPLE`` ids, for the report; ``unavailable_s`` in seconds)."""

    attempted: int
    confirmed: int
    failed: int
    unknown: int
    deliveries: int
    lost: int
    unexpected: int
    duplicates: int
    recovered: int
    unavailable_s: float
    lost_ids: tuple[int, ...] = field(default=())
    unexpected_ids: tuple[int, ...] = field(default=())
    lost_prefix: int = 0
    lost_middle: int = 0
    lost_suffix: int = 0

    @property
    def valid(self) -> bool:
        """True when nothing confirmed was lost and nothing unpublished appeared."""
        return self.lost == 0 and self.unexpected == 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready counts."""
        return {
            "attempted": self.attempted, "confirmed": self.confirmed, "failed": self.failed,
            "unknown": self.unknown, "deliveries": self.deliveries, "lost": self.lost,
            "unexpected": self.unexpected, "duplicates": self.duplicates,
            "recovered": self.recovered, "unavailable_s": round(self.unavailable_s, 3),
            "lost_ids": list(self.lost_ids), "unexpected_ids": list(self.unexpected_ids),
            "lost_prefix": self.lost_prefix, "lost_middle": self.lost_middle,
            "lost_suffix": self.lost_suffix, "valid": self.valid,
        }


def _window(events: list[dict[str, Any]]) -> tuple[float, float]:
    start = end = None
    for e in events:
        if e["op"] == "phase" and e.get("phase") == "workload-start" and start is None:
            start = e["t"]
        elif e["op"] == "phase" and e.get("phase") == "workload-stop":
            end = e["t"]
    times = [e["t"] for e in events if e["op"] == "publish"]
    if start is None:
        start = min(times, default=0.0)
    if end is None:
        end = max(times, default=start)
    return start, end


def unavailable_seconds(events: Iterable[dict[str, Any]], gap_s: float = 1.0) -> float:
    """Seconds the publishers saw no ``ok`` confirm for longer than ``gap_s`` within the
    workload window (``phase`` events ``workload-start``/``workload-stop``, else the first and
    last publish), summed over the publishers (clients with at least one publish ``invoke``)."""
    events = list(events)
    start, end = _window(events)
    oks: dict[str, list[float]] = defaultdict(list)
    publishers = set()
    for e in events:
        if e["op"] != "publish":
            continue
        publishers.add(e["client"])
        if e["type"] == "ok" and start <= e["t"] <= end:
            oks[e["client"]].append(e["t"])
    total = 0.0
    for client in publishers:
        points = [start, *sorted(oks[client]), end]
        for a, b in zip(points, points[1:], strict=False):
            if b - a > gap_s:
                total += b - a
    return total


def split_lost(lost: set[int], delivered: Iterable[int], publisher: dict[int, str]
               ) -> tuple[int, int, int]:
    """(prefix, middle, suffix) counts of ``lost`` ids (see the module docstring): each id's
    place among its publisher's (``publisher``: id -> client) delivered ids."""
    spans: dict[str, tuple[int, int]] = {}
    for ident in delivered:
        client = publisher.get(ident)
        if client is not None:
            lo, hi = spans.get(client, (ident, ident))
            spans[client] = (min(lo, ident), max(hi, ident))
    prefix = middle = suffix = 0
    for ident in lost:
        span = spans.get(publisher.get(ident, ""))
        if span is None or ident < span[0]:
            prefix += 1
        elif ident > span[1]:
            suffix += 1
        else:
            middle += 1
    return prefix, middle, suffix


def check(events: Iterable[dict[str, Any]], gap_s: float = 1.0) -> Result:
    """Count a history (see the module docstring). ``events``: dicts as recorded by
    :class:`~interop_tests.faults.history.History`; unknown ``op`` values are ignored.
    Raises ``KeyError`` for an event without ``op``/``t`` or a publish without ``id``."""
    events = list(events)
    attempted: set[int] = set()
    publisher: dict[int, str] = {}
    outcome: dict[int, str] = {}
    delivered: Counter[int] = Counter()
    for e in events:
        op = e["op"]
        if op == "publish":
            ident = e["id"]
            kind = e["type"]
            if kind == "invoke":
                attempted.add(ident)
                publisher[ident] = e.get("client", "")
            elif kind == "ok" or outcome.get(ident) != "ok":
                outcome[ident] = kind
        elif op == "deliver":
            delivered[e["id"]] += 1
    confirmed = {i for i, kind in outcome.items() if kind == "ok"}
    not_ok = {i for i, kind in outcome.items() if kind != "ok"}
    lost = confirmed - delivered.keys()
    unexpected = delivered.keys() - attempted
    prefix, middle, suffix = split_lost(lost, delivered, publisher)
    return Result(
        attempted=len(attempted),
        confirmed=len(confirmed),
        failed=sum(1 for kind in outcome.values() if kind == "fail"),
        unknown=sum(1 for kind in outcome.values() if kind == "info"),
        deliveries=sum(delivered.values()),
        lost=len(lost),
        unexpected=len(unexpected),
        duplicates=sum(n - 1 for n in delivered.values() if n > 1),
        recovered=len(not_ok & delivered.keys()),
        unavailable_s=unavailable_seconds(events, gap_s),
        lost_ids=tuple(sorted(lost)[:SAMPLE]),
        unexpected_ids=tuple(sorted(unexpected)[:SAMPLE]),
        lost_prefix=prefix, lost_middle=middle, lost_suffix=suffix,
    )
