"""The cluster driver: runs the membership state machine against the broker and the peer links.

Owns the glue of the Qpid ClusteringHA proposal: feeding ``membership.Node`` with received Cluster
methods, clock ticks and send failures, and carrying out its actions (send, replay to a joiner and
Synch, apply a buffered replay in the leader-first order, open the client listener after every
Synch, publish the view in Connection.Start server properties); propagating a client's change
that is no definition (Queue.Purge; definitions are the metadata log's,
``amqp_broker.clustering.metadata``) to every member (wrapped in Cluster.InVhost for a vhost other
than the links' "/") and answering the client after the reply policy's number of answers
(``all``, ``majority``, ``none`` or a number: ``reply_quorum``, which the metadata log's answers
use too); buffering, on a joining node, the methods a member sends until its replay may be
applied. Cluster.Definition and Cluster.Policy (the broadcast design's users, vhosts,
permissions and policies) are no longer sent; one received is ignored. Sans-IO: the links
(``cluster.links``) do the I/O, ``tick(now)`` is called by a timer. Must not know: sockets, anyio,
the core's internals beyond the broker's cluster seams (``peer_handler``, ``cluster_hooks``,
``cluster_properties``, ``accepting_clients``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol

from amqp_broker.core.relay_batch import BatchBuilder
from amqp_broker.protocol.methods import encode_method

from . import actions as a
from .codec import (
    ClusterMethod,
    Consumers,
    Definition,
    InVhost,
    Policy,
    Relay,
    Synch,
)
from .durable import DurableVote
from .membership import IN_VIEW, Node, Status
from .relay_wire import DecodedRelay, DecodedRelayBatch, batch_prefix, encode_relay, relay_prefix

if TYPE_CHECKING:
    from queues.message import Message

__all__ = ["ClusterDriver", "LinkSender", "reply_quorum", "in_vhost"]

log = logging.getLogger(__name__)

Done = Callable[[tuple[int, str] | None], None]
#: ``peer_handler(channel, method, payload) -> bool``: True when it consumed the method.
PeerHandler = Callable[[Any, Any, bytes], bool]
# (module constants, not attribute lookups on the enum class: read once per relayed message)
_JOINING: Final = Status.JOINING
_SYNCING: Final = Status.SYNCING


class LinkSender(Protocol):
    """What the driver needs from the peer links (``cluster.links.PeerLinks``)."""

    def send(self, node: str, address: str, method: Any,
             on_reply: Callable[[tuple[int, str] | None], None] | None = None) -> None:
        """Queue ``method`` to ``node``; with ``on_reply``, the member's answer (None: ok, or
        (reply code, text)) is reported; a lost link reports (320, ...)."""

    def can_send(self, node: str) -> bool:
        """True when the link to ``node`` is up and not backed up."""

    def connect(self, node: str, address: str) -> None:
        """Open the link to ``node`` unless it is open or opening."""

    def send_raw(self, node: str, data: bytes) -> None:
        """Queue encoded frames on the open link to ``node``."""

    def send_batch(self, node: str, batch: BatchBuilder) -> None:
        """Queue ``batch`` on the open link to ``node``: it is encoded when the link writes it
        (``cluster.relay_wire.encode_batch``), until then records may be added to it; the link
        sets ``batch.sealed`` when it writes or drops it, or queues anything but another batch
        after it."""

    def close(self, node: str) -> None:
        """Drop the link to ``node``."""


def reply_quorum(policy: str, others: int) -> int:
    """How many of ``others`` members must answer a propagated change before the client is
    answered: ``all`` (default), ``majority`` (of the whole cluster, counting us), ``none``, or a
    number (capped at ``others``). Raises ``ValueError`` for anything else."""
    if policy == "all":
        return others
    if policy == "none":
        return 0
    if policy == "majority":
        return (others + 1) // 2  # a majority of others+1 members, less ourselves
    n = int(policy)
    if n < 0:
        raise ValueError("sync replies must be >= 0")
    return min(n, others)


def in_vhost(vhost: str, method: Any) -> Any:
    """``method`` as it travels on a peer link for ``vhost``: itself for "/" (the link's vhost),
    else wrapped in Cluster.InVhost."""
    if vhost == "/":
        return method
    return InVhost(vhost, encode_method(1, method)[7:-1])


_NOT_MEMBERSHIP = Consumers | Relay | Policy | Definition | InVhost


#: Seconds a propagated change may wait for its answers before the client gets 541.
PROPAGATION_TIMEOUT = 10.0


@dataclass(slots=True)
class _Pending:
    need: int
    waiting: set[str]
    done: Done
    started: float = 0.0
    answered: int = 0
    finished: bool = False
    errors: list[tuple[int, str]] = field(default_factory=list)


class ClusterDriver:
    """Drives ``node`` for ``broker`` over ``links``. ``replay(shared)`` yields the AMQP methods
    replaying our state to a joiner (see ``amqp_broker.clustering.replay``); ``load()`` the figures sent
    in pings; ``clock()`` seconds (monotonic); ``reply_policy`` see ``reply_quorum``."""

    def __init__(self, node: Node, broker: Any, links: LinkSender,
                 replay: Callable[[bool], list[Any]], clock: Callable[[], float],
                 reply_policy: str = "all",
                 load: Callable[[], dict[str, int]] = dict,
                 on_consumers: Callable[[str, str, str, int], None] | None = None,
                 on_node_removed: Callable[[str], None] | None = None,
                 persist: Callable[[DurableVote], None] | None = None) -> None:
        reply_quorum(reply_policy, 1)  # validate early
        self.node = node
        self.broker = broker
        self.links = links
        self.replay = replay
        self.load = load
        self.on_consumers = on_consumers
        self.on_node_removed = on_node_removed
        #: ``persist(vote)``: write the durable vote and fsync before returning (``Persist``)
        self.persist = persist
        self.clock = clock
        self.reply_policy = reply_policy
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._buffers: dict[str, list[tuple[Any, bytes]]] = {}
        #: Cluster.Relay payloads up to the delivery tag and Cluster.RelayBatch payloads up to
        #: the count, encoded once per vhost and (queue, batch?)
        self._relay_prefixes: dict[str, dict[tuple[str, bool], bytes]] = {}
        #: Per member and queue, the batch of relays its link has not written yet (``relay``)
        self._open_batches: dict[str, dict[str, BatchBuilder]] = {}
        #: Members whose link refused a relay (down or backed up, ``can_relay``): the cluster
        #: ticker gives the queues they consume from another chance once it takes more.
        self.refused: set[str] = set()
        #: Asked first for every method on a peer link but Cluster.Relay (the quorum queues'
        #: handler, ``amqp_broker.clustering.quorum``); True: it consumed the method.
        self.peer_first: PeerHandler | None = None
        self._applied: set[str] = set()
        self.on_view: Callable[[int, a.Members], None] | None = None
        #: ``on_in_vhost(channel, vhost, payload)``: run the method frame ``payload`` a member
        #: sent for ``vhost`` (Cluster.InVhost) on ``channel`` as if it were opened there.
        self.on_in_vhost: Callable[[Any, str, bytes], None] | None = None
        #: Whether clients may be admitted once the view synched (the metadata log's member
        #: admits them only once the broker follows the log: ``clustering.metadata``).
        self.admit: Callable[[], bool] = lambda: True
        #: Whether a view member is published (``publish_view``): the metadata log's member
        #: admits the voters of its committed configuration (``clustering.runtime``).
        self.in_configuration: Callable[[str], bool] = lambda name: True
        #: ``propose_view(action, done)``: submit a round's view (``ProposeView``) to the
        #: metadata log; ``done(accepted)`` once it applied or was refused / timed out. Set
        #: with ``node.commit_views`` by the metadata log's wiring (``clustering.runtime``);
        #: the log's apply of every committed view calls ``view_committed`` on every member.
        self.propose_view: Callable[[a.ProposeView, Callable[[bool], None]], None] | None = None

    # ------------------------------------------------------------------ broker seams
    def on_peer_method(self, channel: Any, method: Any, payload: bytes) -> bool:
        """``broker.peer_handler``: a Cluster.Relay or Cluster.RelayBatch starts the assembly of
        the messages it deals here (``Channel.relay_target``); other methods go to
        ``peer_first``, then Cluster methods to the membership; on a node still joining, a
        member's other methods wait for its replay turn. False: run the ordinary handler."""
        sender = channel.connection.peer_node
        if isinstance(method, (DecodedRelay, DecodedRelayBatch)):  # their content follows
            if self._waits_for_replay(sender):
                self._buffers.setdefault(sender, []).append((channel, payload))
            else:
                channel.relay_target = method
                channel.assembler.start(method)
            return True
        first = self.peer_first
        if first is not None and first(channel, method, payload):
            return True
        if isinstance(method, ClusterMethod) and not isinstance(method, _NOT_MEMBERSHIP):
            self._run(self.node.receive(sender, method, self.clock()))
            return True
        if self._waits_for_replay(sender):
            self._buffers.setdefault(sender, []).append((channel, payload))
            return True
        if isinstance(method, InVhost):
            if self.on_in_vhost is not None:
                self.on_in_vhost(channel, method.vhost, method.payload)
            return True
        if isinstance(method, Consumers):
            if self.on_consumers is not None and method.node != self.node.name:
                self.on_consumers(method.vhost, method.queue, method.node, method.count)
            return True
        if isinstance(method, Policy | Definition):   # the broadcast design's: the log has them
            return True
        return False

    def _waits_for_replay(self, sender: str) -> bool:
        """True on a node still joining while ``sender``'s replay has not been applied."""
        status = self.node.status
        return (status is _JOINING or status is _SYNCING) and sender not in self._applied

    # ------------------------------------------------------------------ shared-queue dealing
    def consumers_changed(self, vhost: str, queue: str, count: int) -> None:
        """Our consumer count of shared queue ``queue`` changed: tell every member."""
        for name, address in self.node.members:
            if name != self.node.name:
                self.links.send(name, address, Consumers(vhost, queue, self.node.name, count))

    def can_relay(self, node: str) -> bool:
        """``broker.relay_sink``: True when a message may be dealt to ``node`` now (link up,
        backlog short); else ``node`` is remembered in ``refused`` and a link that is down is
        reopened meanwhile (while ``node`` is in the view)."""
        if self.links.can_send(node):
            return True
        self.refused.add(node)
        for name, address in self.node.members:
            if name == node:
                self.links.connect(node, address)
                break
        return False

    def relay(self, node: str, vhost: str, queue: str, message: Message, delivery_tag: int = 0,
              redelivered: bool = False) -> None:
        """``broker.relay_sink``: deal ``message`` to ``node``'s consumers of ``queue`` as
        transfer ``delivery_tag``, with the original exchange and routing key and the message's
        raw content: a record of the Cluster.RelayBatch open for that member and queue (one per
        queue and turn of the event loop: the link's writer seals it; ``core.relay_batch``;
        batches of several queues may be open at once, a queue's order is kept), or one
        Cluster.Relay for a private queue's relay (``queue`` "", ``cluster.relay_wire``). The
        receiver settles the tag (``core.relay``). Raises ``ValueError`` for a name over 255
        bytes."""
        if queue:
            per_node = self._open_batches.get(node)
            if per_node is None:
                per_node = self._open_batches[node] = {}
            batch = per_node.get(queue)
            if batch is None or not batch.takes(vhost, queue):
                if len(per_node) > 4096:
                    per_node.clear()  # those still open just take no more records
                batch = BatchBuilder(vhost, queue, self._prefix(vhost, queue, True))
                per_node[queue] = batch
                self.links.send_batch(node, batch)
            batch.add(delivery_tag, redelivered, message)
            return
        self.links.send_raw(node, encode_relay(self._prefix(vhost, queue, False), delivery_tag,
                                               redelivered, message))

    def _prefix(self, vhost: str, queue: str, batch: bool) -> bytes:
        """Cluster.RelayBatch's (``batch``) or Cluster.Relay's method payload up to its first
        per-message field, made once per vhost and queue."""
        per_vhost = self._relay_prefixes.get(vhost)
        if per_vhost is None:
            per_vhost = self._relay_prefixes[vhost] = {}
        key = (queue, batch)
        prefix = per_vhost.get(key)
        if prefix is None:
            if len(per_vhost) > 4096:
                per_vhost.clear()
            prefix = batch_prefix(vhost, queue) if batch else relay_prefix(vhost, queue)
            per_vhost[key] = prefix
        return prefix

    def propagate(self, vhost: str, method: Any, done: Done) -> None:
        """``broker.cluster_hooks.propagate``: send the change to every other member; ``done``
        once the reply policy is met, or with the first refusal (a member's channel error)."""
        others = [(n, addr) for n, addr in self.node.members if n != self.node.name]
        need = reply_quorum(self.reply_policy, len(others))
        pid = next(self._ids)
        pending = _Pending(need, {n for n, _ in others}, done, self.clock())
        self._pending[pid] = pending
        method = in_vhost(vhost, method)
        for name, address in others:
            self.links.send(name, address, method, on_reply=partial(self._answered, pid, name))
        self._check(pid)

    def _answered(self, pid: int, node: str, error: tuple[int, str] | None) -> None:
        pending = self._pending.get(pid)
        if pending is None or node not in pending.waiting:
            return
        if error is not None and error[0] == 320:
            return  # link lost: the member is suspected; its leaving the view settles it
        pending.waiting.discard(node)
        if error is not None:
            pending.errors.append(error)
        else:
            pending.answered += 1
        self._check(pid)

    def _member_gone(self, node: str) -> None:
        """``node`` left the view: propagations stop waiting for it and need one answer less
        (the reply policy counts the members of the view in force)."""
        for pid, pending in list(self._pending.items()):
            if node in pending.waiting:
                pending.waiting.discard(node)
                pending.need = min(pending.need, pending.answered + len(pending.waiting))
                self._check(pid)

    def _check(self, pid: int) -> None:
        pending = self._pending.get(pid)
        if pending is None:
            return
        if pending.errors:
            self._finish(pid, pending.errors[0])
        elif pending.answered >= pending.need or not pending.waiting:
            if pending.answered >= pending.need:
                self._finish(pid, None)
            else:
                self._finish(pid, (541, f"INTERNAL_ERROR - only {pending.answered} of "
                                        f"{pending.need} cluster members answered"))

    def _finish(self, pid: int, error: tuple[int, str] | None) -> None:
        pending = self._pending.pop(pid)
        if not pending.finished:
            pending.finished = True
            pending.done(error)
            self.broker.run_dispatch()

    # ------------------------------------------------------------------ commands
    def start(self, seeds: list[tuple[str, str]], force: bool = False) -> None:
        """Join through ``seeds`` (``("", "host:port")``) or, restarted with a durable vote,
        through the other members of its view; else found a cluster of one. ``force``
        (``ctl force_boot``): found a cluster of one whatever the durable vote says."""
        now = self.clock()
        if not force and (seeds or self.node.stored.peers(self.node.name)):
            self.broker.accepting_clients = False
            self._run(self.node.join(seeds, now))
        else:
            self._run(self.node.bootstrap(now))

    def tick(self) -> None:
        """Timers (call every ~50 ms)."""
        self.node.set_load(self.load())
        now = self.clock()
        self._run(self.node.tick(now))
        for pid, pending in list(self._pending.items()):
            if now - pending.started > PROPAGATION_TIMEOUT:
                self._finish(pid, (541, f"INTERNAL_ERROR - {pending.answered} of {pending.need} "
                                        f"cluster members answered within "
                                        f"{PROPAGATION_TIMEOUT:.0f} s"))

    def send_failed(self, node: str) -> None:
        """A link to ``node`` broke or could not open."""
        self._run(self.node.send_failed(node, self.clock()))

    def leave(self) -> None:
        """Orderly shutdown: Cluster.Leave."""
        self._run(self.node.leave(self.clock()))

    # ------------------------------------------------------------------ actions
    def _run(self, actions: list[a.Action]) -> None:
        if actions and isinstance(actions[0], a.Persist) and self.persist is not None:
            try:
                self.persist(actions[0].vote)
            except OSError as exc:   # no answer may leave that the disk does not back
                log.error("cannot write the cluster vote (%s): this batch's messages dropped", exc)
                actions = [x for x in actions if not isinstance(x, a.Send)]
            actions = actions[1:]
        for action in actions:
            handler = getattr(self, "_do_" + type(action).__name__, None)
            if handler is None:
                log.debug("cluster action %r ignored", action)
            else:
                handler(action)

    def _do_Send(self, act: a.Send) -> None:
        self.links.send(act.to, act.address, act.method)

    def publish_view(self) -> None:
        """Connection.Start's ``cluster_view``, ``cluster_members`` (addresses) and
        ``cluster_member_names`` (what cluster-status, the management API, shovels and clients
        see): the view's members that ``in_configuration`` admits -- a joiner shows once it is
        a voter of the committed metadata configuration, so that what a user sees as the
        cluster is what a quorum queue declared now is placed on. Nothing while not in a view
        (a restarted member still lists itself alone). Call at each tick and view."""
        node = self.node
        if not node.members:
            return
        members = [(n, addr) for n, addr in node.members
                   if n == node.name or self.in_configuration(n)]
        props = {"cluster_view": node.view, "cluster_members": [addr for _n, addr in members],
                 "cluster_member_names": [n for n, _ in members]}
        current = self.broker.cluster_properties
        if any(current.get(k) != v for k, v in props.items()):
            current.update(props)

    def _do_ViewInstalled(self, act: a.ViewInstalled) -> None:
        log.info("cluster view %#x: %s", act.view, ", ".join(n for n, _ in act.members))
        self.publish_view()
        for node in act.removed:
            self._member_gone(node)
            self.links.close(node)
            if self.on_node_removed is not None:
                self.on_node_removed(node)
        if self.on_view is not None:
            self.on_view(act.view, act.members)

    def _do_BecameLeader(self, act: a.BecameLeader) -> None:
        log.info("this node leads cluster view %#x", act.view)

    def _do_Replay(self, act: a.Replay) -> None:
        methods = self.replay(act.shared)
        log.info("replaying %d definitions to %s", len(methods), act.to)
        for method in methods:
            self.links.send(act.to, act.address, method)
        self.links.send(act.to, act.address, Synch(act.view, self.node.name))

    def _do_ApplyReplay(self, act: a.ApplyReplay) -> None:
        buffered = self._buffers.pop(act.from_node, [])
        self._applied.add(act.from_node)
        for channel, payload in buffered:
            if channel.connection.channels.get(channel.id) is channel and not channel.closing:
                channel.on_method(payload)
        self.broker.run_dispatch()

    def _do_AcceptClients(self, act: a.AcceptClients) -> None:
        log.info("cluster view %#x synchronised: accepting clients", act.view)
        self._applied.clear()
        for buffered in self._buffers.values():  # members that joined the sync late
            for channel, payload in buffered:
                if channel.connection.channels.get(channel.id) is channel:
                    channel.on_method(payload)
        self._buffers.clear()
        self.broker.accepting_clients = self.admit()

    def _do_ProposeView(self, act: a.ProposeView) -> None:
        propose = self.propose_view
        if propose is None:   # no log: the round's view stands (as without ``commit_views``)
            self.view_committed(act.view, act.members)
            return

        def done(accepted: bool) -> None:
            if not accepted:
                self._run(self.node.view_refused(act.view, act.members, self.clock()))

        propose(act, done)

    def view_committed(self, view: int, members: a.Members) -> None:
        """The metadata log committed cluster view ``view`` (``members``, leader first): the
        node installs it if it comes after its own (``Node.view_committed``)."""
        self._run(self.node.view_committed(view, members, self.clock()))

    def _do_Excluded(self, act: a.Excluded) -> None:
        log.warning("excluded from cluster view %#x: re-joining", act.view)

    def _do_Left(self, act: a.Left) -> None:
        log.info("left the cluster (view %#x)", act.view)

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """The node's view for logs and ``cluster-status``."""
        node = self.node
        return {"node": node.name, "status": node.status.value, "view": node.view,
                "leader": node.leader, "members": [list(m) for m in node.members],
                "in_view": node.status in IN_VIEW}
