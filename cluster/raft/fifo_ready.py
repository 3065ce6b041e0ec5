"""A quorum queue's message record, and its ready backlog as columns of integers (issue 25).

Owns: ``Msg``, the record of a message the state machine holds as an object (at the head of its
ready queue, checked out, returned, held as a dead letter), and ``Columns``: the ready messages
behind that head whose header and body are in the Raft log (paged), as parallel arrays -- Raft
index 8 bytes, body size 4 bytes, expiry 8 bytes only once some message has one -- about 12 to
20 bytes a message instead of an object with its header (about 300 bytes with the Raft log's
entry). Their header and body are read back from the log when they reach the head. A message
that must keep more than that (returned with a delivery count, a body still in memory) is kept
whole in ``Columns.kept``: few, in practice. Also the JSON images of both in a snapshot
(``FifoQueue.snapshot``). Must not know: Raft, commands, I/O.

Sources: RabbitMQ "Quorum Queues" (memory usage: at least 32 bytes of metadata a message in
memory, the rest in the log segments); ``rabbit_fifo`` 3.10+ keeps per message a small record
(its Raft index and header size) in a queue, ``?MSG(Idx, Header)``; "Quorum Queues" 4.0.
Speed (issue 12): ``Msg`` is slotted with an explicit ``__init__`` (see ``cluster.raft.fifo``).
"""

from __future__ import annotations

import base64
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["Msg", "Columns", "msg_image", "msg_from_image", "columns_image", "tail_images",
           "restore_ready"]


@dataclass(slots=True, init=False)
class Msg:
    """A message held as an object: ``msg_id`` (the Raft index of its Enqueue), ``header``
    (b"" with ``body`` None: both are still in the log, read back by ``FifoQueue.load``),
    ``body`` (None: paged out, read back from the Raft log), ``expires_at`` (ms, commands'
    clock; None: never), ``delivery_count``, ``size`` (bytes of the body)."""

    msg_id: int
    header: bytes
    body: bytes | None
    expires_at: int | None
    delivery_count: int
    size: int

    def __init__(self, msg_id: int, header: bytes, body: bytes | None, expires_at: int | None,
                 delivery_count: int = 0, size: int = -1) -> None:
        self.msg_id = msg_id
        self.header = header
        self.body = body
        self.expires_at = expires_at
        self.delivery_count = delivery_count
        self.size = len(body) if body is not None else size


#: Slots taken from the front before the arrays are shifted down (amortised O(1) ``pop``).
_SHIFT = 4096


