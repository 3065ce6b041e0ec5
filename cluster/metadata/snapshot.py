"""The bytes image of the metadata state (a Raft snapshot's data, paper §7), and its inverse.

Owns ``encode(state) -> bytes`` and ``decode(bytes) -> state``. Canonical: everything is written
in sorted order (names; bindings by source, destination, key and encoded arguments), so two
members that applied the same log hold byte-identical images, whatever order their dicts and
routing tables were filled in (a restored member's differs from one that replayed). Must not
know: Raft, the commands.

Format (``wire`` encodings), version 1::

    u8 version
    strs members
    u32 n, n x user        (name, password_hash, hashing_algorithm, strs tags)
    u32 n, n x vhost       (name, description, strs tags,
                            u32 n, n x exchange (name, type, durable, auto_delete, internal, table),
                            u32 n, n x queue    (name, durable, auto_delete, owner, home, type, table),
                            u32 n, n x binding  (source, destination kind, destination, key, table))
    u32 n, n x permission  (user, vhost, configure, write, read)
    u32 n, n x policy      (vhost, name, pattern, apply_to, int priority, table definition)

Version 2 is version 1 followed by the runtime parameters::

    u32 n, n x parameter   (vhost, component, name, value JSON text)

Version 3 is version 2 followed by the last committed cluster view (``cluster.metadata.views``)::

    int view, u32 n, n x member (name, address)

A state without parameters and view is written as version 1 (the bytes of a member that
predates them), one with parameters as version 2, one with a view as version 3; ``decode``
reads all three.

``decode`` raises ``wire.MalformedMetadata`` for bytes that are not such an image (including one
whose bindings name missing exchanges or queues), and nothing else.
"""

from __future__ import annotations

from amqp_broker.core.access import Account, Grant
from amqp_broker.core.policies import Policy
from amqp_broker.definitions.codec import encode_table
from routing.destination import EXCHANGE, QUEUE, Destination
from routing.errors import RoutingError

from .state import MetadataState, QueueRecord, VhostState
from .wire import MalformedMetadata, Reader, Writer

__all__ = ["VERSION", "encode", "decode"]

#: The newest format (with the cluster view); 1 or 2 is written for a state without what the
#: later versions add (module docstring).
VERSION = 3


def encode(state: MetadataState) -> bytes:
    """The canonical image of ``state``."""
    w = Writer()
    version = 3 if state.view else 2 if state.parameters else 1
    w.raw(bytes((version,)))
    w.strs(state.members)
    w.raw(len(state.users).to_bytes(4, "big"))
    for name in sorted(state.users):
        u = state.users[name]
        w.str_(name)
        w.str_(u.password_hash)
        w.str_(u.hashing_algorithm)
        w.strs(u.tags)
    w.raw(len(state.vhosts).to_bytes(4, "big"))
    for name in sorted(state.vhosts):
        _vhost(w, state.vhosts[name])
    w.raw(len(state.permissions).to_bytes(4, "big"))
    for (user, vhost) in sorted(state.permissions):
        g = state.permissions[(user, vhost)]
        for s in (user, vhost, g.configure, g.write, g.read):
            w.str_(s)
    policies = state.policies.list()
    w.raw(len(policies).to_bytes(4, "big"))
    for p in policies:
        for s in (p.vhost, p.name, p.pattern, p.apply_to):
            w.str_(s)
        w.int_(p.priority)
        w.table(p.definition)
    if version >= 2:
        w.raw(len(state.parameters).to_bytes(4, "big"))
        for key in sorted(state.parameters):
            for s in (*key, state.parameters[key]):
                w.str_(s)
    if version >= 3:
        w.int_(state.view)
        w.raw(len(state.view_members).to_bytes(4, "big"))
        for name, address in state.view_members:
            w.str_(name)
            w.str_(address)
    return w.bytes()


