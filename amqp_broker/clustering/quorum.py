"""The I/O half of quorum queues (issue 12): replicas on disk, Raft timers, the group commit in a
worker thread, and Raft traffic on the cluster's peer links (``quorum_wire``). The logic is in
``cluster.quorum``.

Owns, per broker: ``QuorumRuntime``, the ``broker.queue_types["quorum"]`` factory. For each quorum
queue it opens the replica's ``DiskLog`` under ``<data-dir>/quorum/<group id>/`` and runs the
actions its ``QuorumGroup`` returns, in order: ``Send`` / ``Forward`` -> a Cluster.Quorum method
plus content on the peer link to that member (dropped while the link is down: Raft re-sends);
``AppendLog`` -> buffered in the log, made durable by the group commit (one fdatasync per round
for every replica, in a worker thread; then ``persisted``); ``PersistState`` / ``PersistSnapshot``
-> in a worker thread too, holding that replica's later actions until done (Raft's "durable
before responding"); ``Apply`` -> the machine, then the queue object's effects (deliveries,
confirms). Nothing fsyncs on the event loop. Bodies stay in the log (``quorum_paging``).

Orderly stop (SIGTERM): ``hand_over`` transfers each leadership held here first.
Timers (``quorum_timers``, mixed in with the group commit): every ``TICK_MS`` the replicas due are
ticked (elections, heartbeats, re-sends) and the leaders do their duties (Down for members that
left the cluster view, TTL expiry; a queue with ``x-dead-letter-strategy: at-least-once`` gets a
dead-letter worker, ``quorum_dlx``, that acts on its leader). A broker without clustering serves
quorum queues too: a group of one, persisted (RabbitMQ accepts
``x-queue-type: quorum`` on a single node). A member outside a queue's group (a cluster larger than
``x-quorum-initial-group-size``) holds no replica: it forwards publishes and its consumers'
commands to the group, hears from the leader how far they were applied, and receives from the
leader the deliveries of its consumers (``Ship``; it reports what they hold with ``Holding``:
``cluster.quorum.remote``, ``cluster.quorum.shipping``). Basic.Get there is refused (406).

Times: Raft runs on the monotonic clock in ms; commands carry the wall clock in ms (TTL).
Sources: Raft paper §5-§8; RabbitMQ "Quorum Queues"; DESIGN.md §4, §4a."""

from __future__ import annotations

import errno
import logging
import random
import shutil
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from cluster.codec import (
    QUORUM_CHANGE,
    QUORUM_FORWARD,
    QUORUM_HOLDING,
    QUORUM_MEMBERS,
    QUORUM_NOTIFY,
    QUORUM_RAFT,
    QUORUM_SHIP,
    QUORUM_STATUS,
    Quorum,
)
from cluster.quorum import config as qconfig
from cluster.quorum.group import (
    Action,
    Change,
    Forward,
    Members,
    Notify,
    QuorumGroup,
    Status,
)
from cluster.quorum.machine import QuorumMachine
from cluster.quorum.queue import QuorumQueue
from cluster.quorum.remote import RemoteGroup
from cluster.quorum.shipping import Holding, Ship
from cluster.raft import actions as ra
from cluster.raft import codec as raft_codec
from cluster.raft.disklog import DiskLog
from cluster.raft.fifo import FifoConfig
from cluster.raft.messages import Entry
from cluster.raft.node import RaftNode
from cluster.raftgroup import encode_forward
from queues.dead_letter import make_dead_letter
from queues.message import Message

from ..protocol.methods import encode_method
from . import quorum_paging as paging
from .quorum_dlx import DeadLetterWorker, route_dead_letter
from .quorum_members import ReplicaManagement, has_log, read_members
from .quorum_timers import TICK_MS, QuorumTimers
from .quorum_wire import NOTICE, QuorumWire

__all__ = ["QuorumRuntime", "TIMING", "TICK_MS", "install"]

log = logging.getLogger(__name__)

#: Errors of a full file system, waited out (see ``_persist_async``).
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Seconds between tries of a Raft state or snapshot write while the disk is full, and how many
#: tries (a day's worth) before the broker gives up and stops.
PERSIST_RETRY_SECONDS = 0.5
PERSIST_RETRIES = 172_800

#: Raft timings of quorum queues: a follower that hears no leader for 600-1200 ms starts an
#: election (so a dead leader's queue is served again in about 1-1.5 s).
TIMING = ra.Timing(election_ms=600, heartbeat_ms=100, max_batch_entries=512,
                   max_batch_bytes=1 << 20, max_inflight=8, snapshot_keep=256)