class Columns:
    """Ready messages in order (oldest first): ``ids`` (Raft indexes), ``sizes`` (body bytes),
    ``expires`` (ms; -1 none; None until some message has an expiry) from ``head`` on;
    ``count`` of them; ``kept``: msg id -> the whole ``Msg`` of the few held as objects."""

    __slots__ = ("ids", "sizes", "expires", "head", "count", "kept")

    def __init__(self) -> None:
        self.ids = array("q")
        self.sizes = array("I")
        self.expires: array | None = None
        self.head = 0
        self.count = 0
        self.kept: dict[int, Msg] = {}

    def push(self, msg_id: int, size: int, expires_at: int | None) -> None:
        """Append a paged message (its header and body in the log)."""
        self.ids.append(msg_id)
        self.sizes.append(size)
        exp = self.expires
        if expires_at is not None:
            if exp is None:
                exp = self.expires = array("q", [-1]) * len(self.ids)
                exp[-1] = expires_at
            else:
                exp.append(expires_at)
        elif exp is not None:
            exp.append(-1)
        self.count += 1

    def push_msg(self, m: Msg) -> None:
        """Append ``m`` whole (kept as the object: a delivery count, a header or body in
        memory)."""
        self.kept[m.msg_id] = m
        self.push(m.msg_id, m.size, m.expires_at)

    def pop(self) -> Msg:
        """Take the oldest message (a ``Msg`` with header b"" and body None unless kept).
        Raises ``IndexError`` when empty."""
        i = self.head
        msg_id = self.ids[i]
        exp = self.expires
        expires = exp[i] if exp is not None else -1
        m = self.kept.pop(msg_id, None) if self.kept else None
        if m is None:
            m = Msg(msg_id, b"", None, expires if expires >= 0 else None, 0, self.sizes[i])
        self.head = i + 1
        self.count -= 1
        if not self.count:
            self.clear()
        elif self.head >= _SHIFT and self.head * 2 >= len(self.ids):
            self._shift()
        return m

    def _shift(self) -> None:
        h = self.head
        del self.ids[:h]
        del self.sizes[:h]
        if self.expires is not None:
            del self.expires[:h]
        self.head = 0

    def clear(self) -> None:
        """Forget every message."""
        self.ids = array("q")
        self.sizes = array("I")
        self.expires = None
        self.head = 0
        self.count = 0
        self.kept = {}

    def messages(self) -> list[Msg]:
        """Every message, oldest first (new ``Msg`` objects unless kept: snapshots, tests)."""
        out: list[Msg] = []
        exp = self.expires
        kept = self.kept
        for i in range(self.head, len(self.ids)):
            msg_id = self.ids[i]
            m = kept.get(msg_id)
            if m is None:
                e = exp[i] if exp is not None else -1
                m = Msg(msg_id, b"", None, e if e >= 0 else None, 0, self.sizes[i])
            out.append(m)
        return out

    def remove(self, msg_id: int) -> Msg | None:
        """Take message ``msg_id`` out wherever it is (Basic.Get of an old log's ``Take``:
        O(n)); None when not here."""
        if msg_id not in self.ids[self.head:]:
            return None
        msgs = self.messages()
        kept = self.kept
        self.clear()
        found = None
        for m in msgs:
            if m.msg_id == msg_id:
                found = m
            elif m.msg_id in kept:
                self.push_msg(m)
            else:
                self.push(m.msg_id, m.size, m.expires_at)
        return found

    def paged_floor(self, low: int) -> int:
        """The lower of ``low`` and the lowest msg id here whose body is in the log. The ids
        pushed without their ``Msg`` only grow (new Raft indexes, or a snapshot's order): the
        first of them is their lowest; the kept ones are looked at one by one."""
        kept = self.kept
        ids = self.ids
        for i in range(self.head, len(ids)):
            if ids[i] not in kept:
                low = min(low, ids[i])
                break
        for m in kept.values():
            if m.body is None and m.msg_id < low:
                low = m.msg_id
        return low

def msg_image(m: Msg) -> list:
    """A message in a snapshot: [msg id, header (base64), body (base64), expires_at, delivery
    count], or with a null body [..., size] after the delivery count (header "": in the log)."""
    b = m.body
    if b is None:
        return [m.msg_id, base64.b64encode(m.header).decode(), None, m.expires_at,
                m.delivery_count, m.size]
    return [m.msg_id, base64.b64encode(m.header).decode(), base64.b64encode(b).decode(),
            m.expires_at, m.delivery_count]


def msg_from_image(x: list) -> Msg:
    """``msg_image``'s inverse."""
    if x[2] is None:
        return Msg(x[0], base64.b64decode(x[1]), None, x[3], x[4], x[5])
    return Msg(x[0], base64.b64decode(x[1]), base64.b64decode(x[2]), x[3], x[4])


def columns_image(tail: Columns) -> list[Any] | None:
    """A tail in a snapshot: [msg ids, sizes, expiries (-1 none) or null, [kept messages]]
    (null when empty)."""
    if not tail.count:
        return None
    h = tail.head
    exp = tail.expires
    return [tail.ids[h:].tolist(), tail.sizes[h:].tolist(),
            exp[h:].tolist() if exp is not None else None,
            [msg_image(m) for m in tail.kept.values()]]


def tail_images(cols: list[Any] | None) -> list[list]:
    """The messages of a ``columns_image``, in order, as ``msg_image`` lists."""
    if not cols:
        return []
    ids, sizes, exp, kept = cols
    whole = {x[0]: x for x in kept}
    return [whole.get(i) or [i, "", None, exp[k] if exp is not None and exp[k] >= 0 else None,
                             0, sizes[k]] for k, i in enumerate(ids)]


def restore_ready(xs: Any, cols: list[Any] | None) -> tuple[deque[Msg], Columns]:
    """A deque and its tail from a snapshot (the invariant restored: the deque is empty only
    when the tail is)."""
    q: deque[Msg] = deque(msg_from_image(x) for x in xs)
    tail = Columns()
    if cols:
        ids, sizes, exp, kept = cols
        whole = {x[0]: msg_from_image(x) for x in kept}
        for k, i in enumerate(ids):
            m = whole.get(i)
            if m is not None:
                tail.push_msg(m)
            else:
                tail.push(i, sizes[k], exp[k] if exp is not None and exp[k] >= 0 else None)
        if not q:
            q.append(tail.pop())
    return q, tail
