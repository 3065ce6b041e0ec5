"""The timers and the group commit of quorum queues on one broker: the tasks half of
``quorum.QuorumRuntime`` (mixed in).

Owns: ``run`` (the two tasks, in the broker's task group), the timer round every ``TICK_MS``
while the broker holds a replica or link data (``tick_all``: Raft elections and heartbeats,
re-sends, the leaders' duties, link data held while a link was down), the group commit
(``begin_sync`` -> the fdatasyncs in a worker thread -> ``end_sync``: one round for every replica
appended to since the last; ``sync_round`` runs a whole round in the caller's thread, for a
driver without an event loop such as ``benchmarks.quorumpath``) and the orderly stop's leadership hand-over (``hand_over``).
Sources: Raft paper §5.2 (timers), thesis §3.10 (leadership transfer), §10.2.1 (the leader writes
to its disk in parallel with replication).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import anyio

from queues.store.values import PendingSync

if TYPE_CHECKING:
    from cluster.quorum.group import Action

__all__ = ["QuorumTimers", "TICK_MS"]

log = logging.getLogger(__name__)

#: The timer round's period (ms): replicas due are ticked, leaders do their duties.
TICK_MS = 50
#: Seconds between group-commit rounds while a replica's log cannot be written (ENOSPC).
WRITE_RETRY_SECONDS = 0.5


class QuorumTimers:
    """The timers and group-commit half of ``QuorumRuntime`` (see the module docstring)."""

    if TYPE_CHECKING:
        broker: Any
        replicas: dict[str, Any]
        view: set[str]
        view_number: int
        links: Any
        group_commit: bool
        _tg: Any
        _dirty: set[Any]
        _unwritten: set[Any]
        _syncing: set[Any]
        _closing: set[Any]
        _held: dict[str, Any]
        _held_bytes: dict[str, int]
        _sync_wake: anyio.Event | None

        def now_ms(self) -> int: ...
        def wall_ms(self) -> int: ...
        def execute(self, rep: Any, actions: Iterable[Action]) -> None: ...
        def close_deferred(self) -> None: ...

    async def run(self) -> None:
        """The timers and the group commit; runs until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._sync_wake = anyio.Event()
            self.group_commit = True
            if self._dirty:
                self._sync_wake.set()
            tg.start_soon(self._syncer)
            tg.start_soon(self._ticker)

    #: Set while the timer round sleeps for want of replicas (``ticker_wanted`` wakes it).
    _ticker_idle: anyio.Event | None = None

    async def _ticker(self) -> None:
        while True:
            if not self.replicas and not any(self._held.values()):
                # nothing to time on a broker without quorum replicas: no wake-ups (issue 14)
                idle = self._ticker_idle = anyio.Event()
                await idle.wait()
            await anyio.sleep(TICK_MS / 1000)
            self.tick_all()

    def ticker_wanted(self) -> None:
        """A replica was added: the timer round runs again (it sleeps while there is none)."""
        idle, self._ticker_idle = self._ticker_idle, None
        if idle is not None:
            idle.set()

    def tick_all(self) -> None:
        """One round of the timers (every ``TICK_MS``): the replicas due are ticked, leaders do
        their duties (and their at-least-once dead-letter workers theirs), held link data goes
        out once a link is back, then the broker dispatches."""
        now = self.now_ms()
        wall = self.wall_ms()
        # a clustered broker knows who left only once it is in a view
        view = self.view if self.links is None or self.view_number else None
        for rep in list(self.replicas.values()):
            if rep.closed or rep.blocked:
                continue
            remote, group = rep.remote, rep.raft
            if remote is not None and rep.group is remote:   # outside (or catching up)
                if remote.outbox.pending or remote.checkouts:
                    self.execute(rep, remote.tick(now))
                if group is not None and now >= group.node.next_deadline():
                    self.execute(rep, group.node.tick(now))   # Raft timers only
                continue
            if group is None:
                continue
            if now >= group.node.next_deadline() or group.outbox.pending:
                self.execute(rep, group.tick(now))
            if group.is_leader:
                self.execute(rep, group.leader_duties(now, wall, view))
            worker = getattr(rep.queue, "dlx", None)
            if worker is not None:   # at-least-once dead letters (acts only on the leader)
                worker.duties()
        for to in [t for t, held in self._held.items() if held]:
            if self.links is not None and self.links.can_send(to, 1 << 30):
                self._held_bytes.pop(to, None)
                for item in self._held.pop(to):
                    self.links.send_raw(to, item)
        self.broker.run_dispatch()

    async def _syncer(self) -> None:
        assert self._sync_wake is not None
        while True:
            await self._sync_wake.wait()
            self._sync_wake = anyio.Event()
            flushed = self.begin_sync()
            try:
                await anyio.to_thread.run_sync(_run_all, [p for _r, p, _n in flushed])
            except OSError as exc:
                log.critical("quorum queues: fsync failed: %s; stopping", exc)
                raise
            self.end_sync(flushed)
            if self._unwritten:          # a full disk: try again soon, new appends or not
                await anyio.sleep(WRITE_RETRY_SECONDS)
                self._sync_wake.set()

    def begin_sync(self) -> list[tuple[Any, PendingSync, tuple[int, int] | None]]:
        """Start a group-commit round: write out the logs appended to since the last round;
        returns per replica its fsync still to run (any thread) and the newest (log index,
        term) it makes durable. Then run the fsyncs and call ``end_sync`` on the loop."""
        reps = [r for r in self._dirty if not r.blocked and not r.closed]
        self._dirty.difference_update(reps)
        flushed = []
        for r in reps:
            if r.log is None:
                continue
            try:
                flushed.append((r, *r.log.flush()))
            except OSError as exc:
                # a write failed (ENOSPC): the log is whole and keeps its buffer (DiskLog.flush);
                # nothing of it is reported persisted, so this replica acknowledges nothing new
                # and, as a leader, counts only its followers; the next round tries again
                self._dirty.add(r)
                if r not in self._unwritten:
                    log.error("quorum queue %r: cannot write its log (%s); trying again every "
                              "%g s", r.name, exc, WRITE_RETRY_SECONDS)
                    self._unwritten.add(r)
                continue
            if r in self._unwritten:
                self._unwritten.discard(r)
                log.warning("quorum queue %r: writing its log again", r.name)
        self._unwritten = {r for r in self._unwritten if not r.closed}
        self._syncing = {r for r, _p, _n in flushed}
        return flushed

    def end_sync(self, flushed: list[tuple[Any, PendingSync, tuple[int, int] | None]]
                 ) -> None:
        """The fsyncs of a ``begin_sync`` round ran: tell each replica's Raft node
        (``persisted``), then let the broker dispatch (deliveries, confirms). Replicas closed
        meanwhile have their log fds closed now."""
        self._syncing = set()
        self.close_deferred()
        for rep, _p, newest in flushed:
            if newest is not None and not rep.closed and rep.raft is not None:
                self.execute(rep, rep.raft.persisted(*newest))
        self.broker.run_dispatch()

    def sync_round(self) -> bool:
        """One whole group-commit round in this thread (``begin_sync``, the fsyncs,
        ``end_sync``), for a caller that drives the runtime without ``run``. Returns whether
        there was anything to write. Raises ``OSError`` when an fsync fails."""
        flushed = self.begin_sync()
        if not flushed:
            return False
        _run_all([p for _r, p, _n in flushed])
        self.end_sync(flushed)
        return True

    async def hand_over(self, grace: float = 1.0) -> int:
        """Orderly stop: every replica that leads hands leadership to its most up-to-date
        follower (Raft thesis §3.10: no election timeout for the others to wait out); waits up to
        ``grace`` seconds for them to step down. Returns how many still lead."""
        for rep in list(self.replicas.values()):
            group = rep.raft
            if group is not None and group.is_leader and not rep.closed:
                self.execute(rep, group.node.transfer_leadership())
        with anyio.move_on_after(grace):
            while self._leading():
                await anyio.sleep(0.02)
        return self._leading()

    def _leading(self) -> int:
        return sum(1 for r in self.replicas.values()
                   if r.raft is not None and r.raft.is_leader and not r.closed)


def _run_all(pendings: list[Any]) -> None:
    """Run the fsyncs of one group-commit round (in a worker thread)."""
    for pending in pendings:
        pending.run()
