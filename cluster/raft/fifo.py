"""The replicated queue's state machine (``rabbit_fifo``-like): commands in, effects out, pure.

Owns: what a quorum queue holds and decides once a command is committed: ready messages in order,
messages checked out by consumers, delivery counts, the dedup window, max-length/overflow, TTL,
delivery-limit, single-active-consumer. Every replica applies the same commands in the same order
and reaches the same state; only the leader's broker *acts* on the effects (deliver, confirm,
dead-letter). Time comes only inside commands (``now_ms``, stamped by the leader when proposing),
so replay is deterministic. Must not know: Raft, AMQP frames (headers and bodies are opaque bytes),
sockets, clocks.

Its commands and effects, and their encoding, are in ``cluster.raft.fifo_commands`` (re-exported
here): Enqueue, Checkout/Cancel, Settle/Return/Discard, Expire, Purge, Dequeue (Basic.Get), Take,
DlxSettle in; Deliver, Confirm, Rejected, DeadLetter, Purged, Dequeued out.

RabbitMQ 4.0 semantics (issue 25): two priorities, high (priority property > 4) favoured 2:1 over
normal; requeued messages first, in the order they came back, unless there is no delivery limit
(then a client's requeue goes to the back); the delivery limit counts every return (a consumer's
cancel too), > limit dead-letters "delivery_limit"; TTL the lower of x-message-ttl and the
message's own expiration, checked at the head only; at-least-once dead letters held until settled
and counted against max-length(-bytes) (``FifoQueue``'s docstring).

Sources: RabbitMQ "Quorum Queues" 4.0 (priorities, poison message handling, repeated requeues,
at-least-once dead-lettering), "Time-To-Live and Expiration"; ``rabbit_fifo`` / ``rabbit_fifo_q``
4.0 (commands and effects, ``take_next_msg``, the 2:1 weight, ``return_one``, ``is_over_limit``,
``update_expiry_header``); RabbitMQ message deduplication plugin (window).

Speed (issue 12): the values built for every message (the queue's ``_Msg``, and the commands and
effects of ``fifo_commands``) are slotted dataclasses with an explicit
``__init__`` and not frozen: mypyc compiles an explicit ``__init__`` to C, while a frozen
dataclass's generated one runs as Python (``object.__setattr__`` per field: about 18x the cost per
object, measured). Treat them as immutable all the same.
"""

from __future__ import annotations

import base64
import json
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .fifo_commands import (
    Cancel,
    Checkout,
    Command,
    Confirm,
    DeadLetter,
    Deliver,
    Dequeue,
    Dequeued,
    Discard,
    DlxSettle,
    Effect,
    Enqueue,
    Expire,
    Purge,
    Purged,
    Reader,
    Rejected,
    Return,
    Settle,
    Take,
    decode,
    encode,
)
from .fifo_ready import (
    Columns,
    columns_image,
    msg_from_image,
    msg_image,
    restore_ready,
    tail_images,
)
from .fifo_ready import Msg as _Msg

__all__ = [
    "FifoConfig", "FifoQueue", "Enqueue", "Checkout", "Cancel", "Settle", "Return", "Discard",
    "Expire", "Purge", "Take", "Dequeue", "DlxSettle", "Command", "Deliver", "Confirm", "Rejected",
    "DeadLetter", "Purged", "Dequeued", "Effect", "encode", "decode", "Reader",
    "SNAPSHOT_VERSION", "PAGE_BYTES",
]


@dataclass(frozen=True, slots=True)
class FifoConfig:
    """Queue arguments. ``max_length`` / ``max_length_bytes`` (bytes of bodies): None = unbounded;
    ``overflow``: "drop-head" (dead-letter the oldest) or "reject-publish"; ``delivery_limit``:
    a message returned more often is dead-lettered (None: no limit, and a requeued message goes
    to the back of the queue, as RabbitMQ 4.0 with -1); ``message_ttl_ms``;
    ``single_active_consumer``; ``dedup_window``: how many dedup keys are remembered (0: no
    deduplication); ``dlx_at_least_once``: dead letters stay in the queue until ``DlxSettle``."""

    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    delivery_limit: int | None = None
    message_ttl_ms: int | None = None
    single_active_consumer: bool = False
    dedup_window: int = 0
    dlx_at_least_once: bool = False


