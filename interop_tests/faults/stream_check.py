"""The stream half of the checker: what a stream's readers saw, from the history. Pure.

With ``--queue-type stream`` every consumer reads the stream from ``x-stream-offset: first`` and,
after a reconnect, from the offset after the last one it read (``clients_common.StreamPosition``);
every delivery is recorded with its ``x-stream-offset``. The message checks (lost, unexpected)
are :mod:`interop_tests.faults.checker`'s; here, what only a stream promises (RabbitMQ "Streams":
a stream is an append-only log, each message at one offset, the same on every replica, read in
order by any consumer):

- ``out_of_order``: deliveries of one client whose offset is not the one after its previous
  delivery (its first delivery must be offset 0: nothing is retained away in a run) -- a gap or
  a step back in what one reader reads;
- ``conflicts``: offsets delivered with different ids (to any consumers, on any brokers): two
  replicas that hold different messages at one offset;
- ``multi_offset``: ids read at more than one offset (the same publish appended twice);
- ``drain_missing``: per broker, confirmed ids its final drain reader (from ``first``) did not
  read: a replica that lacks a confirmed message;
- ``offsets``: the distinct offsets delivered.

``valid``: no out-of-order delivery, no conflict, no id at two offsets and no drain that missed a
confirmed id. (Deliveries without an offset -- a broker that sends no ``x-stream-offset`` -- count
as out of order.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StreamResult", "check_stream"]

SAMPLE = 10   # examples of each problem kept for the report


@dataclass(frozen=True)
class StreamResult:
    """The stream counts of one run (see the module docstring); ``examples``: a few of each
    problem, in words."""

    offsets: int
    out_of_order: int
    conflicts: int
    multi_offset: int
    drain_missing: dict[str, int]
    examples: tuple[str, ...] = field(default=())

    @property
    def valid(self) -> bool:
        """True when the readers saw one log, in order, and every drain read every confirmed id."""
        return (self.out_of_order == 0 and self.conflicts == 0 and self.multi_offset == 0
                and not any(self.drain_missing.values()))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready counts."""
        return {"offsets": self.offsets, "out_of_order": self.out_of_order,
                "conflicts": self.conflicts, "multi_offset": self.multi_offset,
                "drain_missing": dict(self.drain_missing), "examples": list(self.examples),
                "valid": self.valid}


def check_stream(events: Iterable[dict[str, Any]], drain_brokers: Iterable[str] = ()
                 ) -> StreamResult:
    """Count a history's stream deliveries (see the module docstring). ``events``: dicts as
    recorded by :class:`~interop_tests.faults.history.History`; ``drain_brokers``: the brokers
    that had a final drain reader (one that read nothing misses every confirmed id). Raises
    ``KeyError`` for a ``deliver`` without ``id`` / ``client``."""
    confirmed: set[int] = set()
    last: dict[str, int] = {}
    at: dict[int, set[int]] = defaultdict(set)       # offset -> ids
    where: dict[int, set[int]] = defaultdict(set)    # id -> offsets
    drained: dict[str, set[int]] = {b: set() for b in drain_brokers}  # broker -> ids
    examples: list[str] = []
    out_of_order = 0
    for e in events:
        op = e["op"]
        if op == "publish" and e["type"] == "ok":
            confirmed.add(e["id"])
        if op != "deliver":
            continue
        client, ident, offset = e["client"], e["id"], e.get("offset")
        if e.get("drain"):
            drained.setdefault(e.get("broker", client), set()).add(ident)
        expected = last.get(client, -1) + 1
        if offset != expected:
            out_of_order += 1
            if len(examples) < SAMPLE:
                examples.append(f"{client} read offset {offset} after "
                                f"{last.get(client, 'nothing')}")
        if offset is None:
            continue
        last[client] = offset
        at[offset].add(ident)
        where[ident].add(offset)
    conflicts = [o for o, ids in at.items() if len(ids) > 1]
    multi = [i for i, offsets in where.items() if len(offsets) > 1]
    examples += [f"offset {o} read as ids {sorted(at[o])}" for o in sorted(conflicts)[:SAMPLE]]
    examples += [f"id {i} read at offsets {sorted(where[i])}" for i in sorted(multi)[:SAMPLE]]
    missing = {broker: len(confirmed - ids) for broker, ids in sorted(drained.items())}
    return StreamResult(offsets=len(at), out_of_order=out_of_order, conflicts=len(conflicts),
                        multi_offset=len(multi), drain_missing=missing, examples=tuple(examples))