def _vhost(w: Writer, vh: VhostState) -> None:
    w.str_(vh.name)
    w.str_(vh.description)
    w.strs(vh.tags)
    exchanges = sorted(vh.routing.exchanges(), key=lambda x: x.name)
    w.raw(len(exchanges).to_bytes(4, "big"))
    for x in exchanges:
        w.str_(x.name)
        w.str_(x.type)
        w.bool_(x.durable)
        w.bool_(x.auto_delete)
        w.bool_(x.internal)
        w.table(x.arguments)
    w.raw(len(vh.queues).to_bytes(4, "big"))
    for name in sorted(vh.queues):
        q = vh.queues[name]
        w.str_(name)
        w.bool_(q.durable)
        w.bool_(q.auto_delete)
        w.str_(q.owner)
        w.str_(q.home)
        w.str_(q.queue_type)
        w.table(q.arguments)
    bindings = sorted((b.source, b.destination.kind, b.destination.name, b.binding_key,
                       encode_table(dict(b.arguments))) for b in vh.routing.bindings())
    w.raw(len(bindings).to_bytes(4, "big"))
    for source, kind, dest, key, args in bindings:
        for s in (source, kind, dest, key):
            w.str_(s)
        w.raw(len(args).to_bytes(4, "big") + args)


def decode(data: bytes) -> MetadataState:
    """The state ``data`` (an ``encode`` image) holds; ``b""`` is the empty state. Raises
    ``MalformedMetadata`` for anything else."""
    state = MetadataState()
    if not data:
        return state
    r = Reader(data)
    version = r.u8()
    if version not in (1, 2, VERSION):
        raise MalformedMetadata(f"unknown snapshot version {version}")
    try:
        state.members = r.strs()
        for _ in range(r.u32()):
            name = r.str_()
            state.users[name] = Account(name, r.str_(), r.str_(), r.strs())
        for _ in range(r.u32()):
            vh = _read_vhost(r)
            state.vhosts[vh.name] = vh
        for _ in range(r.u32()):
            user, vhost = r.str_(), r.str_()
            state.permissions[(user, vhost)] = Grant(r.str_(), r.str_(), r.str_())
        for _ in range(r.u32()):
            vhost, name, pattern, apply_to = r.str_(), r.str_(), r.str_(), r.str_()
            state.policies.put(_policy(r, vhost, name, pattern, apply_to))
        for _ in range(r.u32() if version >= 2 else 0):
            vhost, component, name = r.str_(), r.str_(), r.str_()
            state.parameters[(vhost, component, name)] = r.str_()
        if version >= 3:
            state.view = r.int_()
            state.view_members = tuple((r.str_(), r.str_()) for _ in range(r.u32()))
    except (RoutingError, TypeError, KeyError) as exc:
        raise MalformedMetadata(f"inconsistent snapshot: {exc}") from None
    r.end()
    return state


def _policy(r: Reader, vhost: str, name: str, pattern: str, apply_to: str) -> Policy:
    priority = r.int_()
    return Policy(vhost, name, pattern, r.table(), priority, apply_to)


def _read_vhost(r: Reader) -> VhostState:
    vh = VhostState(r.str_(), r.str_(), r.strs())
    routing = vh.routing
    for _ in range(r.u32()):
        name, type_ = r.str_(), r.str_()
        durable, auto_delete, internal = r.bool_(), r.bool_(), r.bool_()
        args = r.table()
        if routing.get_exchange(name) is None:
            try:
                routing.declare_exchange(name, type_, durable=durable, auto_delete=auto_delete,
                                         internal=internal, arguments=args)
            except RoutingError as exc:
                raise MalformedMetadata(f"bad exchange {name!r}: {exc}") from None
    for _ in range(r.u32()):
        name = r.str_()
        durable, auto_delete = r.bool_(), r.bool_()
        owner, home, queue_type = r.str_(), r.str_(), r.str_()
        vh.add_queue(QueueRecord(name, durable, auto_delete, owner, home, r.table(), queue_type))
    for _ in range(r.u32()):
        source, kind, dest, key = r.str_(), r.str_(), r.str_(), r.str_()
        args = r.table()
        if kind not in (QUEUE, EXCHANGE):
            raise MalformedMetadata(f"bad binding destination kind {kind!r}")
        try:
            routing.bind(source, Destination(QUEUE if kind == QUEUE else EXCHANGE, dest), key,
                         args)
        except (RoutingError, ValueError) as exc:
            raise MalformedMetadata(f"bad binding from {source!r}: {exc}") from None
    return vh
