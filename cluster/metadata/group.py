"""One member's part in the cluster metadata log: the metadata Raft group's replica (``RaftNode`` +
``MetadataMachine``) and the ``Outbox`` of the commands this member proposes. Pure: inputs in,
actions out, as ``cluster.quorum.group`` is for a quorum queue (the same driver runs both:
``amqp_broker.clustering.metadata``).

Owns: routing this member's commands to the leader (proposed here when leading, else forwarded to
the leader this replica knows; re-sent to a new leader, after a gap, and after ``RESEND_MS``
without progress; exactly once thanks to ``sessions``); applying committed entries to the
machine in log order (CONFIG entries become ``MetadataMachine.configure``) and handing the
driver each applied command with its outcome (``Committed``); telling the other members how far
this replica applied (``Status`` with ``encode_applied``: a proposer's ``--sync-replies`` count,
Raft's match index only says stored; returned by ``apply``, or by ``report`` for a driver that
reports once its broker followed the change); the leader's duties (its configuration follows the
cluster view one server at a time -- a new member first as a learner, Raft thesis §4.1, §4.2.1 --
and ``MemberGone`` for a member out of the view whose private queues are still recorded); and
snapshots (every ``SNAPSHOT_ENTRIES`` applied entries: sessions plus the machine's image, paper
§7). Must not know: sockets, files, clocks, the broker's objects.

The driver runs what every method returns, in order: the Raft actions of ``cluster.raft`` plus
``cluster.raftgroup.Forward`` and ``Status``; ``apply`` is called when it reaches an
``Apply`` action and returns the committed commands and more actions. What every Raft group's
glue shares (routing to the leader, ``flush`` / ``resend``, ``forwarded``, ``persisted``,
``tick``, ``state_changed``, the queries) is ``cluster.raftgroup.RaftGroupBase``'s, which
``MetadataGroup`` extends (without ``RaftGroup``'s ``holding``: a holding report sent to this
group is dropped by the driver with a warning).
Sources: Raft paper §5.3, §7, §8; Ongaro's thesis §4.1-§4.2; RabbitMQ "Metadata store"
(Khepri on Ra); DESIGN.md §4.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cluster.quorum.machine import decode_envelope, envelope, origin_member
from cluster.raft import actions as ra
from cluster.raft.messages import Entry, EntryKind, Message
from cluster.raft.node import RaftNode
from cluster.raftgroup import RESEND_MS, Forward, RaftGroupBase, Status

from . import commands as m
from .codec import decode, encode
from .machine import MetadataMachine
from .outcomes import Outcome
from .sessions import APPLY, GAP, Sessions
from .wire import MalformedMetadata

__all__ = ["MetadataGroup", "Committed", "Action", "encode_applied", "decode_applied",
           "RESEND_MS", "SNAPSHOT_ENTRIES", "GONE_RETRY_MS", "ALIGN_AFTER_MS"]

#: A snapshot is taken every this many applied entries.
SNAPSHOT_ENTRIES = 4096
#: The leader proposes ``MemberGone`` for a member out of the view at most this often (ms).
GONE_RETRY_MS = 1000
#: A leader that is not the cluster view's leader hands its leadership to it after this long
#: (ms; again after each attempt): long enough for a view change under way (an orderly stop's
#: Cluster.Leave after its hand-over) to be committed first.
ALIGN_AFTER_MS = 3000

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")

Action = ra.Action | Forward | Status


@dataclass(frozen=True, slots=True)
class Committed:
    """``command`` was applied at log ``index`` with ``outcome``; ``origin`` and ``seq`` name its
    proposer ("" and 0: the leader's own)."""

    index: int
    origin: str
    seq: int
    command: m.Command
    outcome: Outcome


def encode_applied(index: int) -> bytes:
    """A ``Status`` payload: this replica applied the log up to ``index`` (u64)."""
    return _U64.pack(index)


def decode_applied(payload: bytes) -> int:
    """The index of an ``encode_applied`` payload. Raises ``ValueError``."""
    try:
        return int(_U64.unpack(payload)[0])
    except struct.error as exc:
        raise ValueError(f"not an applied report: {exc}") from exc


class MetadataGroup(RaftGroupBase):
    """Member ``me`` (origin ``origin``: ``"<me>#<incarnation>"``) of the metadata group whose
    replica is ``node``; ``machine`` default a new ``MetadataMachine``. A node opened from a
    snapshot starts from it (``restore``). Routing to the leader (``flush``, ``resend``,
    ``forwarded``), the Raft inputs ``persisted``, ``tick`` (re-send after ``RESEND_MS``) and
    ``state_changed``, and the queries ``leader``, ``is_leader``, ``members`` and ``applied``
    (this member's commands applied up to that seq) are ``cluster.raftgroup.RaftGroupBase``'s."""

    def __init__(self, me: str, origin: str, node: RaftNode,
                 machine: MetadataMachine | None = None) -> None:
        super().__init__(me, origin, node)
        self.machine = machine or MetadataMachine()
        self.sessions = Sessions()
        self.last_snapshot = node.snapshot.index
        #: How far each other member reported it applied the log (``status``).
        self.applied_by: dict[str, int] = {}
        #: Bumped by every ``restore``: the driver reconciles the broker to the whole state.
        self.restores = 0
        #: False: ``apply`` returns no ``Status`` report; the driver sends ``report()`` once the
        #: broker followed what was applied (``clustering.metadata``: the follow runs after the
        #: Raft messages of the same turn are written).
        self.report_on_apply = True
        #: Called after each ``restore`` of a snapshot the leader sent (not at open).
        self.on_restore: Callable[[], None] | None = None
        #: Members the cluster view lost while this member was in it (the driver's): the
        #: leader removes a member from the configuration only when it is here.
        self.departed: set[str] = set()
        #: Members of ``departed`` that left in order (Cluster.Leave): removed while they still
        #: answer, before they stop (``_may_remove``).
        self.leaving: set[str] = set()
        #: The cluster view's leader, its first member (the driver's): the log's leader hands
        #: its leadership to it (``leader_duties``), so that one broker leads both.
        self.view_leader: str | None = None
        self._align_since: int | None = None
        self._reported = 0
        self._gone_ms = -GONE_RETRY_MS
        if node.snapshot.index:
            self.restore(node.snapshot.index, node.snapshot.data)
        self.machine.configure(node.members)

    # ------------------------------------------------------------------ queries
    @property
    def caught_up(self) -> bool:
        """True once this replica applied everything up to a commit index that holds an entry of
        the current term (the leader's first entry of its term): it knows every change committed
        before this term began."""
        node = self.node
        if node.leader is None or self.machine_index < node.commit_index:
            return False
        return node.log.term_at(node.commit_index) == node.term

    # ------------------------------------------------------------------ commands of this member
    def submit(self, command: m.Command) -> int:
        """Queue ``command`` (encoded now: ``ValueError`` / ``TypeError`` for a value the codec
        cannot carry); returns its seq. Sent by the next ``flush``."""
        return self.outbox.add(encode(command))

    # ------------------------------------------------------------------ inputs
    def receive(self, frm: str, msg: Message, now_ms: int) -> list[Action]:
        """A Raft message from member ``frm`` (``RaftGroupBase.receive``); then a joiner may vote
        once it caught up (``_may_vote``)."""
        actions: list[Action] = super().receive(frm, msg, now_ms)
        self._may_vote()
        return actions

    def _may_vote(self) -> None:
        """A replica opened empty with a high ``vote_floor`` (a joiner) votes once it caught up:
        the floor comes down to the commit index it reached."""
        node = self.node
        if node.vote_floor > node.commit_index and self.caught_up:
            node.vote_floor = node.commit_index

    def status(self, frm: str, payload: bytes) -> None:
        """Member ``frm`` reports how far it applied the log."""
        try:
            index = decode_applied(payload)
        except ValueError:
            return
        if index > self.applied_by.get(frm, 0):
            self.applied_by[frm] = index

    def leader_duties(self, now_ms: int, wall_ms: int, view: set[str] | None) -> list[Action]:
        """On the leader, once its term's first entry is committed: the configuration follows
        ``view`` (the cluster view's member names; None: not known yet, nothing changes), one
        single-server change at a time -- members of the view that are not in the
        configuration are added (learners first), members out of the view removed when the
        view lost them while this member was in it (``departed``: a verified suspicion, a
        Leave; not a member merely absent from a view restarted after a power loss), this
        leader itself first when it left in order (``leaving``: Raft thesis §4.2.2, it steps
        down once its removal commits; else, stopping, it would leave a configuration that
        names it, which the others alone may never be a majority of); at
        most every ``GONE_RETRY_MS``, ``MemberGone`` for members out of the view that are
        still the home of private queues; and, once the cluster view's leader (``view_leader``)
        has been another voter for ``ALIGN_AFTER_MS`` with no change under way, a leadership
        transfer to it (Raft thesis §3.10: TimeoutNow once it holds every entry), so that the
        view's first member leads the log too (the Qpid proposal's one leader). ``wall_ms`` is
        unused (the quorum driver's signature)."""
        node = self.node
        if not node.is_leader or node.commit_index < node.term_start_index or view is None:
            return []
        out: list[Action] = []
        members = set(node.members)
        learners = set(node.learners)
        missing = sorted(view - members - learners)
        extra = [x for x in sorted((members - view - {self.me}) & self.departed)
                 if _may_remove(node, members, x, x in self.leaving)]
        if self.me in self.leaving and len(members) > 1 and _may_remove(node, members, self.me,
                                                                         leaving=True):
            extra.insert(0, self.me)   # §4.2.2: it steps down once its removal commits
        if missing and not learners:
            _ok, actions = node.add_member(missing[0])
            out += actions
        elif extra and not learners:
            _ok, actions = node.remove_member(extra[0])
            out += actions
        out += self._align(now_ms, view, bool(missing or extra or learners))
        if now_ms - self._gone_ms >= GONE_RETRY_MS:
            self._gone_ms = now_ms
            homes = {q.home for vh in self.machine.state.vhosts.values()
                     for q in vh.queues.values() if q.owner}
            gone = sorted(h for h in homes if h not in view)
            if gone:
                _results, actions = node.propose_batch(
                    [envelope("", 0, encode(m.MemberGone(h))) for h in gone])
                out += actions
        return out

    # ------------------------------------------------------------------ applying
    def _align(self, now_ms: int, view: set[str], changing: bool) -> list[Action]:
        """The leadership transfer to ``view_leader`` when it is due (``leader_duties``)."""
        node, target = self.node, self.view_leader
        if (changing or target is None or target == self.me or target not in view
                or target not in node.members or node.transfer_target is not None):
            self._align_since = None
            return []
        if self._align_since is None:
            self._align_since = now_ms
            return []
        if now_ms - self._align_since < ALIGN_AFTER_MS:
            return []
        self._align_since = now_ms
        return list(node.transfer_leadership(target))

    def apply(self, entries: tuple[Entry, ...], now_ms: int
              ) -> tuple[list[Committed], list[Action]]:
        """Apply committed ``entries`` in order: (the commands applied with their outcomes,
        actions to run: re-sends after a gap of ours, ``Status`` reports of the applied index
        to the other members, a snapshot when due)."""
        machine, node, sessions = self.machine, self.node, self.sessions
        done: list[Committed] = []
        more: list[Action] = []
        gap = False
        for e in entries:
            self.machine_index = e.index
            if e.kind is EntryKind.CONFIG:
                machine.configure(node.log.members_at(e.index))
                continue
            if e.kind is not EntryKind.COMMAND:
                continue
            try:
                origin, seq, _kind, body = decode_envelope(e.data)
            except ValueError:
                continue   # not ours to apply: every member skips it alike
            verdict = sessions.admit(origin, seq)
            if verdict != APPLY:
                gap = gap or (verdict == GAP and origin == self.origin)
                continue
            try:
                command = decode(body)
            except MalformedMetadata:
                if origin == self.origin:
                    self.outbox.applied_up_to(seq)
                continue
            outcome = machine.apply(e.index, command)
            if origin == self.origin:
                self.outbox.applied_up_to(seq)
            done.append(Committed(e.index, origin, seq, command, outcome))
        if gap:
            more += self.resend(now_ms)
        self._may_vote()
        if self.report_on_apply:
            more += self.report()
        if self.machine_index - self.last_snapshot >= SNAPSHOT_ENTRIES and \
                self.machine_index <= node.applied_index:
            self.last_snapshot = self.machine_index
            more += node.snapshot_taken(self.machine_index, self.snapshot())
        return done, more

    def report(self, upto: int | None = None) -> list[Action]:
        """``Status`` to every other member and learner (and every member that reported to us):
        this replica applied the log up to ``upto`` (default and at most ``machine_index``);
        nothing when that was reported already."""
        index = self.machine_index if upto is None else min(upto, self.machine_index)
        if index <= self._reported:
            return []
        self._reported = index
        payload = encode_applied(index)
        targets = set(self.node.members) | set(self.node.learners) | set(self.applied_by)
        return [Status(to, payload) for to in sorted(targets - {self.me})]

    def applied_count(self, index: int, among: Iterable[str]) -> int:
        """How many of the members ``among`` (not this one) reported applying ``index``."""
        applied_by = self.applied_by
        return sum(1 for name in among if name != self.me and applied_by.get(name, 0) >= index)

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> bytes:
        """The group's state: the sessions (u32 length, bytes) then the machine's image."""
        sessions = self.sessions.encode()
        return _U32.pack(len(sessions)) + sessions + self.machine.snapshot()

    def restore(self, snapshot_index: int, data: bytes) -> None:
        """Run a ``Restore`` action (or open from a snapshot): the state becomes ``data``
        (b"": empty). Raises ``ValueError`` for bytes that are no ``snapshot()``."""
        if data:
            try:
                (n,) = _U32.unpack_from(data)
            except struct.error as exc:
                raise ValueError(f"not a metadata snapshot: {exc}") from exc
            self.sessions = Sessions.decode(bytes(data[4:4 + n]))
            self.machine.restore(bytes(data[4 + n:]))
        else:
            self.sessions = Sessions()
            self.machine.restore(b"")
        self.machine.configure(self.node.log.members_at(snapshot_index) or self.node.members)
        self.machine_index = self.last_snapshot = snapshot_index
        self.restores += 1
        if self.on_restore is not None:
            self.on_restore()
        if self.outbox.pending:   # our commands the snapshot covers are applied
            done = self.sessions.expected(self.origin) - 1
            if done > 0:
                self.outbox.applied_up_to(done)

    @staticmethod
    def member_of(origin: str) -> str:
        """The member name of an origin ``"<member>#<incarnation>"``."""
        return origin_member(origin)[0]


def _may_remove(node: RaftNode, members: set[str], gone: str, leaving: bool = False) -> bool:
    """Whether the leader may remove ``gone`` (out of the view, ``departed``): not while it
    answers this leader's Raft messages (the cluster view can lag a broker that restarted and
    already voted: removing it would make the survivors' majority smaller than they are), and
    only when the members left that answer are a majority of the configuration without it
    (else the removal could not commit, and would leave a configuration that needs a member
    that is down or wiped -- one whose empty log may not vote: no leader could ever be elected
    again; seen in the membership nemesis, ``wipe-rejoin`` with ``kill-queue-leader``). A
    member is answering when heard from in the current check-quorum period (thesis §6.2). A
    member ``leaving`` in order is removed while it still answers: it waits for that before it
    stops, so that a configuration of two does not keep a member that is gone."""
    if node.peer_active(gone) and not leaving:
        return False
    rest = members - {gone}
    alive = sum(1 for x in rest if x == node.id or node.peer_active(x))
    return alive * 2 > len(rest)