class _Replica:
    """One quorum queue on this broker and the I/O state around it: ``raft`` (the replica, with
    its ``log``) when this broker holds one, ``remote`` when it serves the queue from outside the
    group (both while a new replica catches up), ``group`` the one the queue object uses;
    ``blocked``: how many worker-thread jobs its later actions wait for (kept in ``backlog``)."""

    __slots__ = ("uid", "vhost", "name", "members", "log", "group", "raft", "remote", "queue",
                 "blocked", "backlog", "closed", "prefix", "directory", "config", "notice_key")

    def __init__(self, uid: str, vhost: str, name: str, members: tuple[str, ...],
                 directory: Path, config: FifoConfig) -> None:
        self.uid = uid
        self.vhost = vhost
        self.name = name
        self.members = members
        self.directory = directory
        self.config = config
        self.log: DiskLog | None = None
        self.raft: QuorumGroup | None = None
        self.remote: RemoteGroup | None = None
        self.group: QuorumGroup | RemoteGroup | None = None
        self.queue: QuorumQueue | None = None
        self.blocked = 0
        self.backlog: deque[Action] = deque()
        self.closed = False
        self.notice_key = (0, 0)   # (term, index) of the newest members notice taken
        self.prefix = {kind: encode_method(1, Quorum(vhost, name, uid, kind))[7:-1]
                       for kind in (QUORUM_RAFT, QUORUM_FORWARD, QUORUM_NOTIFY, QUORUM_SHIP,
                                    QUORUM_HOLDING, QUORUM_STATUS, QUORUM_CHANGE,
                                    QUORUM_MEMBERS)}


