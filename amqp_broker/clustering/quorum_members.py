"""Replica management of quorum queues on one broker: the I/O half of ``cluster.quorum.members``
(RabbitMQ's ``rabbitmq-queues add_member / delete_member / grow / shrink``), mixed into
``quorum.QuorumRuntime``.

Owns: taking change requests (from the management API on this broker, or passed by another
broker as Cluster.Quorum ``QUORUM_CHANGE``) to the group's leader and waiting until the
committed configuration shows them; the leader's members notices (``QUORUM_MEMBERS``) as every
broker takes them: a broker named as a learner opens an empty replica at the leader's term, which
the leader catches up (snapshot + log, Raft thesis §4.2.1) while the queue object still forwards
from outside, and which it serves from once a configuration entry naming it is in its log; a
broker with a replica that the leader's committed and newest configurations and learners all
leave out closes its replica, deletes its log files and serves the queue from outside the group
(``cluster.quorum.remote``: its consumers keep what they hold, the leader ships the rest).

Files: ``<data-dir>/quorum/<group id>/members.json`` ``{"index": N, "members": [...]}``: the
newest committed configuration this broker was told (written atomically and fsynced in a worker
thread). At start a broker holds a replica of a queue when the directory holds log files, and
bootstraps a new group only when it is in the declared members and has no ``members.json`` --
so a broker removed from a group never comes back as a member of the declared one, and a broker
outside the group forwards to the members it was last told, not those declared -- and only when
it is not joining the cluster: a declaration in the join replay is older than this broker's join,
and a broker with no files for it is a member whose disk was wiped (issue 24's ``wipe-rejoin``),
which must not vote with an empty log; it serves from outside until the leader's notice names it
(``_join``: an empty replica at the leader's term, voting once it reaches the leader's commit).
Errors (``MemberError.reason``) as RabbitMQ's ``rabbit_quorum_queue``: ``not_found``,
``node_not_running``, ``last_node``; ours: ``timeout`` (the change did not show within the
timeout: no leader, another change under way, or the new replica did not catch up).
Sources: RabbitMQ "Quorum Queues" (Replica management), rabbitmq-queues(8); Ongaro's thesis
§4.1-§4.2.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from cluster.codec import QUORUM_CHANGE
from cluster.quorum.machine import QuorumMachine
from cluster.quorum.members import (
    ADD,
    DELETE,
    MembersNotice,
    check_change,
    decode_change,
    decode_notice,
    encode_change,
    grows,
)
from cluster.quorum.remote import RemoteGroup
from cluster.raft import actions as ra

if TYPE_CHECKING:
    from cluster.quorum.group import Action, QuorumGroup

__all__ = ["ReplicaManagement", "MemberError", "MEMBERS_FILE", "read_members", "write_members",
           "has_log", "delete_log"]

log = logging.getLogger(__name__)

MEMBERS_FILE = "members.json"
_POLL_S = 0.05
_RESEND_S = 1.0


class MemberError(Exception):
    """A replica change refused or not done: ``reason`` is RabbitMQ's error atom (see the
    module docstring)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_members(directory: Path) -> tuple[int, tuple[str, ...]] | None:
    """(configuration index, members) of ``members.json`` in ``directory``; None when absent
    or unreadable."""
    try:
        data = json.loads((directory / MEMBERS_FILE).read_text())
        return int(data["index"]), tuple(str(m) for m in data["members"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_members(directory: Path, index: int, members: Iterable[str]) -> None:
    """Replace ``members.json`` atomically (write, fsync, rename, fsync the directory).
    Raises ``OSError``."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (MEMBERS_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"index": index, "members": list(members)}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / MEMBERS_FILE)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def has_log(directory: Path) -> bool:
    """Whether ``directory`` holds a replica's log files (anything but ``members.json``)."""
    try:
        return any(not n.startswith(MEMBERS_FILE) for n in os.listdir(directory))
    except OSError:
        return False


def delete_log(directory: Path) -> None:
    """Delete the replica's log files of ``directory`` (``members.json`` stays)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(MEMBERS_FILE):
            continue
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


class ReplicaManagement:
    """The replica management half of ``QuorumRuntime`` (see the module docstring)."""

    if TYPE_CHECKING:
        me: str
        origin: str
        view: set[str]
        replicas: dict[str, Any]
        _tg: Any
        _dirty: set[Any]

        def execute(self, rep: Any, actions: Iterable[Action]) -> None: ...
        def _send(self, rep: Any, to: str, kind: int, payload: bytes,
                  hold: bool = False) -> None: ...
        def now_ms(self) -> int: ...
        def _hold(self, rep: Any) -> None: ...
        def _release(self, rep: Any) -> None: ...
        def _open_replica(self, rep: Any, bootstrap: tuple[str, ...], term: int = 0,
                          vote_floor: int = 0) -> QuorumGroup: ...

    # ------------------------------------------------------------------ peers' messages
    def on_notice(self, rep: Any, frm: str, body: bytes) -> None:
        """A members notice of the leader ``frm`` (Cluster.Quorum ``QUORUM_MEMBERS``)."""
        try:
            notice = decode_notice(body)
        except ValueError:
            return
        raft = rep.raft
        if rep.blocked or rep.closed or notice.key < rep.notice_key or \
                (raft is not None and notice.term < raft.node.term):
            return   # older than what we know (a blocked replica hears the next one)
        rep.notice_key = notice.key
        me = self.me
        if rep.members != notice.members:
            rep.members = notice.members
            self._save_members(rep, notice)
        named = me in notice.members or me in notice.learners or me in notice.latest
        if raft is None and named:
            self._join(rep, notice)
        elif raft is not None and not named and not rep.blocked:
            self._leave(rep, notice)
        remote = rep.remote
        if remote is not None and rep.group is remote:   # serving from outside: to this leader
            self.execute(rep, remote.told(frm, notice.members, self.now_ms()))
        elif remote is not None:   # a member now: its replica routes the commands
            remote.members = notice.members

    def on_change(self, rep: Any, frm: str, body: bytes) -> None:
        """A change request passed by broker ``frm`` (Cluster.Quorum ``QUORUM_CHANGE``)."""
        try:
            op, node = decode_change(body)
        except ValueError:
            return
        _reason, actions = rep.raft.change(op, node, frm)
        self.execute(rep, actions)

    def _membership_changed(self, rep: Any, act: ra.MembershipChanged) -> None:
        """A configuration entry reached this replica's log: serve from the replica once it
        names this broker."""
        raft = rep.raft
        log.info("quorum queue %r: configuration in force here: %s (log index %d)", rep.name,
                 ", ".join(act.members), act.index)
        if self.me in act.members and raft is not None and rep.group is not raft:
            rep.group = raft
            if rep.queue is not None:
                rep.queue.switch(raft)
            log.info("quorum queue %r: this broker is a member of its group (%s)", rep.name,
                     ", ".join(act.members))

    # ------------------------------------------------------------------ joining, leaving
    def _join(self, rep: Any, notice: MembersNotice) -> None:
        delete_log(rep.directory)
        raft = self._open_replica(rep, bootstrap=(), term=notice.term, vote_floor=notice.commit)
        log.info("quorum queue %r: starting a replica here (group %s, leader term %d), "
                 "catching up", rep.name, ", ".join(notice.members), notice.term)
        self.execute(rep, raft.node.tick(raft.node.now))

    def _leave(self, rep: Any, notice: MembersNotice) -> None:
        raft, disk = rep.raft, rep.log
        rep.raft = rep.log = None
        self._dirty.discard(rep)
        try:
            disk.close()
        except OSError as exc:
            log.error("quorum queue %r: closing its log: %s", rep.name, exc)
        remote = rep.remote
        if remote is None:
            remote = rep.remote = RemoteGroup(self.me, self.origin, notice.members,
                                              QuorumMachine(rep.config), raft.outbox)
        if rep.group is not remote:
            rep.group = remote
            if rep.queue is not None:
                remote.adopt(rep.queue.holdings())
                rep.queue.switch(remote)
        log.info("quorum queue %r: this broker left its group (%s); replica files deleted",
                 rep.name, ", ".join(notice.members))
        self._files(rep, notice, delete=True)

    def _save_members(self, rep: Any, notice: MembersNotice) -> None:
        if rep.raft is not None or rep.remote is not None:
            self._files(rep, notice, delete=False)

    def _files(self, rep: Any, notice: MembersNotice, delete: bool) -> None:
        """Write ``members.json`` (and then delete the log files) in a worker thread; the
        replica's actions wait meanwhile."""

        def work() -> None:
            write_members(rep.directory, notice.index, notice.members)
            if delete:
                delete_log(rep.directory)

        if self._tg is None:
            try:
                work()
            except OSError as exc:
                log.error("quorum queue %r: %s", rep.name, exc)
            return
        self._hold(rep)

        async def run() -> None:
            try:
                await anyio.to_thread.run_sync(work)
            except OSError as exc:
                log.error("quorum queue %r: writing its members: %s", rep.name, exc)
            self._release(rep)

        self._tg.start_soon(run)

    # ------------------------------------------------------------------ operations
    def find(self, vhost: str, name: str) -> Any:
        """The quorum queue ``name`` of ``vhost`` here. Raises ``MemberError("not_found")``."""
        for rep in self._quorum_replicas():
            if rep.vhost == vhost and rep.name == name:
                return rep
        raise MemberError("not_found")

    def _quorum_replicas(self) -> list[Any]:
        """The open replicas of quorum queues (a replicated stream's group is hosted here too,
        ``amqp_broker.clustering.stream``, but has no replica management yet)."""
        return [r for r in list(self.replicas.values())
                if not r.closed and not getattr(r.queue, "is_stream", False)]

    def members_of(self, rep: Any) -> tuple[str, ...]:
        """The group's committed members as this broker knows them."""
        raft = rep.raft
        if raft is not None and rep.group is raft:
            return tuple(raft.node.committed_config[1])
        return tuple(rep.members)

    def _request(self, rep: Any, op: int, node: str) -> None:
        raft = rep.raft
        if raft is not None and raft.is_leader:
            _reason, actions = raft.change(op, node)
            self.execute(rep, actions)
            return
        payload = encode_change(op, node)
        leader = raft.leader if raft is not None else rep.remote.leader
        for to in ([leader] if leader and leader != self.me else
                   [m for m in self.members_of(rep) if m != self.me]):
            self._send(rep, to, QUORUM_CHANGE, payload)

    async def change_member(self, vhost: str, name: str, op: int, node: str,
                            timeout: float = 30.0) -> None:
        """``add_member`` (``op`` ADD) / ``delete_member`` (DELETE) of ``node`` for queue
        ``name`` of ``vhost``: returns once this broker sees the committed configuration
        include / leave out ``node`` (at once when it already does). Raises ``MemberError``:
        ``not_found``, ``node_not_running``, ``last_node``, ``timeout`` (``timeout`` s)."""
        rep = self.find(vhost, name)
        needed, reason = check_change(op, node, self.members_of(rep), self.view)
        if reason is not None:
            raise MemberError(reason)
        if not needed:
            return
        log.info("quorum queue %r of vhost %r: %s a replica on %s", name, vhost,
                 "adding" if op == ADD else "deleting", node)
        with anyio.move_on_after(timeout):
            while True:
                if (node in self.members_of(rep)) == (op == ADD):
                    return
                if rep.closed:
                    raise MemberError("not_found")
                self._request(rep, op, node)
                with anyio.move_on_after(_RESEND_S):
                    while (node in self.members_of(rep)) != (op == ADD) and not rep.closed:
                        await anyio.sleep(_POLL_S)
        raise MemberError("timeout")

    async def grow(self, node: str, strategy: str, vhost_pattern: str = ".*",
                   queue_pattern: str = ".*", timeout: float = 30.0) -> list[dict]:
        """``rabbitmq-queues grow NODE all|even``: add ``node`` to every quorum queue whose
        vhost and name match the patterns (regular expressions) and that ``grows`` says; one
        result per queue: vhost, name, size (members after), result ("ok" or the error).
        Raises ``MemberError("node_not_running")``, ``ValueError`` for a bad strategy or
        pattern."""
        if node not in self.view:
            raise MemberError("node_not_running")
        vre, qre = re.compile(vhost_pattern), re.compile(queue_pattern)
        chosen = [r for r in self._quorum_replicas()
                  if vre.fullmatch(r.vhost) and qre.fullmatch(r.name)
                  and grows(strategy, node, self.members_of(r))]
        return await self._each(chosen, ADD, node, timeout)

    async def shrink(self, node: str, timeout: float = 30.0) -> list[dict]:
        """``rabbitmq-queues shrink NODE``: delete ``node``'s replica from every quorum queue
        it is a member of (a dead node's too); a queue whose only member it is reports
        ``last_node``. One result per queue as ``grow``."""
        chosen = [r for r in self._quorum_replicas() if node in self.members_of(r)]
        return await self._each(chosen, DELETE, node, timeout)

    async def _each(self, reps: list[Any], op: int, node: str, timeout: float) -> list[dict]:
        results: dict[int, dict] = {}

        async def one(i: int, rep: Any) -> None:
            try:
                await self.change_member(rep.vhost, rep.name, op, node, timeout)
                result = "ok"
            except MemberError as exc:
                result = exc.reason
            results[i] = {"vhost": rep.vhost, "name": rep.name,
                          "size": len(self.members_of(rep)), "result": result}

        async with anyio.create_task_group() as tg:
            for i, rep in enumerate(reps):
                tg.start_soon(one, i, rep)
        return [results[i] for i in sorted(results)]

