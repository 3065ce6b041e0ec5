"""A Raft node as a pure state machine: messages, ticks, proposals and persist notices in, actions out.

Owns: roles and terms, (pre-)elections, the follower side of AppendEntries and InstallSnapshot, the
commit index and what to apply, snapshots taken locally. The leader side (replication, commit
rule, check-quorum, leadership transfer, membership changes) is ``leader.LeaderRole``, mixed in.
Must not know: sockets, files, clocks (time comes in as ``now_ms`` of an injected monotonic clock),
the state machine (commands are opaque bytes), the broker.

Sources: Ongaro and Ousterhout 2014 ("In Search of an Understandable Consensus Algorithm", §5 and
figure 2; §7 log compaction; §8 the leader's no-op); Ongaro's thesis 2014 (§3.10 leadership
transfer, §4.1 single-server membership changes, §4.2.3 disruptive servers, §6.2 check-quorum,
§9.6 pre-vote, §10.2.1 the leader writes to its disk in parallel with replication); etcd/raft
(flow control, rejection hints, "stable to (index, term)").

Durability rule: a follower acknowledges entries only up to the index its storage reported durable
(``persisted``), and the leader counts itself in the commit majority only up to its own durable
index, so a committed entry is on stable storage on a majority.
"""

from __future__ import annotations

import random

from . import actions as a
from .leader import LeaderRole
from .messages import (
    AppendEntries,
    AppendEntriesReply,
    Entry,
    EntryKind,
    InstallSnapshot,
    Message,
    PersistentState,
    RequestVote,
    RequestVoteReply,
    Snapshot,
    TimeoutNow,
    encode_members,
)
from .raftlog import RaftLog

__all__ = ["RaftNode"]


