"""One broker's part in one quorum queue's Raft group: a replica (``RaftNode`` + ``QuorumMachine``)
and the ``Outbox`` of the commands this broker sends to the group. Pure: inputs in, actions out.

Owns: routing commands to the leader (proposed here when this replica leads, else forwarded to
the leader this replica knows; re-sent to a new leader, after a gap, and after ``RESEND_MS``
without progress -- idempotent thanks to the machine's per-origin seqs), applying committed
entries to the machine and reporting this origin's progress (``applied``: the publisher-confirm
counter), the leader's duties (Down for members that left the view, Expire when the head's TTL
passed), delivering to consumers on brokers outside the group (``Ship`` of their deliveries,
re-shipped by a new leader and on their ``Holding`` reports: ``shipping``), the in-sync members
(``in_sync``, told to the others with ``Status``) and snapshots (when the log since the last one
is long compared to the live state, so the cost per entry stays bounded: paper §7).
Must not know: sockets, files, the broker core, clocks.

The driver runs what every method returns, in order: the Raft actions of ``cluster.raft`` plus
``Forward(to, envelopes)`` (send these entries to member ``to``, which proposes them when it
leads or passes them on once to its leader), ``Notify``, ``Status`` and, for consumers outside
the group, ``shipping.Ship`` / ``shipping.Holding`` (a report passed on once to the leader).
``apply`` is called by the driver when it reaches an ``Apply`` action (after every earlier action
of the list ran) and returns the effects for the queue object and more actions.
Sources: Raft paper §5.3, §7, §8; RabbitMQ "Quorum Queues".
``Forward``, ``Status``, ``to_leader`` and ``RESEND_MS`` are ``cluster.raftgroup``'s (shared with
the stream and metadata groups), re-exported here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from cluster.raft import actions as ra
from cluster.raft import fifo as f
from cluster.raft.messages import Entry, EntryKind
from cluster.raft.node import RaftNode
from cluster.raftgroup import RESEND_MS, Forward, RaftGroup, Status, to_leader

from .machine import (
    Applied,
    Cancelled,
    Effect,
    Gap,
    QuorumMachine,
    consumer_origin,
    down_envelope,
    envelope,
    origin_member,
)
from .members import (
    ADD,
    CHANGE_IN_PROGRESS,
    NO_LEADER,
    TRANSFER,
    MembersNotice,
    encode_change,
    encode_notice,
)
from .outbox import Outbox
from .shipping import Holding, Ship, decode_holding, encode_ship, missing

__all__ = ["QuorumGroup", "to_leader", "Forward", "Notify", "Ship", "Holding", "Status", "Change", "Members",
           "Action",
           "RESEND_MS", "DOWN_RETRY_MS", "SNAPSHOT_MIN_ENTRIES", "STATUS_MS", "encode_status",
           "decode_status"]

#: The leader proposes Down for a member out of the view at most this often (ms).
DOWN_RETRY_MS = 1000
#: The leader re-checks which members are in sync this often, and tells the others when that
#: changed (else every ``STATUS_REPEAT`` rounds) (ms).
STATUS_MS = 1000
STATUS_REPEAT = 5
#: A snapshot is taken once this many entries, and twice the live messages, were applied since
#: the last one.
SNAPSHOT_MIN_ENTRIES = 8192


@dataclass(frozen=True, slots=True)
class Notify:
    """Tell member ``to`` (outside the group: no replica) that the commands of its ``origin``
    are applied up to ``applied``; ``resend``: a gap followed, re-send the rest."""

    to: str
    origin: str
    applied: int
    resend: bool


@dataclass(frozen=True, slots=True)
class Change:
    """Pass a change request (``members.encode_change``) to member ``to``, the leader."""

    to: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class Members:
    """Tell broker ``to`` (any broker of the cluster view) the group's configuration:
    ``payload`` is ``members.encode_notice``."""

    to: str
    payload: bytes


_TERM = struct.Struct(">Q")


def encode_status(term: int, in_sync: Iterable[str]) -> bytes:
    """A ``Status`` payload: ``term`` u64, then the in-sync members, comma-separated utf-8."""
    return _TERM.pack(term) + ",".join(in_sync).encode()


def decode_status(payload: bytes) -> tuple[int, tuple[str, ...]]:
    """(term, in-sync members) of a ``Status`` payload. Raises ``ValueError`` when malformed."""
    try:
        (term,) = _TERM.unpack_from(payload)
        names = bytes(payload[_TERM.size:]).decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a status payload: {exc}") from exc
    return term, tuple(n for n in names.split(",") if n)


Action = ra.Action | Forward | Notify | Ship | Holding | Status | Change | Members


class QuorumGroup(RaftGroup):
    """Member ``me`` (origin ``origin``) of a group whose replica is ``node`` with state machine
    ``machine``; ``outbox``: this broker's commands so far (a broker joining the group keeps the
    one it used from outside), default a new one. Routing, the queries (``leader``,
    ``is_leader``, ``members``, ``applied``) and the Raft inputs are ``cluster.raftgroup``'s."""

    def __init__(self, me: str, origin: str, node: RaftNode, machine: QuorumMachine,
                 outbox: Outbox | None = None) -> None:
        super().__init__(me, origin, node, outbox)
        self.machine = machine
        if node.snapshot.index:
            machine.restore(node.snapshot.data)
        self._down_sent: dict[str, int] = {}
        self._expire_sent = 0
        self._shipped_term = 0   # the term whose leader re-shipped to consumers outside the group
        self._remote_of: dict[str, str] = {}   # consumer id -> its member ("" in the group)
        self._in_sync: tuple[str, ...] = ()
        self._in_sync_term = 0   # the term whose leader computed or told ``_in_sync``
        self._sync_mark = 0      # the commit index at the last status round
        self._sync_ms = -STATUS_MS
        self._status_rounds = 0
        self._notice: MembersNotice | None = None   # the last one this leader sent
        self._noticed: set[str] = set()             # ... and to whom
        #: The last measured commit latency (ms; 0 before one): on the leader, from proposing
        #: an entry to applying it, one entry at a time (Ra's ``commit_latency``; Prometheus'
        #: rabbitmq_raft_entry_commit_latency_seconds). ``_probe``: (index, proposed at ms).
        self.commit_latency_ms = 0
        self._probe = (0, 0)
        #: A snapshot is taken once this many entries (and twice the live messages) were
        #: applied since the last one (``SNAPSHOT_MIN_ENTRIES``; fewer in tests).
        self.snapshot_min_entries = SNAPSHOT_MIN_ENTRIES

    # ------------------------------------------------------------------ queries
    @property
    def in_sync(self) -> tuple[str, ...] | None:
        """The members whose log holds every entry the leader had committed one status round
        (``STATUS_MS``) earlier (Raft match index >= that commit index; the leader itself):
        computed here when this replica leads, else as the current term's leader last told
        (``status``); None when not known (no leader, or not told yet in this term)."""
        if self._in_sync_term != self.node.term or (not self.node.is_leader and
                                                    self.node.leader is None):
            return None
        return self._in_sync

    def status(self, frm: str, payload: bytes) -> None:
        """A ``Status`` from member ``frm``: kept when ``frm`` is the leader of our term."""
        try:
            term, names = decode_status(payload)
        except ValueError:
            return
        if term == self.node.term and frm == self.node.leader:
            self._in_sync, self._in_sync_term = names, term

    def _status_round(self, now_ms: int) -> list[Action]:
        node = self.node
        mark, self._sync_mark, self._sync_ms = self._sync_mark, node.commit_index, now_ms
        progress = node.progress
        sync = tuple(m for m in node.members if m == self.me or
                     (m in progress and progress[m].match_index >= mark))
        changed = sync != self._in_sync or self._in_sync_term != node.term
        self._in_sync, self._in_sync_term = sync, node.term
        self._status_rounds += 1
        if not changed and self._status_rounds % STATUS_REPEAT:
            return []
        payload = encode_status(node.term, sync)
        return [Status(m, payload) for m in node.members if m != self.me]

    # ------------------------------------------------------------------ commands of this broker
    def submit(self, command: f.Command) -> int:
        """Queue ``command`` for the group; returns its seq. Sent by the next ``flush``."""
        return self.outbox.add(f.encode(command))

    # ------------------------------------------------------------------ inputs
    def _proposed(self) -> None:
        """Time the entry just proposed, unless one is being timed (``commit_latency_ms``)."""
        if not self._probe[0]:
            self._probe = (self.node.log.last_index, self.node.now)

    def holding(self, frm: str, payload: bytes) -> list[Action]:
        """A ``shipping.Holding`` report of a broker outside the group (from it, or passed on
        by member ``frm``): the leader answers with a ``Ship`` of what is missing there once it
        applied its term's first entry (before, the report is dropped: it comes again); another
        member passes it once to the leader it knows."""
        node = self.node
        if node.is_leader:
            if self.machine_index < node.term_start_index:
                return []
            try:
                origin, held = decode_holding(payload)
            except ValueError:
                return []
            deliveries, cancelled = missing(self.machine.fifo, held)
            return [Ship(origin_member(origin)[0], encode_ship(deliveries, cancelled))]
        leader = node.leader
        if leader is not None and leader not in (self.me, frm):
            return [Holding(leader, payload)]
        return []

    def _remote(self, consumer: str, members: tuple[str, ...] | None = None) -> str:
        """The broker of ``consumer`` when it is outside the group of ``members`` (default: the
        configuration in force), else ""."""
        member = self._remote_of.get(consumer)
        if member is None:
            if len(self._remote_of) > 4096:
                self._remote_of.clear()
            member = self._remote_of[consumer] = origin_member(consumer_origin(consumer))[0]
        if member == self.me or member in (self.node.members if members is None else members):
            return ""
        return member

    def change(self, op: int, node_id: str, frm: str | None = None
               ) -> tuple[str | None, list[Action]]:
        """A change request (``members.ADD`` / ``DELETE`` of ``node_id``; checked before with
        ``members.check_change``; or ``TRANSFER``: the leadership to member ``node_id``, Raft
        thesis §3.10, ``RaftNode.transfer_leadership``): started here when this replica leads (Raft thesis §4.1,
        ``RaftNode.add_member`` / ``remove_member``), else passed to the leader we know (once:
        not back to ``frm``, the broker that passed it). Returns (None, actions) when started,
        passed on or not needed (already done, or the same add already catching up);
        (``CHANGE_IN_PROGRESS``, []) when the leader cannot take it now (another change, a
        transfer, or its term's first entry not committed yet); (``NO_LEADER``, []) when no
        leader is known."""
        node = self.node
        if not node.is_leader:
            leader = node.leader
            if leader is None or leader == self.me or leader == frm:
                return NO_LEADER, []
            return None, [Change(leader, encode_change(op, node_id))]
        if op == TRANSFER:   # to a voting member other than us (else nothing to do)
            if node_id == self.me or node_id not in node.members:
                return None, []
            return None, list(node.transfer_leadership(node_id))
        if op == ADD:
            if node_id in node.members or node_id in node.learners:
                return None, []
            ok, actions = node.add_member(node_id)
        else:
            if node_id not in node.members:
                return None, []
            ok, actions = node.remove_member(node_id)
        return (None if ok else CHANGE_IN_PROGRESS), list(actions)

    def _notices(self, view: set[str] | None) -> list[Action]:
        """The leader's members notices: to every broker of ``view``, the members and learners
        when the committed configuration or the learners changed, and to brokers it has not
        told yet (a broker that joined the view); every ``STATUS_REPEAT`` status rounds to
        all (a lost notice is repaired)."""
        node = self.node
        index, members = node.committed_config
        notice = MembersNotice(node.term, index, members, node.learners, node.members)
        targets = (set(view or ()) | set(members) | set(node.members) | set(notice.learners))
        targets.discard(self.me)
        if notice != self._notice:
            self._notice, self._noticed = notice, set()
        new = targets - self._noticed
        if not new:
            return []
        self._noticed |= new
        payload = encode_notice(replace(notice, commit=node.commit_index))
        return [Members(to, payload) for to in sorted(new)]

    def leader_duties(self, now_ms: int, wall_ms: int, view: set[str] | None) -> list[Action]:
        """On the leader: Down for members out of ``view`` that still have consumers (None: the
        view is not known yet, as on a broker that restarted and has not rejoined: no Down);
        Expire once the head's TTL passed (``wall_ms``: the clock commands carry); once per
        term, when its first entry is applied, a ``Ship`` of everything checked out to each
        broker outside the group that has consumers (the old leader's ships may be lost);
        every ``STATUS_MS`` the in-sync members (``in_sync``; a ``Status`` to the others when
        they changed)."""
        node = self.node
        if not node.is_leader or node.commit_index < node.term_start_index:
            return []
        out: list[Action] = []
        if self._shipped_term != node.term and self.machine_index >= node.term_start_index:
            self._shipped_term = node.term
            out += self._ship_all()
        if now_ms - self._sync_ms >= STATUS_MS:
            out += self._status_round(now_ms)
            if self._status_rounds % STATUS_REPEAT == 0:
                self._noticed = set()
        out += self._notices(view)
        proposals = []
        members = {c.rpartition("/")[0].rpartition("#")[0] for c in self.machine.fifo.consumers}
        known = view if view is not None else members   # unknown view: nobody is Down
        for m in members:
            if m not in known and m != self.me and \
                    now_ms - self._down_sent.get(m, -DOWN_RETRY_MS) >= DOWN_RETRY_MS:
                self._down_sent[m] = now_ms
                proposals.append(down_envelope(m))
        head = self.machine.head_expiry()
        if head is not None and head <= wall_ms and now_ms - self._expire_sent >= 100:
            self._expire_sent = now_ms
            proposals.append(envelope("", 0, f.encode(f.Expire(wall_ms))))
        if proposals:
            _results, actions = node.propose_batch(proposals)
            out += actions
        return out

    def _ship_all(self) -> list[Action]:
        """A ``Ship`` per broker outside the group of everything checked out to its consumers
        (an empty one too: it learns who leads)."""
        per: dict[str, list[f.Deliver]] = {}
        fifo = self.machine.fifo
        for cid, c in fifo.consumers.items():
            member = self._remote(cid)
            if member:
                per.setdefault(member, []).extend(
                    f.Deliver(cid, m.msg_id, m.header, fifo.body(m), m.delivery_count)
                    for m in sorted(c.out.values(), key=lambda m: m.msg_id))
        return [Ship(member, encode_ship(ds)) for member, ds in per.items()]

    # ------------------------------------------------------------------ applying
    def apply(self, entries: Sequence[Entry], now_ms: int) -> tuple[list[Effect], list[Action]]:
        """Apply committed ``entries``: (effects for the queue object, actions to run). Dead
        letters are kept only on a leader applying entries of its own term (one member acts on
        them: at most once, as RabbitMQ's default dead-lettering of quorum queues)."""
        machine = self.machine
        node = self.node
        acting = node.is_leader
        start = node.term_start_index
        effects: list[Effect] = []
        more: list[Action] = []
        mine = self.origin
        gap_from = 0
        remote: dict[str, tuple[int, bool]] = {}   # origins outside the group: (applied, gap)
        ships: dict[str, tuple[list[f.Deliver], list[str]]] = {}   # their consumers' share
        # who is in the group at each entry: a broker's consumers are served by its own replica
        # from the entry that made it a member on, by the leader's ships before (and after the
        # entry that removed it), so that each delivery is made exactly once
        members = node.log.members_at(entries[0].index) if entries else node.members
        for e in entries:
            self.machine_index = e.index
            if e.kind is EntryKind.CONFIG:
                members = node.log.members_at(e.index)
            if e.kind is not EntryKind.COMMAND:
                continue
            for eff in machine.apply(e.index, e.data):
                if isinstance(eff, Applied):
                    if eff.origin == mine:
                        self.outbox.applied_up_to(eff.seq)
                    elif acting and origin_member(eff.origin)[0] not in members:
                        remote[eff.origin] = (eff.seq, False)
                    continue
                if isinstance(eff, Gap):
                    if eff.origin == mine and not gap_from:
                        gap_from = eff.next
                    elif acting and origin_member(eff.origin)[0] not in members:
                        remote[eff.origin] = (eff.next - 1, True)
                    continue
                if isinstance(eff, f.DeadLetter) and not (acting and e.index >= start):
                    continue
                if isinstance(eff, f.Deliver) and not acting and \
                        self.me not in members and consumer_origin(eff.consumer) == mine:
                    continue   # not a member at this entry: the leader ships it to us
                if acting and isinstance(eff, f.Deliver | Cancelled):
                    member = self._remote(eff.consumer, members)
                    if member:
                        ship = ships.get(member)
                        if ship is None:
                            ship = ships[member] = ([], [])
                        if isinstance(eff, f.Deliver):
                            ship[0].append(eff)
                        else:
                            ship[1].append(eff.consumer)
                        continue
                effects.append(eff)
        probe, at = self._probe
        if probe and self.machine_index >= probe:
            self.commit_latency_ms = max(0, now_ms - at)
            self._probe = (0, 0)
        if gap_from:
            more += self.resend(now_ms)   # everything not applied, from the gap on
        # ships go before the Notify: a broker sees a delivery before the notice of its settle
        for member, (deliveries, cancelled) in ships.items():
            more.append(Ship(member, encode_ship(deliveries, cancelled)))
        for origin, (applied, gap) in remote.items():
            more.append(Notify(origin_member(origin)[0], origin, applied, gap))
        live = machine.live_messages()
        if self.machine_index - node.snapshot.index >= max(self.snapshot_min_entries, 2 * live):
            more += node.snapshot_taken(self.machine_index, machine.snapshot())
        return effects, more

    def restore(self, snapshot_index: int, data: bytes) -> None:
        """Run a ``Restore`` action: the machine becomes the leader's snapshot."""
        self.machine.restore(data)
        self.machine_index = snapshot_index
