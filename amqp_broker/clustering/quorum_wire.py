"""The peer-link half of ``QuorumRuntime`` (``amqp_broker.clustering.quorum``): Cluster.Quorum
methods out (``_send``: a method frame, a content header and the payload as body frames on the
link to that member; forwarded commands wait for a link that is down, bounded, Raft messages are
re-sent by Raft instead) and in (``on_peer_method`` / ``on_peer_content``: Raft messages,
forwarded entries, notices, shipped deliveries, holding and status reports, membership changes,
each to the replica of its group here; a malformed one is dropped with a warning). Must not know:
the Raft rules (``cluster.quorum``), files.
Sources: DESIGN.md §4 (Cluster.Quorum on the peer links), AMQP 0-9-1 §4.2 (frames)."""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cluster import codec as cc
from cluster import quorum_decode  # noqa: F401  (Cluster.Quorum's fast decoder, registered)
from cluster.quorum.group import Action
from cluster.raft import codec as raft_codec
from cluster.raftgroup import decode_forward

from ..protocol import constants as c
from ..protocol.framing import encode_body_frames, encode_frame

__all__ = ["QuorumWire", "NOTICE"]

log = logging.getLogger("amqp_broker.clustering.quorum")

#: A notice's payload after the origin: applied index (u64), resend flag (u8).
NOTICE = struct.Struct(">QB")
_BODY_HEAD = struct.Struct(">BHI")   # a frame's type, channel, size
_FRAME_MAX = 131072
_HELD_BYTES = 64 << 20
_RECONNECT_MS = 500   # a link to a member that is down is retried at most this often


class QuorumWire:
    """Mixin of ``QuorumRuntime``: the peer links (see the module docstring)."""

    if TYPE_CHECKING:
        me: str
        replicas: dict[str, Any]
        view: set[str]
        view_number: int
        links: Any
        addresses: Callable[[], dict[str, str]]
        _held: dict[str, deque[bytes]]
        _held_bytes: dict[str, int]
        _connect_ms: dict[str, int]

        def now_ms(self) -> int: ...
        def execute(self, rep: Any, actions: Iterable[Action]) -> None: ...
        def on_notice(self, rep: Any, frm: str, body: bytes) -> None: ...
        def on_change(self, rep: Any, frm: str, body: bytes) -> None: ...

    def attach(self, links: Any, addresses: Callable[[], dict[str, str]]) -> None:
        """Use the cluster's peer ``links``; ``addresses()`` maps member names to host:port."""
        self.links = links
        self.addresses = addresses

    def view_changed(self, view: int, members: Iterable[tuple[str, str]]) -> None:
        """The cluster view changed (``ClusterDriver.on_view``)."""
        self.view_number = view
        self.view = {name for name, _address in members} | {self.me}

    def _send(self, rep: Any, to: str, kind: int, payload: bytes,
              hold: bool = False) -> None:
        links = self.links
        if links is None or to == self.me:
            return
        head = (encode_frame(c.FRAME_METHOD, 1, rep.prefix[kind]),
                encode_frame(c.FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, len(payload), 0)))
        if len(payload) <= _FRAME_MAX - c.FRAME_OVERHEAD:   # one body frame: one copy, the join
            data = b"".join((*head, _BODY_HEAD.pack(c.FRAME_BODY, 1, len(payload)), payload,
                             c.FRAME_END_BYTE))
        else:
            data = b"".join((*head, *encode_body_frames(1, payload, _FRAME_MAX)))
        if links.can_send(to, 1 << 30):
            held = self._held.pop(to, None)
            if held:
                self._held_bytes.pop(to, None)
                for item in held:
                    links.send_raw(to, item)
            links.send_raw(to, data)
            return
        now = self.now_ms()
        if now - self._connect_ms.get(to, -_RECONNECT_MS) >= _RECONNECT_MS:
            self._connect_ms[to] = now
            address = self.addresses().get(to)
            if address:
                links.connect(to, address)
        if hold:   # forwarded commands wait for the link (bounded); Raft messages are re-sent
            held = self._held.setdefault(to, deque())
            held.append(data)
            size = self._held_bytes.get(to, 0) + len(data)
            while held and size > _HELD_BYTES:
                size -= len(held.popleft())
            self._held_bytes[to] = size

    def on_peer_method(self, channel: Any, method: Any, payload: bytes) -> bool:
        """``broker.peer_handler`` (before the cluster driver's): a Cluster.Quorum starts the
        channel's content assembly; its content arrives in ``on_peer_content``."""
        if isinstance(method, cc.Quorum):
            channel.assembler.start(method)
            return True
        return False

    def on_peer_content(self, channel: Any, method: Any, body: bytes) -> None:
        """``broker.peer_content``: a Raft message or forwarded entries for a replica here."""
        if not isinstance(method, cc.Quorum):
            return
        rep = self.replicas.get(method.group)
        if rep is None or rep.closed:
            return
        frm = channel.connection.peer_node
        kind = method.kind
        if kind == cc.QUORUM_MEMBERS:
            self.on_notice(rep, frm, body)
            return
        remote = rep.remote
        if kind == cc.QUORUM_SHIP or kind == cc.QUORUM_NOTIFY:
            if remote is None:
                return
            if kind == cc.QUORUM_SHIP:
                effects = remote.received(frm, body)
                if effects and rep.queue is not None and not rep.queue.deleted:
                    rep.queue.on_effects(effects)
            elif len(body) >= 2:
                n = struct.unpack_from(">H", body)[0]
                if len(body) >= 2 + n + NOTICE.size and body[2:2 + n] == remote.origin.encode():
                    applied, resend = NOTICE.unpack_from(body, 2 + n)
                    self.execute(rep, remote.notified(frm, applied, bool(resend), self.now_ms()))
                    if rep.queue is not None:
                        rep.queue.on_effects([])   # confirms that waited for it
            return
        group = rep.raft
        if group is None:
            return
        if kind == cc.QUORUM_CHANGE and hasattr(group, "change"):   # none on streams, metadata
            self.on_change(rep, frm, body)
        elif method.kind == cc.QUORUM_RAFT:
            try:
                msg = raft_codec.decode(body)
            except ValueError as exc:
                log.warning("quorum queue %r: bad Raft message from %s: %s", rep.name, frm, exc)
                return
            self.execute(rep, group.receive(frm, msg, self.now_ms()))
        elif method.kind == cc.QUORUM_FORWARD:
            try:
                envs = decode_forward(body)
            except ValueError as exc:
                log.warning("quorum queue %r: bad forward from %s: %s", rep.name, frm, exc)
                return
            self.execute(rep, group.forwarded(frm, envs))
        elif method.kind == cc.QUORUM_HOLDING and hasattr(group, "holding"):
            self.execute(rep, group.holding(frm, body))
        elif method.kind == cc.QUORUM_STATUS:
            group.status(frm, body)
        else:   # a kind this group does not take (a stream's or a quorum queue's to another)
            log.warning("quorum queue %r: dropped a Cluster.Quorum of kind %d from %s (not one "
                        "this group takes)", rep.name, kind, frm)

