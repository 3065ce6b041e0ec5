"""Maintenance mode and leader rebalancing of one broker: RabbitMQ's ``rabbitmq-upgrade drain`` /
``revive`` and ``rabbitmq-queues rebalance quorum``, for ``routes_maintenance`` (and so
``amqp-broker ctl drain / revive / rebalance``).

``drain(mgmt)``: the broker is marked as being drained (``Broker.draining``: Connection.Open from
a client is refused with 320 CONNECTION_FORCED, so clients go to another member; RabbitMQ
suspends its listeners instead), every client connection is closed with 320 CONNECTION_FORCED
"Node was put into maintenance mode" (RabbitMQ's text), each quorum-queue replica here is put in
standby (``RaftNode.standby``: it votes and replicates but stands for no election, so it takes no
new leadership; RabbitMQ stops the follower replicas instead) and each one that leads hands its
leadership to the most up-to-date member not in maintenance (Raft thesis §3.10: no election
timeout to wait out; RabbitMQ stops the leader and lets the others elect). The hand-overs are
asked again every ``RETRY_S`` until none leads here or ``timeout`` seconds passed (a group
without another member keeps its leader). Its answer: the node, connections closed, leaders
handed over, leaders still here. Until ``revive``, ``enforce`` (a task the management server
starts; it sleeps while the broker is not drained) keeps it so every ``RETRY_S``: a replica
opened here meanwhile (a queue declared on another member) is put in standby, and one that
leads hands over. The state is kept in memory only: a restart revives the broker,
as RabbitMQ ("Successful boot resets node maintenance state", ``rabbit.erl``).
``revive(mgmt)``: clients are accepted again and the replicas may stand for election again;
leaderships do not move back by themselves (``rebalance`` does that).
``rebalance(mgmt)``: the plan of ``cluster.quorum.rebalance`` over every quorum queue this broker
knows (its leader and members as this broker sees them) and the members that may lead (the
cluster view less those in maintenance); each move asks the queue's leader (here, or over the
peer link: Cluster.Quorum ``QUORUM_CHANGE`` ``TRANSFER``) to hand over, and waits up to
``MOVE_TIMEOUT_S`` for this broker to see the new leader. Returns the leaders per member after
the plan, as rabbitmq-queues prints them.
``quorum_critical(mgmt)``: the quorum queues with a replica here that would lose their quorum if
this broker stopped: those whose online members (in this broker's cluster view) are no more
than a majority of their members (RabbitMQ's ``rabbit_quorum_queue:filter_quorum_critical``),
each as RabbitMQ lists them (``readable_name``, ``name``, ``virtual_host``, ``type``); the
health check ``node-is-quorum-critical`` and ``ctl await_online_quorum_plus_one`` ask it.
Which members are in maintenance: each broker announces it in its Connection.Start server
properties (``being_drained``), read from every member of the view when needed
(``peers.member_states``; ``/api/nodes`` shows each member's). Sources: RabbitMQ "Upgrading
RabbitMQ" (maintenance mode), rabbitmq-server v3.10.8 ``rabbit_maintenance.erl``, ``rabbit_amqqueue:rebalance/3``,
rabbitmq-upgrade(8), rabbitmq-queues(8).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

import anyio

from cluster.quorum.members import TRANSFER
from cluster.quorum.rebalance import Move, Rebalance

from .context import Management
from .peers import member_states
from .shapes import visible_connections

__all__ = ["drain", "enforce", "revive", "rebalance", "quorum_critical", "MAINTENANCE_TEXT",
           "RETRY_S", "MOVE_TIMEOUT_S"]

log = logging.getLogger(__name__)

#: The close text of a drained broker's client connections (RabbitMQ's).
MAINTENANCE_TEXT = "CONNECTION_FORCED - Node was put into maintenance mode"
#: Seconds between asking the leaders here again to hand over (a transfer is abandoned after
#: one election timeout).
RETRY_S = 1.0
#: Seconds a rebalance waits for one leadership to move.
MOVE_TIMEOUT_S = 5.0
_POLL_S = 0.05


def _runtime(mgmt: Management) -> Any:
    return getattr(mgmt.broker, "quorum", None)


def _replicas(mgmt: Management) -> list[Any]:
    runtime = _runtime(mgmt)
    if runtime is None:
        return []
    return [r for r in list(runtime.replicas.values()) if not r.closed]


def _leader(rep: Any) -> str | None:
    """The leader of ``rep``'s group as this broker knows it."""
    if rep.raft is not None and rep.group is rep.raft:
        return rep.raft.leader
    remote = rep.remote
    return getattr(remote, "leader", None) if remote is not None else None


def _length(rep: Any) -> int:
    """Log entries after the snapshot (RabbitMQ's ``queue_length`` for rebalancing)."""
    if rep.raft is None:
        return 0
    node = rep.raft.node
    return max(0, node.log.last_index - node.snapshot.index)


async def _members(mgmt: Management) -> tuple[set[str], set[str]]:
    """(members that answered, those of them in maintenance), this broker included
    (``peers.member_states``)."""
    me = mgmt.broker.settings.node_name
    states = await member_states(mgmt)
    up = {me, *(n for n, props in states.items() if props is not None)}
    drained = {n for n, props in states.items() if props and props.get("being_drained")}
    if mgmt.broker.draining:
        drained.add(me)
    return up, drained


def _hand_over(mgmt: Management, avoid: set[str]) -> int:
    """Ask every replica leading here to hand over (to its most up-to-date member not in
    ``avoid``); returns how many lead here."""
    runtime = _runtime(mgmt)
    leading = 0
    for rep in _replicas(mgmt):
        raft = rep.raft
        if raft is None or not raft.is_leader:
            continue
        leading += 1
        node = raft.node
        others = [m for m in node.members if m != runtime.me and m in node.progress]
        targets = [m for m in others if m not in avoid] or others
        if targets:
            target = max(targets, key=lambda m: node.progress[m].match_index)
            runtime.execute(rep, node.transfer_leadership(target))
    return leading