class RaftNode(LeaderRole):
    """One replica of one Raft group.

    ``node_id``: this replica's id; ``state``: what its storage loaded (``PersistentState()`` for a
    new one); ``now_ms``: the injected clock now; ``rng``: randomness for election timeouts;
    ``bootstrap``: for a brand-new group, the same member list on every initial member (it becomes
    entry 1, term 0, committed by definition); a replica being added to a running group starts with
    none and learns the configuration from the leader. ``vote_floor``: a replica re-created empty
    (its files deleted when it was removed, then added again) grants no vote, and no pre-vote,
    until its log reaches this index -- the leader's commit index when it asked for it -- so
    that servers that missed its removal cannot count its lost log as a vote (the simulator
    found such a split: a stale member elected by a removed server and the re-created one).
    ``state.floor`` > 0: the storage lost entries it had acknowledged (``disklog``, ``marks``):
    the node grants no vote or pre-vote and stands for no election (nor a TimeoutNow) until its
    log matches a leader's up to that index (``recovering_to``; then, if it had no vote in that
    term, it records one for that leader, so that a vote it forgot cannot be given twice). Its
    acknowledgements stay honest throughout: only what matches the leader and is durable.
    ``standby``: while True (set by its owner, e.g. a broker in maintenance mode, RabbitMQ's
    ``rabbitmq-upgrade drain``) the node stands for no election, nor on a TimeoutNow, but votes
    and replicates as usual; a leader stays leader until it hands over.
    Every input method returns the actions to run, in order (see ``actions``); the first call
    also returns the bootstrap's ``AppendLog``.
    """

    def __init__(self, node_id: str, state: PersistentState, now_ms: int,
                 timing: a.Timing | None = None, rng: random.Random | None = None,
                 bootstrap: tuple[str, ...] = (), vote_floor: int = 0) -> None:
        self.id = node_id
        self.vote_floor = vote_floor
        self.standby = False
        self.recovering_to = state.floor
        self.timing = timing or a.Timing()
        self.rng = rng or random.Random()
        self.now = now_ms
        self.term = state.term
        self.voted_for = state.voted_for
        self.role = a.Role.FOLLOWER
        self.leader: str | None = None
        self.snapshot = state.snapshot
        self.log = RaftLog(state.snapshot, list(state.entries), state.dry)
        self.commit_index = state.snapshot.index
        self.applied_index = state.snapshot.index
        self.persisted_index = self.log.last_index
        self.verified_index = 0    # our log matches the current leader's up to here (this term)
        self.acked_index = 0       # the match index last sent to the leader
        self.votes: set[str] = set()
        self.leader_contact_ms: int | None = None
        self.election_deadline = 0
        self._out: list[a.Action] = []
        self._members_seen = self.log.members
        self._init_leader()
        if bootstrap and self.log.last_index == 0:
            first = Entry(1, 0, EntryKind.CONFIG, encode_members(bootstrap))
            self.log.append([first])
            self._out.append(a.AppendLog(1, (first,)))
            self.commit_index = 1
            self._config_changed()
            self._apply_committed()
        self._reset_election_timer()

    # ------------------------------------------------------------------ inputs
    def tick(self, now_ms: int) -> list[a.Action]:
        """Advance the clock to ``now_ms``: election timeout (§5.2), heartbeats and check-quorum
        (leader). Call at least every ``heartbeat_ms`` or at ``next_deadline()``."""
        self.now = max(self.now, now_ms)
        if self.role is a.Role.LEADER:
            self._leader_tick()
        elif self.now >= self.election_deadline:
            self.leader = None
            self._campaign(pre=True)
        return self._take()

    def next_deadline(self) -> int:
        """The clock time (ms) by which ``tick`` must next be called."""
        if self.role is a.Role.LEADER:
            return self._leader_deadline()
        return self.election_deadline

    def receive(self, frm: str, msg: Message, now_ms: int) -> list[a.Action]:
        """Handle ``msg`` from node ``frm`` at ``now_ms`` (figure 2 "rules for all servers").
        Stale, duplicated and reordered messages are safe."""
        self.now = max(self.now, now_ms)
        if msg.term > self.term:
            if isinstance(msg, RequestVote):
                if self._in_lease() and not msg.transfer:
                    return self._take()   # thesis §4.2.3: a leader is alive, ignore the disruption
                if not msg.pre_vote:
                    self._become_follower(msg.term, None)
            elif isinstance(msg, RequestVoteReply) and msg.pre_vote and msg.granted:
                pass   # a pre-vote granted for the term we would run in
            elif isinstance(msg, AppendEntries | InstallSnapshot | TimeoutNow):
                self._become_follower(msg.term, msg.leader)
            else:
                self._become_follower(msg.term, None)
        elif msg.term < self.term:
            if isinstance(msg, AppendEntries | InstallSnapshot):
                self._send(frm, AppendEntriesReply(self.term, False))   # tell the stale leader
            elif isinstance(msg, RequestVote) and msg.pre_vote:
                self._send(frm, RequestVoteReply(self.term, False, pre_vote=True))
            return self._take()
        if isinstance(msg, RequestVote):
            self._on_request_vote(frm, msg)
        elif isinstance(msg, RequestVoteReply):
            self._on_vote_reply(frm, msg)
        elif isinstance(msg, AppendEntries):
            self._on_append(frm, msg)
        elif isinstance(msg, AppendEntriesReply):
            if self.role is a.Role.LEADER:
                self._mark_active(frm)   # only answers prove the peer hears us (check-quorum)
                self._on_append_reply(frm, msg)
        elif isinstance(msg, InstallSnapshot):
            self._on_install_snapshot(frm, msg)
        elif isinstance(msg, TimeoutNow):
            if self.role is a.Role.FOLLOWER and self.id in self.log.members:
                self._campaign(pre=False, transfer=True)
        return self._take()

    def persisted(self, index: int, term: int) -> list[a.Action]:
        """Storage made every entry up to (``index``, ``term``) durable. Ignored when the entry at
        ``index`` is no longer the one of ``term`` (a truncated suffix; etcd's stableTo)."""
        if index > self.persisted_index and self.log.term_at(index) == term:
            self.persisted_index = index
            if self.role is a.Role.LEADER:
                self._maybe_commit()
            elif self.leader is not None:
                self._ack()
        return self._take()

    def snapshot_taken(self, index: int, data: bytes) -> list[a.Action]:
        """The state machine serialized itself (``data``) after applying ``index``: compact the
        log up to it (paper §7), keeping ``Timing.snapshot_keep`` entries. Raises ``ValueError``
        when ``index`` is not applied yet or not newer than the current snapshot."""
        if index > self.applied_index or index <= self.snapshot.index:
            raise ValueError(f"snapshot at {index}: applied {self.applied_index}, "
                             f"snapshot {self.snapshot.index}")
        term = self.log.term_at(index)
        assert term is not None
        self.snapshot = Snapshot(index, term, self.log.members_at(index), data)
        self.log.compact(self.snapshot, keep=self.timing.snapshot_keep)
        self._out.append(a.PersistSnapshot(self.snapshot, False))
        return self._take()

    def force_configuration(self, members: tuple[str, ...]) -> list[a.Action]:
        """An operator's override (``ctl force_boot``, RabbitMQ's ``rabbitmqctl force_boot``):
        append a CONFIG entry of ``members`` to this replica's own log without asking anyone,
        so that ``members`` alone elect a leader and commit from now on (the configuration in
        force is the last one appended, thesis §4.1). Unsafe by design: what the other members
        committed beyond this log is lost, and they must not come back with their old logs.
        Returns the ``AppendLog`` of the entry (and ``MembershipChanged``)."""
        if self.role is not a.Role.FOLLOWER:
            self._become_follower(self.term, None)
        entry = Entry(self.log.last_index + 1, self.term, EntryKind.CONFIG,
                      encode_members(members))
        self.log.append([entry])
        self._out.append(a.AppendLog(entry.index, (entry,)))
        self._config_changed()
        self._reset_election_timer()
        return self._take()

    # ------------------------------------------------------------------ queries
    @property
    def members(self) -> tuple[str, ...]:
        """The configuration in force (thesis §4.1)."""
        return self.log.members

    @property
    def learners(self) -> tuple[str, ...]:
        """Servers being caught up as non-voters before their CONFIG entry is appended (thesis
        §4.2.1); empty except on a leader running ``add_member``."""
        return tuple(self.catching_up)

    @property
    def committed_config(self) -> tuple[int, tuple[str, ...]]:
        """(log index, members) of the newest configuration at or below the commit index: the
        one no later leader can undo (thesis §4.1). Index 0 for a log with none."""
        for at, members in reversed(self.log.configs):
            if at <= self.commit_index:
                return at, members
        return self.log.configs[0]

    @property
    def is_leader(self) -> bool:
        """Whether this node is the leader of its current term."""
        return self.role is a.Role.LEADER

    # ------------------------------------------------------------------ internals
    def _take(self) -> list[a.Action]:
        out, self._out = self._out, []
        return out

    def _send(self, to: str, msg: Message) -> None:
        self._out.append(a.Send(to, msg))

    def _in_lease(self) -> bool:
        """Heard from a live leader within an election timeout (thesis §4.2.3)."""
        if self.role is a.Role.LEADER:
            return True
        return (self.leader is not None and self.leader_contact_ms is not None
                and self.now - self.leader_contact_ms < self.timing.election_ms)

    def _reset_election_timer(self) -> None:
        e = self.timing.election_ms
        self.election_deadline = self.now + self.rng.randrange(e, 2 * e)

    def _state_changed(self) -> None:
        self._out.append(a.StateChanged(self.role, self.term, self.leader))

    def _become_follower(self, term: int, leader: str | None) -> None:
        was_leader = self.role is a.Role.LEADER
        if term != self.term:
            self.term = term
            self.voted_for = None
            self.verified_index = 0
            self.acked_index = 0
            self._out.append(a.PersistState(term, None))
        self.role = a.Role.FOLLOWER
        self.leader = leader
        if leader is not None:
            self.leader_contact_ms = self.now
        if was_leader:
            self._stop_leading()
        self._reset_election_timer()
        self._state_changed()

    def _voters(self) -> tuple[str, ...]:
        return self.log.members

    def _campaign(self, pre: bool, transfer: bool = False) -> None:
        """Start a pre-vote (thesis §9.6) or an election (paper §5.2). A node outside the
        configuration never campaigns."""
        self._reset_election_timer()
        if self.id not in self._voters() or self.recovering_to or self.standby:
            return
        if pre:
            self.role = a.Role.PRE_CANDIDATE
            term = self.term + 1
        else:
            self.role = a.Role.CANDIDATE
            self.term += 1
            self.voted_for = self.id
            self.verified_index = 0
            self.acked_index = 0
            self._out.append(a.PersistState(self.term, self.id))
            term = self.term
        self.leader = None
        self.votes = {self.id}
        self._state_changed()
        if self._won():
            return
        for peer in self._voters():
            if peer != self.id:
                self._send(peer, RequestVote(term, self.id, self.log.last_index,
                                             self.log.last_term, pre_vote=pre, transfer=transfer))

    def _won(self) -> bool:
        voters = self._voters()
        if len(self.votes & set(voters)) * 2 <= len(voters):
            return False
        if self.role is a.Role.PRE_CANDIDATE:
            self._campaign(pre=False)
        else:
            self._become_leader()
        return True

    def _on_request_vote(self, frm: str, msg: RequestVote) -> None:
        up_to_date = (self.log.is_up_to_date(msg.last_log_index, msg.last_log_term)
                      and self.log.last_index >= self.vote_floor and not self.recovering_to)
        if msg.pre_vote:
            granted = msg.term > self.term and up_to_date
            self._send(frm, RequestVoteReply(msg.term if granted else self.term, granted, True))
            return
        granted = (msg.term == self.term and self.voted_for in (None, msg.candidate)
                   and up_to_date and self.role is not a.Role.LEADER)
        if granted:
            if self.voted_for is None:
                self.voted_for = msg.candidate
                self._out.append(a.PersistState(self.term, msg.candidate))
            self._reset_election_timer()
        self._send(frm, RequestVoteReply(self.term, granted))

    def _on_vote_reply(self, frm: str, msg: RequestVoteReply) -> None:
        if msg.pre_vote:
            if self.role is a.Role.PRE_CANDIDATE and msg.granted and msg.term == self.term + 1:
                self.votes.add(frm)
                self._won()
        elif self.role is a.Role.CANDIDATE and msg.granted and msg.term == self.term:
            self.votes.add(frm)
            self._won()

    def _heard_leader(self, leader: str) -> None:
        if self.role is not a.Role.FOLLOWER or self.leader != leader:
            self.role = a.Role.FOLLOWER
            self.leader = leader
            self._state_changed()
        self.leader_contact_ms = self.now
        self._reset_election_timer()

    def _on_append(self, frm: str, msg: AppendEntries) -> None:
        """Follower side of AppendEntries (paper figure 2, receiver implementation 1-5)."""
        assert self.role is not a.Role.LEADER, f"two leaders in term {self.term}"
        self._heard_leader(msg.leader)
        prev, prev_term, entries = msg.prev_index, msg.prev_term, msg.entries
        base = self.log.snapshot.index
        if prev < base:   # the prefix we compacted is committed: it matches
            entries = tuple(e for e in entries if e.index > base)
            prev, prev_term = base, self.log.snapshot.term
        held = self.log.term_at(prev)
        if held != prev_term:
            if held is None:
                hint_index, hint_term = self.log.last_index + 1, 0
            else:
                hint_index, hint_term = self.log.first_index_of_term(prev), held
            self._send(frm, AppendEntriesReply(self.term, False, reject_index=msg.prev_index,
                                               hint_index=hint_index, hint_term=hint_term))
            return
        new: list[Entry] = []
        for i, e in enumerate(entries):
            if e.index <= self.log.last_index:
                if self.log.term_at(e.index) == e.term:
                    continue
                assert e.index > self.commit_index, f"truncating committed entry {e.index}"
                self.log.truncate_from(e.index)
                self.persisted_index = min(self.persisted_index, e.index - 1)
            new = list(entries[i:])
            break
        if new:
            self.log.append(new)
            self._out.append(a.AppendLog(new[0].index, tuple(new)))
            self._config_changed()
        last_new = prev + len(entries)
        self.verified_index = max(self.verified_index, last_new)
        if self.recovering_to and self.verified_index >= self.recovering_to:
            self._recovered(msg.leader)
        commit = min(msg.commit, self.verified_index)
        if commit > self.commit_index:
            self.commit_index = commit
            self._out.append(a.CommitAdvanced(commit))
            self._apply_committed()
        self._ack(force=True)

    def _ack(self, force: bool = False) -> None:
        """Tell the leader how far our log matches its own *and* is durable."""
        match = min(self.persisted_index, self.verified_index)
        if self.leader is None or (match <= self.acked_index and not force):
            return
        self.acked_index = max(self.acked_index, match)
        self._send(self.leader, AppendEntriesReply(self.term, True, match_index=match))

    def _on_install_snapshot(self, frm: str, msg: InstallSnapshot) -> None:
        """Follower side of InstallSnapshot (paper §7, figure 13)."""
        assert self.role is not a.Role.LEADER, f"two leaders in term {self.term}"
        self._heard_leader(msg.leader)
        snap = msg.snapshot
        if snap.index > self.commit_index:
            keep = snap.index <= self.log.last_index and self.log.term_at(snap.index) == snap.term
            self.snapshot = snap
            self.log.compact(snap)
            if not keep:
                self.persisted_index = snap.index
            else:
                self.persisted_index = max(self.persisted_index, snap.index)
            self._out.append(a.PersistSnapshot(snap, not keep))
            self.commit_index = self.applied_index = snap.index
            self._out.append(a.Restore(snap))
            self._out.append(a.CommitAdvanced(snap.index))
            self._config_changed()
        self.verified_index = max(self.verified_index, snap.index)
        if self.recovering_to and self.verified_index >= self.recovering_to:
            self._recovered(msg.leader)
        self._ack(force=True)

    def _recovered(self, leader: str) -> None:
        """The log matches ``leader``'s up to the recovery floor: vote and stand again (a vote
        for this term is recorded for ``leader`` when none is: one it forgot may not be
        given twice)."""
        self.recovering_to = 0
        if self.voted_for is None:
            self.voted_for = leader
            self._out.append(a.PersistState(self.term, leader))

    def _apply_committed(self) -> None:
        if self.commit_index <= self.applied_index:
            return
        batch = self.log.held(self.applied_index + 1, self.commit_index)
        self.applied_index = self.commit_index
        self._out.append(a.Apply(batch))
        if self.role is a.Role.LEADER:
            self._after_apply()

    def _config_changed(self) -> None:
        members = self.log.members
        if members != self._members_seen:
            self._members_seen = members
            self._out.append(a.MembershipChanged(members, self.log.configs[-1][0]))
            if self.role is a.Role.LEADER:
                self._sync_progress()
