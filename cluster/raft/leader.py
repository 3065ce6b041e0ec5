"""The leader side of a Raft node: replication, the commit rule, check-quorum, leadership transfer
and single-server membership changes. Mixed into ``node.RaftNode`` (which owns the state).

Sources: paper §5.3 (log replication, the conflict hint), §5.4.2 (commit only entries of the
current term by counting), §8 (the no-op at the start of a term); thesis §3.10 (leadership
transfer: stop proposals, catch the target up, TimeoutNow), §4.1-§4.2 (one server at a time, a
change only after the leader committed an entry of its term, new servers catch up before they
count, a removed leader steps down once the change is committed), §6.2 (check-quorum), §10.2.1
(the leader appends to its own disk in parallel: it counts itself only once ``persisted``).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import actions as a
from .messages import (
    AppendEntries,
    AppendEntriesReply,
    Entry,
    EntryKind,
    InstallSnapshot,
    Message,
    Snapshot,
    TimeoutNow,
    encode_members,
)
from .progress import Progress
from .raftlog import RaftLog

__all__ = ["LeaderRole"]


class LeaderRole:
    """Leader behaviour of ``RaftNode``; every public method returns the actions to run."""

    # The node's state and helpers this half uses (``RaftNode`` sets and defines them); plain
    # declarations, not an ``if TYPE_CHECKING`` block, which mypyc does not take in a class body.
    id: str
    timing: a.Timing
    now: int
    term: int
    role: a.Role
    leader: str | None
    log: RaftLog
    snapshot: Snapshot
    commit_index: int
    persisted_index: int
    _out: list[a.Action]

    def _take(self) -> list[a.Action]:
        raise NotImplementedError

    def _send(self, to: str, msg: Message) -> None:
        raise NotImplementedError

    def _become_follower(self, term: int, leader: str | None) -> None:
        raise NotImplementedError

    def _apply_committed(self) -> None:
        raise NotImplementedError

    def _config_changed(self) -> None:
        raise NotImplementedError

    def _state_changed(self) -> None:
        raise NotImplementedError

    def _init_leader(self) -> None:
        self.progress: dict[str, Progress] = {}
        self.catching_up: dict[str, int] = {}   # node id -> deadline (ms) to have caught up
        self.transfer_target: str | None = None
        self.transfer_deadline = 0
        self.heartbeat_deadline = 0
        self.quorum_deadline = 0
        self.term_start_index = 0

    # ------------------------------------------------------------------ client requests
    def propose(self, command: bytes) -> tuple[a.ProposeResult, list[a.Action]]:
        """Append ``command`` (opaque bytes) to the log (paper §5.3). Returns ``Proposed(index,
        term)`` on the leader, else ``NotLeader(leader hint)``, and the actions to run."""
        results, actions = self.propose_batch([command])
        return results[0], actions

    def propose_batch(self, commands: Sequence[bytes]
                      ) -> tuple[list[a.ProposeResult], list[a.Action]]:
        """``propose`` for many commands at once: one ``AppendLog`` and one AppendEntries per
        follower (batching). Refused (``NotLeader``) while a leadership transfer runs (§3.10)."""
        if self.role is not a.Role.LEADER or self.transfer_target is not None:
            hint = self.transfer_target or (self.leader if self.leader != self.id else None)
            return [a.NotLeader(hint) for _ in commands], self._take()
        first = self.log.last_index + 1
        entries = [Entry(first + i, self.term, EntryKind.COMMAND, c)
                   for i, c in enumerate(commands)]
        self._append_local(entries)
        return [a.Proposed(e.index, self.term) for e in entries], self._take()

    def transfer_leadership(self, target: str | None = None) -> list[a.Action]:
        """Hand leadership to ``target`` (default: the most up-to-date voter) for an orderly stop
        (thesis §3.10): proposals are refused meanwhile; the target gets TimeoutNow once it holds
        every entry. Abandoned after one election timeout. No-op when not leader."""
        if self.role is not a.Role.LEADER:
            return self._take()
        voters = [m for m in self.log.members if m != self.id and m in self.progress]
        if target is None and voters:
            target = max(voters, key=lambda m: self.progress[m].match_index)
        if target is None or target not in voters:
            return self._take()
        self.transfer_target = target
        self.transfer_deadline = self.now + self.timing.election_ms
        self._maybe_timeout_now(target)
        self._send_append(target)
        return self._take()

    def add_member(self, node_id: str) -> tuple[bool, list[a.Action]]:
        """Add a replica (thesis §4.1, §4.2.1): it is first caught up as a non-voter; its CONFIG
        entry is appended once its match index reaches the commit index, within
        ``Timing.catchup_rounds`` election timeouts (else the change is dropped). Returns whether
        the change was started: only on a leader that has committed an entry of its term, with no
        other change or transfer under way."""
        if not self._can_change(node_id, adding=True):
            return False, self._take()
        self.progress[node_id] = Progress(self.log.last_index + 1)
        self.catching_up[node_id] = self.now + self.timing.catchup_rounds * self.timing.election_ms
        self._send_append(node_id)
        return True, self._take()

    def remove_member(self, node_id: str) -> tuple[bool, list[a.Action]]:
        """Remove a replica (may be this leader: it steps down once the change commits, §4.2.2).
        Same preconditions as ``add_member``; the last member cannot be removed."""
        if not self._can_change(node_id, adding=False) or len(self.log.members) == 1:
            return False, self._take()
        members = tuple(m for m in self.log.members if m != node_id)
        self._append_config(members)
        return True, self._take()

    # ------------------------------------------------------------------ role changes
    def _become_leader(self) -> None:
        self.role = a.Role.LEADER
        self.leader = self.id
        self.progress = {p: Progress(self.log.last_index + 1)
                         for p in self.log.members if p != self.id}
        self.catching_up = {}
        self.transfer_target = None
        self.heartbeat_deadline = self.now + self.timing.heartbeat_ms
        self.quorum_deadline = self.now + self.timing.election_ms
        self._state_changed()
        noop = Entry(self.log.last_index + 1, self.term, EntryKind.NOOP, b"")
        self.term_start_index = noop.index
        self._append_local([noop])

    def _stop_leading(self) -> None:
        self.progress = {}
        self.catching_up = {}
        self.transfer_target = None

    def _leader_deadline(self) -> int:
        return min(self.heartbeat_deadline, self.quorum_deadline)

    def _leader_tick(self) -> None:
        now = self.now
        if now >= self.quorum_deadline:
            voters = self.log.members
            alive = sum(1 for m in voters
                        if m == self.id or (m in self.progress and self.progress[m].active))
            if alive * 2 <= len(voters):
                self._become_follower(self.term, None)   # check-quorum: cut off, stop acting
                return
            for pr in self.progress.values():
                pr.was_active, pr.active = pr.active, False
            self.quorum_deadline = now + self.timing.election_ms
        if self.transfer_target is not None and now >= self.transfer_deadline:
            self.transfer_target = None
        for node_id, deadline in list(self.catching_up.items()):
            if now >= deadline:
                del self.catching_up[node_id]
                self.progress.pop(node_id, None)
        if now >= self.heartbeat_deadline:
            self.heartbeat_deadline = now + self.timing.heartbeat_ms
            for peer, pr in self.progress.items():
                if pr.snapshot_index and now - pr.snapshot_sent_ms >= self.timing.election_ms:
                    pr.rejected(pr.next_index)   # the snapshot got lost: start over
                pr.probe_sent = False
                self._send_append(peer, heartbeat=True)

    def peer_active(self, peer: str) -> bool:
        """On a leader: whether ``peer`` answered in the current or the last check-quorum
        period (thesis §6.2; False for a member this leader tracks no progress of)."""
        pr = self.progress.get(peer)
        return pr is not None and (pr.active or pr.was_active)

    def _mark_active(self, frm: str) -> None:
        pr = self.progress.get(frm)
        if pr is not None:
            pr.active = True

    # ------------------------------------------------------------------ replication
    def _append_local(self, entries: list[Entry]) -> None:
        self.log.append(entries)
        self._out.append(a.AppendLog(entries[0].index, tuple(entries)))
        self._config_changed()
        for peer in list(self.progress):
            self._send_append(peer)

    def _append_config(self, members: tuple[str, ...]) -> None:
        self._append_local([Entry(self.log.last_index + 1, self.term, EntryKind.CONFIG,
                                  encode_members(members))])

    def _send_append(self, peer: str, heartbeat: bool = False) -> None:
        """Send what flow control allows to ``peer``: a snapshot when its next entry was compacted
        (paper §7), else batches of entries; an empty AppendEntries as a heartbeat."""
        pr = self.progress[peer]
        if pr.snapshot_index:
            return
        log, t = self.log, self.timing
        if pr.next_index <= log.snapshot.index:
            self._send(peer, InstallSnapshot(self.term, self.id, self.snapshot))
            pr.snapshot_sent(self.snapshot.index, self.now)
            return
        sent = False
        while pr.can_send(t.max_inflight) and pr.next_index <= log.last_index:
            prev = pr.next_index - 1
            batch = log.slice(pr.next_index, min(log.last_index, prev + t.max_batch_entries),
                              t.max_batch_bytes)
            self._send(peer, AppendEntries(self.term, self.id, prev, self._term(prev), batch,
                                           self.commit_index))
            pr.sent(batch[-1].index, len(batch))
            sent = True
        if heartbeat and not sent:
            prev = pr.next_index - 1
            self._send(peer, AppendEntries(self.term, self.id, prev, self._term(prev), (),
                                           self.commit_index))

    def _term(self, index: int) -> int:
        term = self.log.term_at(index)
        assert term is not None, f"term of {index} unknown (snapshot {self.log.snapshot.index})"
        return term

    def _on_append_reply(self, frm: str, msg: AppendEntriesReply) -> None:
        pr = self.progress.get(frm)
        if pr is None:
            return
        if msg.success:
            if pr.acked(msg.match_index):
                self._maybe_commit()
            if self.role is not a.Role.LEADER:
                return
            if frm in self.catching_up and pr.match_index >= self.commit_index:
                del self.catching_up[frm]
                self._append_config(tuple(self.log.members) + (frm,))
            self._maybe_timeout_now(frm)
            self._send_append(frm)
            return
        if pr.probing and msg.reject_index != pr.next_index - 1:
            return   # stale: not the answer to the probe in flight
        if not pr.probing and msg.reject_index < pr.match_index:
            return   # stale: sent before that prefix matched
        if msg.hint_term:
            last = self.log.last_index_of_term(msg.hint_term, msg.reject_index)
            candidate = last + 1 if last else msg.hint_index
        else:
            candidate = msg.hint_index
        candidate = min(candidate, msg.reject_index)
        if candidate <= pr.match_index:
            # the follower no longer holds what it acknowledged (a file of its log lost it,
            # ``disklog``): match it again from below (Ra left this case a TODO: rabbitmq/ra#508)
            pr.forget(candidate - 1)
        pr.rejected(candidate)
        self._send_append(frm)

    def _maybe_commit(self) -> None:
        """Advance the commit index to the highest index stored by a majority of the voters whose
        entry is of the current term (paper §5.3, §5.4.2), and send the new commit index to
        every follower right away (not only with the next heartbeat)."""
        voters = self.log.members
        matches = sorted((self.persisted_index if m == self.id else
                          (self.progress[m].match_index if m in self.progress else 0)
                          for m in voters), reverse=True)
        n = matches[len(voters) // 2]
        if n > self.commit_index and self.log.term_at(n) == self.term:
            self.commit_index = n
            self._out.append(a.CommitAdvanced(n))
            self._apply_committed()
            if self.role is a.Role.LEADER:
                # tell followers at once (new entries if any, else an empty AppendEntries), so
                # they apply -- and confirm and deliver -- without waiting for a heartbeat
                for peer in list(self.progress):
                    self._send_append(peer, heartbeat=True)

    def _after_apply(self) -> None:
        """A removed leader steps down once its removal is committed (thesis §4.2.2), handing over
        to an up-to-date member at once."""
        at, members = self.log.configs[-1]
        if self.id in members or at > self.commit_index:
            return
        best = max((m for m in members if m in self.progress),
                   key=lambda m: self.progress[m].match_index, default=None)
        if best is not None and self.progress[best].match_index == self.log.last_index:
            self._send(best, TimeoutNow(self.term, self.id))
        self._become_follower(self.term, None)

    def _maybe_timeout_now(self, peer: str) -> None:
        if peer == self.transfer_target and self.progress[peer].match_index == self.log.last_index:
            self._send(peer, TimeoutNow(self.term, self.id))

    def _can_change(self, node_id: str, adding: bool) -> bool:
        return (self.role is a.Role.LEADER and self.transfer_target is None
                and not self.catching_up
                and self.log.configs[-1][0] <= self.commit_index
                and self.commit_index >= self.term_start_index
                and (node_id in self.log.members) != adding)

    def _sync_progress(self) -> None:
        """Track exactly the members of the configuration in force plus new ones catching up."""
        members = self.log.members
        for m in members:
            if m != self.id and m not in self.progress:
                self.progress[m] = Progress(self.log.last_index + 1)
        for m in list(self.progress):
            if m not in members and m not in self.catching_up:
                del self.progress[m]
        if self.transfer_target is not None and self.transfer_target not in self.progress:
            self.transfer_target = None