@dataclass(slots=True)
class _Consumer:
    prefetch: int
    out: dict[int, _Msg] = field(default_factory=dict)


#: Snapshot format: 1 had one ``ready`` list; 2 adds ``high``, ``returns``, ``pcount`` and ``dlx``
#: (a version-1 snapshot loads as all-normal, nothing returned, no dead letters held); 3: a paged
#: message's body is null, its size follows its delivery count (its body is in the Raft log);
#: 4: a paged message's header may be "" too (read back from the log with its body), and the
#: ready backlog behind the heads is in ``tail`` / ``htail`` as columns (``columns_image``).
SNAPSHOT_VERSION = 4
#: Paged mode (``FifoQueue.read`` set): a published body stays in memory only while the ready
#: messages hold at most this many bytes (a small read cache at the head of a short queue);
#: beyond, the queue keeps its record and reads the body back from the Raft log on delivery.
PAGE_BYTES = 1024 * 1024
#: rabbit_fifo_q's weight: after two high-priority messages, one normal one (when older).
_WEIGHT = 2


class FifoQueue:
    """The state machine: ``apply(index, command bytes) -> effects``; ``snapshot()`` /
    ``restore(data)`` for Raft snapshots (paper §7). Deterministic: the same commands give the
    same state and effects on every replica.

    Ready messages are in three deques, taken in this order (RabbitMQ 4.0's ``rabbit_fifo``):
    ``returns`` (requeued or given back by a cancelled consumer, in the order they came back),
    then ``high`` and ``ready`` (normal) weighted 2:1 -- the counter ``pcount`` runs 0, 1, 2 over
    every message taken from them; at 2 the older (lower msg id) of the two heads goes, else a
    high one when there is one (``rabbit_fifo_q``). ``dlx``: at-least-once dead letters (msg id
    -> (reason, message)) until their ``DlxSettle``.

    Paging (issue 25, RabbitMQ 3.10+'s quorum queues: "only metadata in memory", bodies read
    back from the log segments on delivery): with ``read`` set (msg id -> (header, body) bytes
    of the Enqueue at that Raft index; raises ``LookupError`` when the log no longer holds it),
    a message published while the ready bytes exceed ``PAGE_BYTES`` keeps neither: behind the
    first message of its priority it is only integers in ``tail`` / ``high_tail``
    (``fifo_ready.Columns``: Raft index, size, expiry -- 12 to 20 bytes), and a ``_Msg`` with
    header b"" and body None when it reaches the head of ``ready`` / ``high``; ``load(m)`` reads
    both back when it is delivered or dead-lettered, ``hydrate`` for a follower's snapshot.
    Invariant: ``ready`` (``high``) is empty only when ``tail`` (``high_tail``) is, so the
    deques' heads are the queue's heads. Messages checked out, returned or held as dead letters
    are objects with their header (bounded by the consumers' prefetch); their bodies are read
    again with ``body(m)``. Without ``read`` (the simulator, benchmarks of the machine) every
    body stays in memory and the tails stay empty, as before."""

    def __init__(self, config: FifoConfig) -> None:
        self.config = config
        self.ready: deque[_Msg] = deque()
        self.high: deque[_Msg] = deque()
        self.returns: deque[_Msg] = deque()
        #: Paged ready messages behind ``ready`` / ``high``'s (see the class docstring).
        self.tail = Columns()
        self.high_tail = Columns()
        self.ready_bytes = 0
        self.pcount = 0
        self.dlx: OrderedDict[int, tuple[str, _Msg]] = OrderedDict()
        self.dlx_bytes = 0
        self.consumers: OrderedDict[str, _Consumer] = OrderedDict()
        self.dedup: OrderedDict[str, int] = OrderedDict()
        self._rr = 0
        #: Whether ``Confirm`` effects are made (``cluster.quorum.machine`` has its own).
        self.confirms = True
        self._active: list[str] | None = None   # consumers that may get messages; None: stale
        #: Paged mode: msg id -> (header, body) (see the class docstring); None: bodies stay in
        #: memory.
        self.read: Callable[[int], tuple[bytes, bytes]] | None = None
        #: Paged mode: bodies stay in memory while the ready bytes are at most this many.
        self.page_bytes = PAGE_BYTES

    def body(self, m: _Msg) -> bytes:
        """The body of ``m``: in memory, or read back from the log (paged mode). Raises
        ``LookupError`` when paged out and the log no longer holds it."""
        b = m.body
        if b is not None:
            return b
        read = self.read
        if read is None:
            raise LookupError(f"message {m.msg_id} has no body in memory and no log to read")
        return read(m.msg_id)[1]

    def load(self, m: _Msg) -> bytes:
        """``body(m)``, and ``m``'s header read back too when it has none in memory (a paged
        message from a tail). Raises ``LookupError`` as ``body``."""
        b = m.body
        if b is not None:
            return b
        read = self.read
        if m.header or read is None:
            return self.body(m)
        header, b = read(m.msg_id)
        m.header = header
        return b

    # ------------------------------------------------------------------ applying
    def apply(self, index: int, raw: bytes) -> list[Effect]:
        """Apply the committed command ``raw`` at Raft ``index``; returns its effects."""
        return self.apply_command(index, decode(raw))

    def apply_command(self, index: int, cmd: Command) -> list[Effect]:
        """``apply`` for a decoded command."""
        out: list[Effect] = []
        if isinstance(cmd, Enqueue):
            self._enqueue(index, cmd, out)
        elif isinstance(cmd, Checkout):
            self._active = None
            known = self.consumers.get(cmd.consumer)
            if known is None:
                self.consumers[cmd.consumer] = _Consumer(cmd.prefetch)
            else:
                known.prefetch = cmd.prefetch
            self._expire(cmd.now_ms, out)
        elif isinstance(cmd, Cancel):
            self._active = None
            c = self.consumers.pop(cmd.consumer, None)
            if c is not None:
                self._give_back(sorted(c.out.values(), key=lambda m: m.msg_id), out)
        elif isinstance(cmd, Settle | Return | Discard):
            c = self.consumers.get(cmd.consumer)
            taken = [m for i in cmd.msg_ids if c is not None
                     for m in [c.out.pop(i, None)] if m is not None]
            if isinstance(cmd, Return):   # in the order the client returned them
                self._give_back(taken, out, requeue=True)
            elif isinstance(cmd, Discard):
                for m in taken:
                    self._dead_letter("rejected", m, out)
        elif isinstance(cmd, Expire):
            self._expire(cmd.now_ms, out)
        elif isinstance(cmd, Dequeue):
            self._dequeue(cmd, out)
        elif isinstance(cmd, Take):
            self._take(cmd)
        elif isinstance(cmd, Purge):
            out.append(Purged(self.message_count()))
            self.ready.clear()
            self.high.clear()
            self.returns.clear()
            self.tail.clear()
            self.high_tail.clear()
            self.ready_bytes = 0
        elif isinstance(cmd, DlxSettle):
            for i in cmd.msg_ids:
                held = self.dlx.pop(i, None)
                if held is not None:
                    self.dlx_bytes -= held[1].size
        self._deliver(out)
        return out

    def _enqueue(self, index: int, cmd: Enqueue, out: list[Effect]) -> None:
        cfg = self.config
        if self.ready or self.high or self.returns:   # (an empty queue has nothing to expire)
            self._expire(cmd.now_ms, out)
        if cmd.dedup_key is not None and cfg.dedup_window:
            if cmd.dedup_key in self.dedup:
                if self.confirms:   # a duplicate: accepted, not kept
                    out.append(Confirm(cmd.publisher, cmd.seq))
                return
            self.dedup[cmd.dedup_key] = index
            while len(self.dedup) > cfg.dedup_window:
                self.dedup.popitem(last=False)
        if cfg.max_length is not None or cfg.max_length_bytes is not None:
            held = len(self.dlx)
            full = ((cfg.max_length is not None
                     and self.message_count() + held >= cfg.max_length)
                    or (cfg.max_length_bytes is not None and self.ready_bytes + self.dlx_bytes
                        + len(cmd.body) > cfg.max_length_bytes))
            if full and cfg.overflow != "drop-head":
                out.append(Rejected(cmd.publisher, cmd.seq))
                return
        ttl = cfg.message_ttl_ms
        own = cmd.ttl_ms
        if own >= 0 and (ttl is None or own < ttl):   # the lower of the two (rabbit_fifo: min)
            ttl = own
        # TTL 0: expires unless taken within the same millisecond (rabbit_fifo)
        expires = None if ttl is None else cmd.now_ms + (ttl or 1)
        size = len(cmd.body)
        q = self.high if cmd.high else self.ready
        if not q:   # (its tail is empty too) the head: an object, its body paged or not
            q.append(_Msg(index, cmd.header, cmd.body if self.read is None or
                          self.ready_bytes + size <= self.page_bytes else None, expires, 0, size))
        elif self.read is None:
            q.append(_Msg(index, cmd.header, cmd.body, expires, 0, size))
        else:
            tail = self.high_tail if cmd.high else self.tail
            if tail.count or self.ready_bytes + size > self.page_bytes:
                tail.push(index, size, expires)   # paged, or in order behind the paged ones
            else:
                q.append(_Msg(index, cmd.header, cmd.body, expires, 0, size))
        self.ready_bytes += size
        if cfg.max_length is not None or cfg.max_length_bytes is not None:
            while self._over_limit():
                self._drop_head("maxlen", out)
        if self.confirms:
            out.append(Confirm(cmd.publisher, cmd.seq))

    def _over_limit(self) -> bool:
        cfg = self.config
        if self.message_count() == 0:
            return False
        return ((cfg.max_length is not None and self.message_count() > cfg.max_length)
                or (cfg.max_length_bytes is not None and self.ready_bytes > cfg.max_length_bytes))

    # ------------------------------------------------------------------ the ready messages
    def _pop(self) -> _Msg | None:
        """Take the next ready message (returns, then high/normal 2:1); None when none."""
        if self.returns:
            m = self.returns.popleft()
        else:
            c = self.pcount
            hi = self.high
            no = self.ready
            if hi:
                if c == _WEIGHT and no and no[0].msg_id < hi[0].msg_id:
                    m = no.popleft()
                    if not no and self.tail.count:
                        no.append(self.tail.pop())
                else:
                    m = hi.popleft()
                    if not hi and self.high_tail.count:
                        hi.append(self.high_tail.pop())
            elif no:
                m = no.popleft()
                if not no and self.tail.count:
                    no.append(self.tail.pop())
            else:
                return None
            self.pcount = 0 if c == _WEIGHT else c + 1
        self.ready_bytes -= m.size
        return m

    def head(self) -> _Msg | None:
        """The message ``_pop`` would take next (None: no ready message)."""
        if self.returns:
            return self.returns[0]
        hi = self.high
        no = self.ready
        if hi:
            if self.pcount == _WEIGHT and no and no[0].msg_id < hi[0].msg_id:
                return no[0]
            return hi[0]
        return no[0] if no else None

    def ready_messages(self) -> list[_Msg]:
        """Every ready message: returns, high, normal (not in delivery order across the two
        priorities; those of the tails as new objects, header b"" and body None)."""
        return [*self.returns, *self.high, *self.high_tail.messages(), *self.ready,
                *self.tail.messages()]

    def _dequeue(self, cmd: Dequeue, out: list[Effect]) -> None:
        self._expire(cmd.now_ms, out)
        m = self._pop()
        if m is None:
            out.append(Dequeued(cmd.consumer, 0, b"", b"", 0, 0))
            return
        body = self.load(m)
        if not cmd.settle:
            self._getter(cmd.consumer).out[m.msg_id] = m
        out.append(Dequeued(cmd.consumer, m.msg_id, m.header, body, m.delivery_count,
                            self.message_count()))

    def _take(self, cmd: Take) -> None:
        for ready, tail in ((self.returns, None), (self.high, self.high_tail),
                            (self.ready, self.tail)):
            found = None
            for i, m in enumerate(ready):
                if m.msg_id == cmd.msg_id:
                    del ready[i]
                    found = m
                    break
            if found is None and tail is not None:
                found = tail.remove(cmd.msg_id)
            if found is not None:
                if tail is not None and not ready and tail.count:
                    ready.append(tail.pop())
                self.ready_bytes -= found.size
                self.load(found)   # its header, for the consumer's deliveries
                self._getter(cmd.consumer).out[found.msg_id] = found
                return

    def _getter(self, name: str) -> _Consumer:
        """The Basic.Get consumer ``name``, created suspended (it never gets deliveries)."""
        c = self.consumers.get(name)
        if c is None:
            c = self.consumers[name] = _Consumer(-1)
            self._active = None
        return c

    def _dead_letter(self, reason: str, m: _Msg, out: list[Effect]) -> None:
        """``m`` left the queue for ``reason``: at most once, a ``DeadLetter`` and gone; at least
        once, held in ``dlx`` (and its ``DeadLetter`` names it) until its ``DlxSettle``."""
        body = self.load(m)
        if self.config.dlx_at_least_once:
            self.dlx[m.msg_id] = (reason, m)
            self.dlx_bytes += m.size
            out.append(DeadLetter(reason, m.header, body, m.delivery_count, m.msg_id))
        else:
            out.append(DeadLetter(reason, m.header, body, m.delivery_count))

    def _drop_head(self, reason: str, out: list[Effect]) -> None:
        m = self._pop()
        if m is not None:
            self._dead_letter(reason, m, out)

    def _expire(self, now_ms: int, out: list[Effect]) -> None:
        """Expire from the head only (RabbitMQ: a message expires once it reaches the head)."""
        while True:
            m = self.head()
            if m is None or m.expires_at is None or m.expires_at > now_ms:
                return
            self._drop_head("expired", out)

    def _give_back(self, msgs: list[_Msg], out: list[Effect], requeue: bool = False) -> None:
        """Messages a consumer gave back, counted (``delivery_count`` + 1); over the delivery
        limit they are dead-lettered ("delivery_limit"). With a limit, they wait in ``returns``
        (taken first, in the order they came back); without one, a client's requeue
        (``requeue``) puts them at the back of the normal queue (RabbitMQ 4.0), while a
        cancelled consumer's still go to ``returns``."""
        limit = self.config.delivery_limit
        to_ready = requeue and limit is None
        back = self.ready if to_ready else self.returns
        tail = self.tail
        for m in msgs:
            m.delivery_count += 1
            if limit is not None and m.delivery_count > limit:
                self._dead_letter("delivery_limit", m, out)
            else:
                if to_ready and tail.count:   # behind the paged ones, kept whole
                    tail.push_msg(m)
                else:
                    back.append(m)
                self.ready_bytes += m.size

    def _deliver(self, out: list[Effect]) -> None:
        """Hand ready messages to consumers with credit: round-robin, or only to the first
        consumer under single-active-consumer."""
        if not self.consumers or (not self.ready and not self.high and not self.returns):
            return   # (the tails are empty when their deques are)
        names = self._active
        if names is None:   # recomputed only when consumers came, went or changed credit
            names = list(self.consumers)
            if self.config.single_active_consumer:
                names = names[:1]
            names = self._active = [n for n in names if self.consumers[n].prefetch >= 0]
        if not names:
            return
        idle = 0
        ready = self.ready
        while idle < len(names):
            name = names[self._rr % len(names)]
            self._rr += 1
            c = self.consumers[name]
            if c.prefetch and len(c.out) >= c.prefetch:
                idle += 1
                continue
            idle = 0
            if ready and not self.returns and not self.high:   # the common case, inline
                m = ready.popleft()
                self.ready_bytes -= m.size
                pc = self.pcount
                self.pcount = 0 if pc == _WEIGHT else pc + 1
            else:
                got = self._pop()
                if got is None:
                    break
                m = got
            c.out[m.msg_id] = m
            b = m.body
            if b is None:
                b = self.load(m)
            out.append(Deliver(name, m.msg_id, m.header, b, m.delivery_count))
            if not ready:
                if self.tail.count:   # the next of the tail to the head (see the invariant)
                    ready.append(self.tail.pop())
                elif not self.returns and not self.high:
                    break

    # ------------------------------------------------------------------ queries, snapshots
    def message_count(self) -> int:
        """Ready messages (Queue.DeclareOk's message_count)."""
        return (len(self.ready) + len(self.high) + len(self.returns) + self.tail.count
                + self.high_tail.count)

    def paged_floor(self, default: int) -> int:
        """The lowest msg id of a live message (ready, checked out, held dead letter) whose body
        is paged out (read from the log), ``default`` when none is: the Raft log must keep
        every entry from there on ("the log can be truncated only up to the oldest live
        message", RabbitMQ "Quorum Queues")."""
        low = default
        for q in (self.returns, self.high, self.ready):
            for m in q:
                if m.body is None and m.msg_id < low:
                    low = m.msg_id
        low = self.tail.paged_floor(self.high_tail.paged_floor(low))
        for _r, m in self.dlx.values():
            if m.body is None and m.msg_id < low:
                low = m.msg_id
        for c in self.consumers.values():
            for m in c.out.values():
                if m.body is None and m.msg_id < low:
                    low = m.msg_id
        return low

    def hydrate(self, data: bytes) -> bytes:
        """A ``snapshot()`` with the headers and bodies of its paged messages read back
        (``read``), its tails moved into ``ready`` / ``high``: what a follower that installs it
        needs, having no log of those entries. Raises ``LookupError`` when the log no longer
        holds one."""
        d = json.loads(data)
        read = self.read

        def fill(x: list) -> None:
            if x[2] is None:
                if read is None:
                    raise LookupError(f"message {x[0]} has no body and no log to read")
                header, body = read(x[0])
                if not x[1]:
                    x[1] = base64.b64encode(header).decode()
                x[2] = base64.b64encode(body).decode()
                del x[5:]
        for key, tail in (("ready", "tail"), ("high", "htail")):
            d[key] = d.get(key, []) + tail_images(d.pop(tail, None))
        for key in ("ready", "high", "returns"):
            for x in d[key]:
                fill(x)
        for _reason, x in d.get("dlx", ()):
            fill(x)
        for _n, _p, out in d["consumers"]:
            for x in out:
                fill(x)
        if d.get("v", 1) == 4:   # nothing paged and no tail left: what version 3 reads too
            d["v"] = 3            # (a follower still on the previous version, mid-upgrade)
        return json.dumps(d, separators=(",", ":")).encode()

    def snapshot(self) -> bytes:
        """The whole state as bytes (JSON, bodies base64, a paged body null and its size after
        the delivery count, a paged header ""; the tails as columns, ``columns_image``; format
        ``SNAPSHOT_VERSION``)."""
        return json.dumps({
            "v": SNAPSHOT_VERSION,
            "ready": [msg_image(m) for m in self.ready],
            "high": [msg_image(m) for m in self.high],
            "tail": columns_image(self.tail),
            "htail": columns_image(self.high_tail),
            "returns": [msg_image(m) for m in self.returns],
            "pcount": self.pcount,
            "dlx": [[reason, msg_image(m)] for reason, m in self.dlx.values()],
            "consumers": [[n, c.prefetch, [msg_image(m) for m in c.out.values()]]
                          for n, c in self.consumers.items()],
            "dedup": list(self.dedup.items()), "rr": self._rr,
        }, separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        """Replace the state with a ``snapshot()``'s (version 1 to 4; raises ``ValueError`` for
        a newer version, which this code cannot read). A paged message (null body) is read
        from the log when needed (``read``)."""
        d = json.loads(data)
        version = d.get("v", 1)
        if version > SNAPSHOT_VERSION:
            raise ValueError(f"quorum queue snapshot format {version} is newer than this "
                             f"broker's ({SNAPSHOT_VERSION})")
        self.ready, self.tail = restore_ready(d["ready"], d.get("tail"))
        self.high, self.high_tail = restore_ready(d.get("high", ()), d.get("htail"))
        self.returns = deque(msg_from_image(x) for x in d.get("returns", ()))
        self.ready_bytes = (sum(m.size for m in (*self.returns, *self.high, *self.ready))
                            + sum(self.tail.sizes[self.tail.head:])
                            + sum(self.high_tail.sizes[self.high_tail.head:]))
        self.pcount = int(d.get("pcount", 0))
        self.dlx = OrderedDict()
        for reason, x in d.get("dlx", ()):
            m = msg_from_image(x)
            self.dlx[m.msg_id] = (reason, m)
        self.dlx_bytes = sum(m.size for _r, m in self.dlx.values())
        self.consumers = OrderedDict(
            (n, _Consumer(p, {m.msg_id: m for m in map(msg_from_image, out)}))
            for n, p, out in d["consumers"])
        self.dedup = OrderedDict((k, v) for k, v in d["dedup"])
        self._rr = d["rr"]
        self._active = None

