"""The I/O half of the cluster metadata log (issue 23): the metadata Raft group of this member, and
the seam the core's handlers, ``core.access_store`` and ``core.policy_store`` propose through
(``broker.metadata``). The logic is ``cluster.metadata`` (``MetadataGroup``, ``MetadataMachine``).

Owns ``MetadataRuntime``: the group's replica on disk (a ``DiskLog`` in ``<data>/raft/metadata``),
run by a ``clustering.quorum.QuorumRuntime`` of its own (``host_group``: the same transport of
Raft messages as Cluster.Quorum methods on the peer links, group commit in a worker thread,
timers and orderly leadership hand-over as a quorum queue's), and:

- ``change(vhost, connection, method, done)``: a client's Exchange / Queue Declare, Delete, Bind
  and Unbind (after the handler's permission checks), and ``propose(command, done)`` for any
  command: submitted to the group (forwarded to the leader when this member does not lead).
  ``done(None)`` (Ok) or ``done((code, text, connection_level))`` comes from this member's own
  machine's outcome at the command's log index, once ``--sync-replies`` other members of the
  view (``all``, ``majority``, ``none``, N: ``cluster.driver.reply_quorum``) reported that index
  applied; ``outcomes.timeout_refusal`` (541) when it was not applied here within
  ``--metadata-timeout`` seconds (default 30, RabbitMQ 4's ``khepri_default_timeout``): a
  minority member, or no leader (applied here but not reported by enough members in that time:
  the outcome, since it is committed). A command that timed out may still commit later (as with
  Khepri: a timeout is no refusal); one that a snapshot installed here covers before this
  member applied it gets the timeout refusal too (its outcome is not in the snapshot).
- following the log: every applied command makes the broker's objects follow the records it
  changed (``metadata_follow``: the vhost it touched; users, vhosts, permissions and policies),
  in log order, on every member, two turns of the event loop after it was applied (the Raft
  messages of that turn -- a leader's news of the commit -- are written first, so the members
  follow in parallel), a batch at a time in one definitions.db transaction (one fsync); answers
  and applied reports wait for it; the whole state once the replica caught up with the log after
  a start or a join, and after each snapshot install (so a member forgets what was deleted while
  it was away). Until then this member admits no clients (``ready``).
- bootstrapping: a member that had a replica opens it at start (``start``: Raft's restart,
  it serves once a majority of its last configuration is back) and never founds a group; one
  without a replica opens it at the first cluster view, whose leader starts the group (a
  configuration of itself) and proposes its stored definitions (``definitions.db``) -- a new
  cluster's first broker, or, upgrading from the broadcast design (one cluster restart, no
  ``raft/metadata`` yet), the leader of the view the restarted members form; members that join
  start empty and are added by the metadata leader (learner, then voter), whose configuration
  follows the cluster view (removing only members the view lost: ``departed``); a joiner is
  admitted to clients once it is a voter (``voter``). ``ctl force_boot`` (``forced``): the
  replica becomes a configuration of this member alone (``RaftNode.force_configuration``).
- private queues: the record names the connection; on its home member the queue is made for
  that connection, the others make a proxy; one whose connection is gone is proposed for
  deletion (``DeleteQueue``), as are exclusive queues of a closing connection, auto-delete
  queues and expired ones (``VirtualHost``), and at start the private queues this member's
  previous incarnation left.

Times: seconds (timeout) and the runtime's monotonic ms. Sources: RabbitMQ "Metadata store"
(Khepri), "Clustering"; Raft paper §5-§8; DESIGN.md §4.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from cluster import force_boot
from cluster.codec import QUORUM_STATUS, Quorum
from cluster.driver import reply_quorum
from cluster.metadata import commands as m
from cluster.metadata.commands import InstallView
from cluster.metadata.group import Committed, MetadataGroup
from cluster.metadata.outcomes import Outcome, Refused, timeout_refusal
from cluster.raft import actions as ra
from cluster.raft.disklog import DiskLog
from cluster.raft.node import RaftNode
from queues.store.dirs import fsync_dir

from ..core.vhost import send_cancel
from .metadata_commands import command_of, connection_id, definitions_commands
from .metadata_follow import follow_committed, reconcile, resave_definitions
from .quorum import QuorumRuntime

__all__ = ["MetadataRuntime", "METADATA_GROUP", "TIMING", "Done"]

log = logging.getLogger(__name__)

#: The group id of the metadata log on the peer links (Cluster.Quorum ``group``).
METADATA_GROUP = "metadata"
#: A file in the log's directory, written (and fsynced) once this member first followed the
#: log: a founder killed before its definitions were applied has none, and founds again.
FOLLOWED_MARK = "followed"
#: Raft timings of the metadata group (as quorum queues': a dead leader is replaced in ~1-1.5 s).
TIMING = ra.Timing(election_ms=600, heartbeat_ms=100, max_batch_entries=512,
                   max_batch_bytes=1 << 20, max_inflight=8, snapshot_keep=256)
#: The vote floor of an empty replica until it caught up (``RaftNode.vote_floor``).
NO_VOTE = 1 << 62
#: ``done(None)``: Ok; ``done((reply code, text, connection level))``: refused.
Done = Callable[[tuple[int, str, bool] | None], None]
_TICK_S = 0.1


@dataclass(slots=True)
class _Proposal:
    command: m.Command
    done: Callable[[Outcome], None]
    deadline: float
    index: int = 0
    outcome: Any = None
    then: list[tuple[Any, str]] = field(default_factory=list)   # Basic.Cancels after the Ok
    replies: bool = True   # False: answered once applied here (no ``--sync-replies`` wait)


class MetadataRuntime:
    """This member's metadata log (see the module docstring). ``me``: the node name;
    ``data_dir``: the broker's; ``reply_policy``: ``--sync-replies``; ``timeout``: seconds."""

    #: Read by ``QuorumRuntime``'s driver loop and timers of the sink of the group's effects
    #: (a quorum queue's are its deleted flag and dead-letter worker).
    deleted = False
    dlx = None

    def __init__(self, broker: Any, data_dir: Path | str, me: str, *, fsync: bool = True,
                 reply_policy: str = "all", timeout: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, solo: bool = False) -> None:
        reply_quorum(reply_policy, 1)   # validated early (ValueError)
        self.broker = broker
        self.me = me
        self.directory = Path(data_dir) / "raft" / METADATA_GROUP
        #: The replica's directory existed when this process started: this member had a
        #: replica in some cluster; it opens at ``start`` and founds no group (unless ``solo``).
        self.had_log = self.directory.exists()
        #: This broker starts a cluster of one by its own data (no seed, no other member in its
        #: last view): the only case, with a first broker's, in which it may found the group.
        self.solo = solo
        #: Members removed from the cluster view while this member was in it (a verified
        #: suspicion, a Leave): the only ones the metadata leader removes from the configuration.
        self.departed: set[str] = set()
        #: Members that left in order (``left_in_order``), a subset of ``departed``.
        self.leaving: set[str] = set()
        self._view_names: list[str] = []
        #: ``ctl force_boot`` was asked (``cluster.force_boot``): ``open`` makes this member
        #: the only one of the configuration; the marker goes once the broker follows the log.
        self.forced = False
        self.reply_policy = reply_policy
        self.timeout = timeout
        self.clock = clock
        self.host = QuorumRuntime(broker, data_dir, me, fsync=fsync, timing=TIMING)
        self.origin = self.host.origin
        self.group: MetadataGroup | None = None
        self.rep: Any = None
        self.pending: dict[int, _Proposal] = {}
        #: True once the broker follows the log (caught up and reconciled): clients admitted.
        self.ready = False
        self._ready_seq = 0            # a founder's upgrade proposals must be applied first
        self.on_ready: Callable[[], None] | None = None
        self._applied: list[Committed] = []   # applied, not yet followed (``on_effects``)
        #: Called with each committed ``InstallView`` (the cluster view, ``committed_views``).
        self.on_view: Callable[[InstallView], None] | None = None
        #: Called once the replica is open (``open``): from then on the cluster views are
        #: committed in it (before, as when upgrading a cluster that has no log yet, the view
        #: rounds' majority rule decides the first view, whose leader founds the log).
        self.on_open: Callable[[], None] | None = None
        #: Told the applied runtime parameters ((vhost, component, name) -> JSON text) each
        #: time they may have changed, once this member follows the log (the management's
        #: shovel and federation managers follow them: ``follow_parameters``).
        self.on_parameters: Callable[[dict[tuple[str, str, str], str]], None] | None = None
        self._follow_due = False
        #: A follow's definitions.db commit failed (a full disk): ``_resave`` writes the
        #: definitions again once it can.
        self.store_stale = False

    # ------------------------------------------------------------------ start
    def open(self, found: bool) -> None:
        """Open (or create) the replica (``view_changed`` does, at the first view). ``found``:
        this member leads the view; with an empty log it bootstraps the group alone and
        proposes the broker's definitions. Raises ``OSError`` / ``FormatError`` for an
        unusable directory."""
        disk = DiskLog(self.directory, fsync=self.host.fsync)
        state = disk.load()
        empty = not state.entries and not state.snapshot.index
        # an empty replica that does not found the group (a joiner, a member whose data was
        # wiped) grants no vote until it caught up (``MetadataGroup.apply`` lowers the floor):
        # else its empty log could elect a candidate that lacks committed entries
        node = RaftNode(self.me, state, self.host.now_ms(), TIMING, random.Random(),
                        bootstrap=(self.me,) if found and empty else (),
                        vote_floor=NO_VOTE if empty and not found else 0)
        group = self.group = MetadataGroup(self.me, self.origin, node)
        group.departed = self.departed
        group.leaving = self.leaving
        group.on_restore = self._restored
        group.report_on_apply = False   # ``_follow_applied`` reports
        self.rep = self.host.host_group(METADATA_GROUP, self.directory, group, disk, self)
        if self.forced and not empty and node.members != (self.me,):
            log.warning("metadata log: force_boot: this member alone is the configuration "
                        "(it was %s); changes the others committed beyond index %d are lost",
                        ", ".join(node.members), node.log.last_index)
            self.host.execute(self.rep, node.force_configuration((self.me,)))
        # a founder that died before its definitions were applied (its log may hold only the
        # bootstrap configuration) proposes them again: else the empty state would delete
        # every vhost and user here. Re-proposing what is stored is idempotent.
        if found and (empty or not (self.directory / FOLLOWED_MARK).exists()):
            commands = definitions_commands(self.broker, self.directory.parent.parent)
            for command in commands:
                self._ready_seq = group.submit(command)
            log.info("metadata log: founded here with %d definitions of this broker",
                     len(commands))
            self._flush()
        else:
            log.info("metadata log: opened at index %d (%s)", node.log.last_index,
                     "waiting for the leader to add this member" if empty else
                     ", ".join(node.members))
        if self.on_open is not None:
            self.on_open()

    def attach(self, links: Any, addresses: Callable[[], dict[str, str]]) -> None:
        """Use the cluster's peer ``links`` (``QuorumRuntime.attach``)."""
        self.host.attach(links, addresses)

    def start(self) -> None:
        """At the broker's start: a member that had a replica opens it now, before any view
        (Raft's restart: it votes and serves once a majority of its last configuration is
        back, whatever the cluster view); it founds only when ``solo`` (a founder killed before
        it followed its log). Raises what ``open`` raises."""
        if self.had_log and self.group is None:
            self.open(found=self.solo)

    def view_changed(self, view: int, members: Any) -> None:
        """The cluster view changed (``members``: (name, address) pairs, the leader first):
        a member without a replica opens it at the first view (the view's leader founds the
        group: a new cluster's first broker, or the leader of a cluster restarted from the
        broadcast design's data; a member that had a replica never does, so a joiner that was
        not added yet cannot found a second group); the metadata leader adds the view's new
        members and removes those the view lost meanwhile (``departed``), and hands its
        leadership to the view's leader (``MetadataGroup.view_leader``); proposals stop
        waiting for members that left."""
        members = list(members)
        names = [n for n, _ in members]
        if self._view_names and self.me in names:
            self.departed |= set(self._view_names) - set(names)
        self.departed -= set(names)
        self.leaving -= set(names)
        self._view_names = names
        self.host.view_changed(view, members)
        if self.group is None:
            self.open(found=bool(members) and members[0][0] == self.me and not self.had_log)
        if self.group is not None:   # the log's leader hands its leadership to the view's
            self.group.view_leader = names[0] if names else None
        self._check_all()

    def left_in_order(self, names: Any) -> None:
        """Members that left with Cluster.Leave (a committed view's ``left``): the leader
        takes them out of the configuration even while they still answer
        (``MetadataGroup.leaving``)."""
        if names:
            self.leaving.update(names)
            self.departed.update(names)

    def awaiting_removal(self) -> bool:
        """Whether this member must still wait before it stops after a Leave: the
        configuration in force on this replica names it beside others, or it leads the log
        (it removes itself, ``MetadataGroup.leader_duties``, and steps down once that
        commits: stopping before would leave the others a configuration that needs it). The
        only member is never removed."""
        group = self.group
        if group is None:
            return False
        node = group.node
        members = node.members
        if node.is_leader and members != (self.me,):
            return True
        return self.me in members and len(members) > 1

    @property
    def voter(self) -> bool:
        """True when this member is a voter of the committed configuration (a joiner is
        admitted to clients only then: a quorum queue declared anywhere afterwards counts it)."""
        group = self.group
        return group is not None and self.me in group.node.committed_config[1]

    async def run(self) -> None:
        """The group's timers and group commit, and the proposals' timeouts; until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.host.run)
            while True:
                await anyio.sleep(_TICK_S)
                self._expire()
                self._check_ready()
                self._resave()

    def _resave(self) -> None:
        """After a follow whose definitions.db commit failed (``store_stale``), once this
        member follows the log again: write the broker's definitions into definitions.db again
        (``metadata_follow.resave_definitions``); tried every tick until a commit succeeds."""
        store = getattr(getattr(self.broker, "durability", None), "definitions", None)
        if not self.store_stale or not self.ready or store is None:
            return
        try:
            with store.transaction():
                rows = resave_definitions(self.broker)
        except (sqlite3.OperationalError, OSError) as exc:
            log.debug("metadata log: definitions.db still refuses writes: %s", exc)
            return
        self.store_stale = False
        log.info("metadata log: definitions.db written again (%d rows)", rows)

    async def hand_over(self) -> None:
        """Orderly stop: hand the leadership over (``QuorumRuntime.hand_over``)."""
        await self.host.hand_over()

    def close(self) -> None:
        """Sync and close the log."""
        self.host.close()

    # ------------------------------------------------------------------ the peer links
    def on_peer_content(self, channel: Any, method: Any, body: bytes) -> bool:
        """Cluster.Quorum content of the metadata group; False for another group's."""
        if not isinstance(method, Quorum) or method.group != METADATA_GROUP:
            return False
        self.host.on_peer_content(channel, method, body)
        if method.kind == QUORUM_STATUS:
            self._check_all()
        return True

    # ------------------------------------------------------------------ proposing
    def change(self, vhost: str, connection: Any, method: Any, done: Done) -> None:
        """``broker.metadata.change``: a client's method in ``vhost`` on ``connection``."""
        command = command_of(vhost, method, connection_id(self.origin, connection), self.me)
        if command is None:
            done(None)
            return

        def answer(outcome: Outcome) -> None:
            done((outcome.code, outcome.text, outcome.connection_level)
                 if isinstance(outcome, Refused) else None)

        self.propose(command, answer)

    def propose(self, command: m.Command,
                done: Callable[[Outcome], None] | None = None, *, replies: bool = True,
                timeout: float | None = None) -> None:
        """Submit ``command``; ``done(outcome)``: this member's machine's outcome at its
        index once the sync-replies count is met (``replies`` False: once applied here),
        ``timeout_refusal`` after ``timeout`` s (default: the runtime's) (None: nobody
        waits)."""
        group = self.group
        if group is None:   # before the first view: no replica yet
            if done is not None:
                done(timeout_refusal(command, self.me))
            return
        try:
            seq = group.submit(command)
        except (ValueError, TypeError) as exc:   # a value the codec cannot carry
            if done is not None:
                done(Refused(406, f"PRECONDITION_FAILED - {exc}"))
            return
        self.pending[seq] = _Proposal(command, done or _ignore, self.clock()
                                      + (self.timeout if timeout is None else timeout),
                                      replies=replies)
        self._flush()

    async def decide(self, command: m.Command) -> Outcome:
        """``propose`` and wait for the outcome (the management API's changes)."""
        got: list[Outcome] = []
        event = anyio.Event()

        def done(outcome: Outcome) -> None:
            got.append(outcome)
            event.set()

        self.propose(command, done)
        await event.wait()
        return got[0]

    def _flush(self) -> None:
        assert self.group is not None
        self.host.execute(self.rep, self.group.flush(self.host.now_ms()))

    # ------------------------------------------------------------------ applying
    def on_effects(self, committed: list[Committed]) -> None:
        """The group applied ``committed`` (in log order): queued for ``_follow_applied``,
        which runs two turns of the event loop later (at once without a running loop), after the
        Raft messages this turn sent are written: the leader tells the followers of a commit
        before its broker follows it, so every member follows in parallel (following commits
        definitions.db, an fsync). Everything applied meanwhile is followed in that one call,
        in log order, in one definitions.db transaction (one fsync)."""
        self._applied += committed
        if self._follow_due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._follow_applied()
            return
        self._follow_due = True
        loop.call_soon(loop.call_soon, self._follow_applied)

    def _follow_applied(self) -> None:
        """The broker follows what was applied since the last call, in one definitions.db
        transaction (committed and fsynced before this returns); then this member's proposals
        among it get their outcome, and the other members hear how far this member applied
        (``MetadataGroup.report``): after the follow, so that an Ok given anywhere means the
        objects exist, durably, on the members it counted. A failure of the follow or of its
        commit makes this member follow the whole state again (``_check_ready``)."""
        self._follow_due = False
        committed, self._applied = self._applied, []
        group, rep = self.group, self.rep
        if group is None or (rep is not None and rep.closed):
            return
        orphans: list = []
        if self.ready and committed:
            store = getattr(getattr(self.broker, "durability", None), "definitions", None)
            try:
                with store.transaction() if store is not None else contextlib.nullcontext():
                    orphans = self._follow_each(committed)
            except (sqlite3.OperationalError, OSError) as exc:   # a full disk: no traceback
                log.warning("metadata log: definitions.db could not take indexes %d-%d (%s); "
                            "the broker follows the log again, and writes its definitions "
                            "again once it can", committed[0].index, committed[-1].index, exc)
                self.ready = False
                self.store_stale = True
                orphans = []
            except Exception as exc:   # a bug or a refused commit must not stop the log
                if self.store_stale:   # definitions.db lacks rows of a failed commit
                    log.warning("metadata log: following indexes %d-%d failed on definitions.db "
                                "(%r, rows missing since a failed commit); reconciling "
                                "everything", committed[0].index, committed[-1].index, exc)
                else:
                    log.exception("metadata log: following indexes %d-%d failed; reconciling "
                                  "everything", committed[0].index, committed[-1].index)
                self.ready = False
                self.store_stale = True
                orphans = []
        on_view = self.on_view
        for c in committed:
            if isinstance(c.command, InstallView) and on_view is not None \
                    and not isinstance(c.outcome, Refused):
                on_view(c.command)   # every member, caught up or not (``committed_views``)
            p = self.pending.get(c.seq) if c.origin == self.origin else None
            if p is not None:
                p.index, p.outcome = c.index, c.outcome
                self._check(c.seq, p)
        if rep is not None:
            self.host.execute(rep, group.report())
        for vhost, name, owner in orphans:
            self.propose(m.DeleteQueue(vhost, name, owner))
        self._check_ready()
        self.broker.run_dispatch()

    def _follow_each(self, committed: list[Committed]) -> list:
        """The broker follows each of ``committed`` in order (``_follow``); returns the
        orphaned private queues. Raises what a follow raises."""
        orphans = []
        for c in committed:
            p = self.pending.get(c.seq) if c.origin == self.origin else None
            orphans += self._follow(c, p.then if p is not None else None)
        return orphans

    def _follow(self, c: Committed, cancels: list | None) -> list:
        """The broker follows what ``c`` changed (``metadata_follow.follow_committed``);
        runtime parameters go to ``follow_parameters``. Returns the orphaned private queues."""
        assert self.group is not None
        return follow_committed(self.broker, self.group.machine.state, self.me, self.origin,
                                c.command, c.outcome, cancels, self.follow_parameters)

    def follow_parameters(self) -> None:
        """Tell ``on_parameters`` the applied runtime parameters (nothing before this member
        follows the log: until then they are its own cache's). A failure is logged: the log
        goes on (the next change or catch-up tells them again)."""
        group = self.group
        if self.on_parameters is None or group is None or not self.ready:
            return
        try:
            self.on_parameters(dict(group.machine.state.parameters))
        except Exception:
            log.exception("metadata log: following the runtime parameters failed")

    def _restored(self) -> None:
        """A snapshot was installed: follow the whole state once caught up again."""
        self.ready = False
        self.broker.accepting_clients = False

    def _check_ready(self) -> None:
        group = self.group
        if self.ready or group is None or not group.caught_up:
            return
        if group.outbox.applied < self._ready_seq:
            return
        try:
            orphans = reconcile(self.broker, group.machine.state, self.me, self.origin)
        except Exception:   # tried again at the next round (``run``)
            log.exception("metadata log: reconciling the broker with the log failed")
            return
        self.ready = True
        self.follow_parameters()
        self._mark_followed()
        if self.forced:
            self.forced = False
            try:
                force_boot.clear(self.directory.parent.parent)
            except OSError:
                log.exception("metadata log: could not remove the force_boot marker")
        log.info("metadata log: caught up at index %d; definitions follow it",
                 group.machine_index)
        for vhost, name, owner in orphans:
            self.propose(m.DeleteQueue(vhost, name, owner))
        if self.on_ready is not None:
            self.on_ready()

    def _mark_followed(self) -> None:
        """Write ``FOLLOWED_MARK`` (once, durably) so that a restart does not found again."""
        mark = self.directory / FOLLOWED_MARK
        if mark.exists():
            return
        try:
            with open(mark, "wb") as f:
                if self.host.fsync:
                    os.fsync(f.fileno())
            if self.host.fsync:
                fsync_dir(self.directory)
        except OSError:   # tried again at the next restart's first follow
            log.exception("metadata log: could not write %s", mark)

    def _others(self) -> list[str]:
        group = self.group
        assert group is not None
        view = self.host.view
        return [n for n in group.members if n != self.me and n in view]

    def _check(self, seq: int, p: _Proposal) -> None:
        group = self.group
        if p.index == 0 or group is None:
            return
        others = self._others()
        need = reply_quorum(self.reply_policy, len(others)) if p.replies else 0
        if group.applied_count(p.index, others) < need:
            return
        del self.pending[seq]
        p.done(p.outcome)
        _send_cancels(p.then)

    def _check_all(self) -> None:
        for seq, p in list(self.pending.items()):
            if p.index:
                self._check(seq, p)

    def _expire(self) -> None:
        now = self.clock()
        for seq, p in list(self.pending.items()):
            if now >= p.deadline:
                del self.pending[seq]
                if p.index:   # committed and applied here: the others did not report in time
                    p.done(p.outcome)
                    _send_cancels(p.then)
                else:
                    p.done(timeout_refusal(p.command, self.me))
        if self.pending:
            self.broker.run_dispatch()

    def status(self) -> dict[str, Any]:
        """The replica's figures (cluster-status, logs)."""
        group = self.group
        if group is None:
            return {}
        node = group.node
        return {"leader": node.leader, "term": node.term, "members": list(node.members),
                "commit_index": node.commit_index, "applied_index": group.machine_index,
                "ready": self.ready}


def _ignore(_outcome: Outcome) -> None:
    return None


def _send_cancels(cancels: list[tuple[Any, str]]) -> None:
    for ch, tag in cancels:
        send_cancel(ch, tag)