class QuorumRuntime(QuorumWire, ReplicaManagement, QuorumTimers):
    """Quorum queues of one broker (see the module docstring). ``me``: this broker's node name;
    ``data_dir``: the broker's data directory; ``fsync``: False under ``--sync-policy none``."""

    def __init__(self, broker: Any, data_dir: Path | str, me: str, *, fsync: bool = True,
                 timing: ra.Timing = TIMING, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.root = Path(data_dir) / "quorum"
        self.me = me
        self.fsync = fsync
        self.timing = timing
        self.clock = clock
        self.wall = wall
        self.origin = f"{me}#{int(wall() * 1000)}"
        self.replicas: dict[str, _Replica] = {}
        self.view: set[str] = {me}
        self.view_number = 0
        self.links: Any = None
        self.addresses: Callable[[], dict[str, str]] = dict
        self._tg: Any = None
        self._dirty: set[_Replica] = set()
        #: Replicas whose last log write failed (ENOSPC), retried by the group commit.
        self._unwritten: set[_Replica] = set()
        #: Replicas whose fsyncs a group-commit round runs in a worker thread right now, and
        #: the closed replicas whose log fds wait for that round to end: closing them, or a mark
        #: written into a deleted directory, under a running fsync crashed the broker (CI at
        #: 385178e: a quorum queue deleted during a group commit).
        self._syncing: set[_Replica] = set()
        self._closing: set[_Replica] = set()
        self._sync_wake: anyio.Event | None = None
        self._held: dict[str, deque[bytes]] = {}
        self._held_bytes: dict[str, int] = {}
        self._connect_ms: dict[str, int] = {}   # last link (re)open attempt per member
        self._rng = random.Random()
        #: True while someone runs the group commit (``run``'s syncer, or a caller of
        #: ``sync_round``): appends wait for it instead of being synced at once.
        self.group_commit = False

    # ------------------------------------------------------------------ clocks
    def now_ms(self) -> int:
        """The Raft clock (monotonic, ms)."""
        return int(self.clock() * 1000)

    def wall_ms(self) -> int:
        """The clock commands carry (wall, ms)."""
        return int(self.wall() * 1000)

    # ------------------------------------------------------------------ the factory
    def check_arguments(self, arguments: dict) -> None:
        """``QueueTypeFactory.check_arguments``: see ``cluster.quorum.config.check_arguments``;
        also 406 when this broker would not hold a replica (not served yet)."""
        qconfig.check_arguments(arguments)

    def create(self, vhost: Any, name: str, settings: Any, *, arguments: dict) -> QuorumQueue:
        """``QueueTypeFactory.create``: open (or found) this broker's replica of the queue and
        its queue object. A new declaration gets its group (hidden arguments added to
        ``arguments``, which become the queue's and travel with the declaration). Raises
        ``InvalidArgument`` when this broker is not in the group, ``OSError`` / ``FormatError``
        for an unusable replica directory."""
        members_arg = arguments.get(qconfig.MEMBERS_ARG)
        if isinstance(members_arg, str) and members_arg and qconfig.GROUP_ARG in arguments:
            members = tuple(sorted(members_arg.split(",")))
            uid = str(arguments[qconfig.GROUP_ARG])
        elif isinstance(members_arg, str) and members_arg:   # chosen by a policy (ha-mode nodes)
            members = tuple(sorted(members_arg.split(",")))
            uid = qconfig.group_id(vhost.name, name, members, self.view_number)
            arguments[qconfig.GROUP_ARG] = uid
        else:
            size = arguments.get("x-quorum-initial-group-size") or qconfig.DEFAULT_GROUP_SIZE
            members = qconfig.choose_members(self.view, int(size), vhost.name, name)
            uid = qconfig.group_id(vhost.name, name, members, self.view_number)
            arguments[qconfig.MEMBERS_ARG] = ",".join(members)
            arguments[qconfig.GROUP_ARG] = uid
        old = self.replicas.get(uid)
        if old is not None:   # declared again (recovery, a replay): one replica per group
            self._close(old, delete_files=False)
        directory = self.root / uid
        known = read_members(directory)   # the newest configuration this broker was told
        if known is not None:
            members = known[1]
        rep = _Replica(uid, vhost.name, name, members, directory,
                       qconfig.fifo_config(settings, arguments))
        if has_log(directory):            # a replica: member, catching up, or stale
            self._open_replica(rep, bootstrap=())
        elif known is None and self.me in members and self.broker.accepting_clients:
            self._open_replica(rep, bootstrap=members)   # a new group: every member bootstraps
            if "x-delivery-limit" not in arguments:   # RabbitMQ 4.0 logs this at declaration
                log.info("queue '%s' in vhost '%s': delivery_limit not set, defaulting to %d",
                         name, vhost.name, qconfig.DEFAULT_DELIVERY_LIMIT)
        # else, while joining (the queue is older than this broker's join: a wiped member
        # would vote with an empty log), a replica only when the leader names us (``_join``)
        raft = rep.raft
        if raft is not None and self.me in raft.members:
            rep.group = raft
        else:   # no replica here (or not a member yet): forward to the group
            rep.remote = RemoteGroup(self.me, self.origin, members,
                                     QuorumMachine(rep.config),
                                     raft.outbox if raft is not None else None)
            rep.group = rep.remote
        dlx = settings.dead_letter_exchange

        def dead_lettered(message: Message, reason: str) -> tuple[Message, list[str]]:
            assert dlx is not None
            return make_dead_letter(message, reason=reason, queue=name, dead_letter_exchange=dlx,
                                    dead_letter_routing_key=settings.dead_letter_routing_key,
                                    now=self.wall())

        def dead_letter(message: Message, reason: str) -> None:
            if dlx is not None:
                new, keys = dead_lettered(message, reason)
                vhost._dead_letter(new, dlx, keys)

        rep.queue = QuorumQueue(name, settings, arguments, rep.group,
                                execute=lambda actions: self.execute(rep, actions),
                                wake=self._wake, wall_ms=self.wall_ms, now_ms=self.now_ms,
                                dead_letter=dead_letter,
                                on_delete=lambda _q: self._close(rep, delete_files=True))
        self._dead_letter_strategy(rep, vhost, settings, arguments, dead_lettered)
        self.replicas[uid] = rep
        self.ticker_wanted()
        if raft is not None:
            self.execute(rep, raft.node.tick(self.now_ms()))   # the bootstrap entry, when new
            log.info("quorum queue %r of vhost %r: replica of group %s (%s), log at index %d",
                     name, vhost.name, uid, ", ".join(raft.members), raft.node.log.last_index)
        else:
            log.info("quorum queue %r of vhost %r: no replica here, forwarding to group %s (%s)",
                     name, vhost.name, uid, ", ".join(members))
        return rep.queue

    def _dead_letter_strategy(self, rep: _Replica, vhost: Any, settings: Any, arguments: dict,
                              dead_lettered: Callable[[Message, str], tuple[Message, list[str]]]
                              ) -> None:
        """Log RabbitMQ's warning when x-dead-letter-strategy falls back; with at-least-once,
        give the queue its dead-letter worker (``quorum_dlx``)."""
        at_least_once, warning = qconfig.dead_letter_strategy(
            settings, arguments, f"queue '{rep.name}' in vhost '{rep.vhost}'")
        if warning:
            log.warning("%s", warning)
        if not at_least_once or rep.queue is None:
            return

        def route(message: Message, reason: str) -> tuple[int | None, list] | None:
            new, keys = dead_lettered(message, reason)
            return route_dead_letter(vhost, new, str(settings.dead_letter_exchange), keys)

        rep.queue.dlx = DeadLetterWorker(rep.queue, route, self.broker.durability, self.now_ms)

    def _open_replica(self, rep: _Replica, bootstrap: tuple[str, ...], term: int = 0,
                      vote_floor: int = 0) -> QuorumGroup:
        """Open (or create) ``rep``'s replica: its disk log, Raft node and machine. A joining
        replica starts empty at ``term``, the term of the leader that asked for it, so that it
        can vote in no older term, and votes only once its log reaches ``vote_floor`` (that
        leader's commit index: its files were deleted if it was a member before)."""
        disk = DiskLog(rep.directory, fsync=self.fsync, lazy=True)
        state = disk.load()
        empty = not state.entries and not state.snapshot.index and state.dry is None
        stored = state.term
        if term > stored:
            state = replace(state, term=term, voted_for=None)
        node = RaftNode(self.me, state, self.now_ms(), self.timing,
                        random.Random(self._rng.random()),
                        bootstrap=bootstrap if empty else (), vote_floor=vote_floor)
        outbox = rep.remote.outbox if rep.remote is not None else None
        rep.raft = QuorumGroup(self.me, self.origin, node, QuorumMachine(rep.config), outbox)
        rep.log = disk
        paging.page(rep.raft, disk, rep.name)
        if term > stored:
            self.execute(rep, [ra.PersistState(term, None)])
        return rep.raft

    def host_group(self, uid: str, directory: Path, group: Any, disk: DiskLog,
                   sink: Any) -> _Replica:
        """Run a Raft group that is no queue's on this runtime's transport (Cluster.Quorum with
        group ``uid``), timers and group commit: the cluster metadata log
        (``clustering.metadata``, a runtime of its own). ``group`` answers as a
        ``QuorumGroup`` does (``receive``, ``forwarded``, ``tick``, ``leader_duties``,
        ``apply``, ``status`` ...) over its Raft node on ``disk`` (in ``directory``);
        ``sink.on_effects(effects)`` gets what its ``apply`` returns (``sink.deleted``:
        False)."""
        rep = _Replica(uid, "", uid, tuple(group.members), directory, None)  # type: ignore[arg-type]
        rep.log, rep.raft, rep.group, rep.queue = disk, group, group, sink
        self.replicas[uid] = rep
        self.ticker_wanted()
        self.execute(rep, group.node.tick(self.now_ms()))   # the bootstrap entry, when new
        return rep

    def _wake(self, queue: QuorumQueue) -> None:
        self.broker.needs_dispatch.add(queue)

    def _close(self, rep: _Replica, delete_files: bool) -> None:
        if rep.closed:
            return
        rep.closed = True
        self._dirty.discard(rep)
        if self.replicas.get(rep.uid) is rep:
            del self.replicas[rep.uid]
        if delete_files:
            # deleted now (a new queue of the same name may open the same directory at once);
            # a group commit still syncing this log holds its fds and writes no mark
            if rep.log is not None:
                rep.log.abandon()
            shutil.rmtree(rep.directory, ignore_errors=True)
        self._closing.add(rep)
        self.close_deferred()

    def close_deferred(self) -> None:
        """Close the logs of closed replicas that no worker thread uses any more (a group-commit
        fsync, a Raft state or snapshot persist): never an fd under a running fsync."""
        for rep in [r for r in self._closing if not r.blocked and r not in self._syncing]:
            self._closing.discard(rep)
            self._close_log(rep)

    def _close_log(self, rep: _Replica) -> None:
        try:
            if rep.log is not None:
                rep.log.close()
        except OSError as exc:
            log.error("quorum queue %r: closing its log: %s", rep.name, exc)

    # ------------------------------------------------------------------ running actions
    def execute(self, rep: _Replica, actions: Iterable[Action]) -> None:
        """Run ``actions`` of ``rep``'s group in order (after any it still holds)."""
        if rep.closed:
            return
        if rep.blocked:
            rep.backlog.extend(actions)
            return
        self._drain(rep, deque(actions))

    def _drain(self, rep: _Replica, todo: deque[Action]) -> None:
        group = rep.raft
        if group is None:   # no replica: only forwards and holding reports
            for act in todo:
                if isinstance(act, Forward):
                    self._forward(rep, act)
                elif isinstance(act, Holding):
                    self._send(rep, act.to, QUORUM_HOLDING, act.payload)
            return
        disk = rep.log
        assert disk is not None
        while todo:
            act = todo.popleft()
            kind = type(act)
            if kind is ra.Send:
                message = paging.outgoing(group, act.message)  # type: ignore[union-attr,arg-type]
                self._send(rep, act.to, QUORUM_RAFT, raft_codec.encode(message))  # type: ignore[union-attr]
            elif kind is ra.AppendLog:
                disk.append(act.first_index, act.entries)  # type: ignore[union-attr,arg-type]
                self._mark_dirty(rep)
            elif kind is ra.Apply:
                entries = act.entries  # type: ignore[union-attr]
                parts = paging.batches(group, entries)
                for batch in parts:
                    self._apply_part(rep, group, disk, batch, todo)
                    if self._tg is not None and type(entries) is not tuple:   # a replay
                        self._hold(rep)
                        self._tg.start_soon(self._replay_rest, rep, group, disk, parts, todo)
                        return
            elif kind is Forward:
                self._forward(rep, act)  # type: ignore[arg-type]
            elif kind is Ship:   # deliveries for consumers outside the group: kept for the link
                self._send(rep, act.to, QUORUM_SHIP, act.payload, hold=True)  # type: ignore[union-attr]
            elif kind is Holding:
                self._send(rep, act.to, QUORUM_HOLDING, act.payload)  # type: ignore[union-attr]
            elif kind is Status:
                self._send(rep, act.to, QUORUM_STATUS, act.payload)  # type: ignore[union-attr]
            elif kind is Notify:
                origin = act.origin.encode()  # type: ignore[union-attr]
                self._send(rep, act.to, QUORUM_NOTIFY, b"".join((  # type: ignore[union-attr]
                    struct.pack(">H", len(origin)), origin,
                    NOTICE.pack(act.applied, act.resend))))  # type: ignore[union-attr]
            elif kind is ra.StateChanged:
                if act.role is ra.Role.LEADER:  # type: ignore[union-attr]
                    log.info("quorum queue %r: this replica leads (term %d)", rep.name,
                             act.term)  # type: ignore[union-attr]
                todo.extend(group.state_changed(act, self.now_ms()))  # type: ignore[arg-type]
            elif kind is ra.Restore:
                snap = act.snapshot  # type: ignore[union-attr]
                group.restore(snap.index, snap.data)
            elif kind is ra.MembershipChanged:
                self._membership_changed(rep, act)  # type: ignore[arg-type]
            elif kind is Members:
                self._send(rep, act.to, QUORUM_MEMBERS, act.payload)  # type: ignore[union-attr]
            elif kind is Change:
                self._send(rep, act.to, QUORUM_CHANGE, act.payload)  # type: ignore[union-attr]
            elif kind is ra.PersistState or kind is ra.PersistSnapshot:
                paging.persisting(group, disk, act)  # type: ignore[arg-type]
                if self._tg is None:
                    self._persist(rep, act)
                    continue
                self._hold(rep)
                rep.backlog = todo
                self._tg.start_soon(self._persist_async, rep, act)
                return

    def _apply_part(self, rep: _Replica, group: QuorumGroup, disk: DiskLog,
                    batch: Sequence[Entry], todo: deque[Action]) -> None:
        """Apply committed ``batch`` to ``group``'s machine; its effects to the queue object,
        the actions it makes to ``todo``."""
        effects, more = group.apply(batch, self.now_ms())
        paging.applied(group, disk)
        if rep.queue is not None and not rep.queue.deleted:
            rep.queue.on_effects(effects)
        todo.extend(more)

    async def _replay_rest(self, rep: _Replica, group: QuorumGroup, disk: DiskLog,
                           parts: Iterator[Sequence[Entry]], todo: deque[Action]) -> None:
        """The rest of a replay (an ``Apply`` of entries loaded without their objects: a
        restart's backlog, ``quorum_paging.batches``), a part at a time with the event loop
        run between parts: the broker serves other queues, connections and its management API
        meanwhile. The replica is held (``_hold``) until done: its Raft actions wait in its
        backlog (publishes to it are confirmed, and its consumers served, once replayed), while
        a passive declare counts the messages replayed so far. Then ``todo`` (what followed the
        ``Apply``) runs, then what waited."""
        try:
            for batch in parts:
                await anyio.sleep(0)
                if rep.closed:
                    break
                self._apply_part(rep, group, disk, batch, todo)
        finally:
            todo.extend(rep.backlog)
            rep.backlog = todo
            self._release(rep)

    def _forward(self, rep: _Replica, act: Forward) -> None:
        self._send(rep, act.to, QUORUM_FORWARD, encode_forward(act.envelopes), hold=True)

    def _persist(self, rep: _Replica, act: Any) -> None:
        assert rep.log is not None
        if isinstance(act, ra.PersistState):
            rep.log.save_state(act.term, act.voted_for)
        else:
            rep.log.save_snapshot(act.snapshot, act.discard_log)

    async def _persist_async(self, rep: _Replica, act: Any) -> None:
        """Persist a Raft state or snapshot in a worker thread (the replica held meanwhile). A
        full disk (ENOSPC, EDQUOT) is waited out: tried again every ``PERSIST_RETRY_SECONDS``
        (each try writes its file whole again, then renames it: ``DiskLog._replace``), the
        replica's later actions held until it succeeds. Other errors stop the broker."""
        for attempt in range(PERSIST_RETRIES):
            try:
                await anyio.to_thread.run_sync(self._persist, rep, act)
                break
            except OSError as exc:
                if rep.closed:        # deleted meanwhile: its directory went with it
                    log.debug("quorum queue %r: closed while persisting: %s", rep.name, exc)
                    break
                if exc.errno not in _NO_SPACE or attempt == PERSIST_RETRIES - 1:
                    log.critical("quorum queue %r: cannot persist its Raft state: %s",
                                 rep.name, exc)
                    raise
                if not attempt:
                    log.error("quorum queue %r: cannot persist its Raft state (%s); trying "
                              "again every %g s", rep.name, exc, PERSIST_RETRY_SECONDS)
                await anyio.sleep(PERSIST_RETRY_SECONDS)
        self._release(rep)

    def _hold(self, rep: _Replica) -> None:
        """A worker-thread job starts that ``rep``'s later actions must wait for (a Raft state or
        snapshot persist, a ``members.json`` write): ``execute`` keeps them meanwhile, the timers
        and the group commit leave the replica alone."""
        rep.blocked += 1

    def _release(self, rep: _Replica) -> None:
        """A job of ``_hold`` is done. After the last one: run the actions that waited, and wake
        the group commit when the replica has appends it skipped meanwhile (else they would wait
        for the next append: a follower would not acknowledge them, and a leader whose followers
        are all in that state would commit nothing more -- issue 12, the replica-move stall)."""
        rep.blocked -= 1
        if rep.closed:
            self.close_deferred()
        if rep.blocked or rep.closed:
            return
        todo, rep.backlog = rep.backlog, deque()
        self._drain(rep, todo)
        if rep in self._dirty and self._sync_wake is not None:
            self._sync_wake.set()
        self.broker.run_dispatch()

    def _mark_dirty(self, rep: _Replica) -> None:
        assert rep.log is not None
        self._dirty.add(rep)
        if self._sync_wake is not None:
            self._sync_wake.set()
        elif self._tg is None and not self.group_commit:   # not running yet (recovery): sync now
            pending, newest = rep.log.flush()
            pending.run()
            self._dirty.discard(rep)
            if newest is not None and rep.raft is not None:
                self.execute(rep, rep.raft.persisted(*newest))

    def close(self) -> None:
        """Sync and close every replica's log (broker stop)."""
        for rep in list(self.replicas.values()):
            self._close(rep, delete_files=False)


def install(broker: Any, data_dir: Path | str, me: str, fsync: bool = True) -> QuorumRuntime:
    """Make ``broker`` serve ``x-queue-type: quorum`` (before recovery, so recovered quorum
    queues open their replicas): registers the runtime as the factory and as the content sink of
    peer connections. Returns it (``run()`` it in the broker's task group; ``attach`` it to the
    cluster's links when clustering)."""
    runtime = QuorumRuntime(broker, data_dir, me, fsync=fsync)
    broker.queue_types["quorum"] = runtime
    broker.peer_content = runtime.on_peer_content
    broker.quorum = runtime
    return runtime