def _standby(mgmt: Management, on: bool) -> None:
    for rep in _replicas(mgmt):
        if rep.raft is not None:
            rep.raft.node.standby = on


async def drain(mgmt: Management, timeout: float = 30.0) -> dict[str, Any]:
    """Put this broker in maintenance mode (module docstring); returns ``{"node",
    "connections_closed", "leaders_transferred", "leaders_remaining"}``."""
    broker = mgmt.broker
    me = broker.settings.node_name
    log.warning("This node is being put into maintenance (drain) mode")
    broker.draining = True
    broker.cluster_properties["being_drained"] = True
    conns = visible_connections(broker)
    for conn in conns:
        conn.close_forced(MAINTENANCE_TEXT)
    log.warning("Closed %d local client connections", len(conns))
    _standby(mgmt, True)
    _up, drained = await _members(mgmt)
    first = _hand_over(mgmt, drained)
    remaining = first
    with anyio.move_on_after(timeout):
        while remaining:
            with anyio.move_on_after(RETRY_S):
                while remaining:
                    await anyio.sleep(_POLL_S)
                    remaining = sum(1 for r in _replicas(mgmt)
                                    if r.raft is not None and r.raft.is_leader)
            if remaining:
                _standby(mgmt, True)   # replicas opened meanwhile
                remaining = _hand_over(mgmt, drained)
    if mgmt.maintenance_wake is not None:
        mgmt.maintenance_wake.set()   # ``enforce`` keeps it so from now on
    log.info("Node %s is ready to be shut down for maintenance or upgrade (%d quorum queue "
             "leaders handed over, %d still here)", me, first - remaining, remaining)
    return {"node": me, "connections_closed": len(conns),
            "leaders_transferred": first - remaining, "leaders_remaining": remaining}


async def enforce(mgmt: Management) -> None:
    """While the broker is drained: every ``RETRY_S`` its replicas are put in standby and those
    that lead hand over (module docstring); asleep otherwise. Runs until cancelled."""
    while True:
        mgmt.maintenance_wake = wake = anyio.Event()
        await wake.wait()
        while mgmt.broker.draining:
            _standby(mgmt, True)
            if any(r.raft is not None and r.raft.is_leader for r in _replicas(mgmt)):
                _hand_over(mgmt, (await _members(mgmt))[1])   # not to a drained member
            await anyio.sleep(RETRY_S)


def revive(mgmt: Management) -> dict[str, Any]:
    """Take this broker out of maintenance mode; returns ``{"node"}``."""
    broker = mgmt.broker
    broker.draining = False
    broker.cluster_properties["being_drained"] = False
    _standby(mgmt, False)
    log.info("Node %s revived from maintenance mode: accepting client connections",
             broker.settings.node_name)
    return {"node": broker.settings.node_name}


async def _move(mgmt: Management, rep: Any, move: Move) -> bool:
    """Ask ``rep``'s leader to hand over to ``move.target``; True once this broker sees it."""
    runtime = _runtime(mgmt)
    with anyio.move_on_after(MOVE_TIMEOUT_S):
        while True:
            if _leader(rep) == move.target:
                return True
            if rep.closed:
                return False
            # started here when leading, else passed to the leader (QUORUM_CHANGE), as the
            # replica commands' add / delete member requests
            runtime._request(rep, TRANSFER, move.target)
            with anyio.move_on_after(RETRY_S):
                while _leader(rep) != move.target and not rep.closed:
                    await anyio.sleep(_POLL_S)
    return False


async def rebalance(mgmt: Management) -> list[dict[str, object]]:
    """Spread the quorum-queue leaderships evenly (module docstring); the leaders per member
    after it, ``[{"Node name", "Number of quorum queues"}]``."""
    runtime = _runtime(mgmt)
    up, drained = await _members(mgmt)
    running = up - drained
    reps: dict[Hashable, Any] = {}
    queues = []
    for rep in _replicas(mgmt):
        leader = _leader(rep)
        if leader is None:
            continue
        key = (rep.vhost, rep.name)
        reps[key] = rep
        queues.append((key, leader, runtime.members_of(rep), _length(rep)))
    plan = Rebalance(queues, running)
    log.info("Starting queue rebalance operation: %d quorum queues over %d members",
             len(queues), len(running))
    for _ in range(2 * len(queues) + 1):   # each queue moves or is tried at most once
        move = plan.next_move()
        if move is None:
            break
        migrated = await _move(mgmt, reps[move.key], move)
        if not migrated:
            log.warning("Error migrating queue %s to %s: timeout", move.key, move.target)
        plan.done(move, migrated)
    log.info("Finished queue rebalance operation")
    return plan.summary()


def quorum_critical(mgmt: Management) -> list[dict[str, str]]:
    """The quorum queues that would lose their quorum if this broker stopped (module
    docstring)."""
    runtime = _runtime(mgmt)
    if runtime is None:
        return []
    view = runtime.view
    out = []
    for rep in _replicas(mgmt):
        if rep.raft is None or rep.group is not rep.raft:   # no replica here
            continue
        members = runtime.members_of(rep)
        online = [m for m in members if m in view]
        if len(online) <= len(members) // 2 + 1:
            out.append({"readable_name": f"queue '{rep.name}' in vhost '{rep.vhost}'",
                        "name": rep.name, "virtual_host": rep.vhost, "type": "quorum"})
    return out
