"""The I/O half of quorum queues (``amqp_broker.clustering.quorum.QuorumRuntime``) with its real
parts -- ``DiskLog`` in a temporary directory, ``RaftNode``, the group commit and the worker
threads -- and a recording stand-in for the peer links: what a follower tells its leader.

Issue 12 (the replica-move stall): a follower that wrote its ``members.json`` (a leader's members
notice) just after appending entries never made those entries durable, so it never acknowledged
them; with both followers of a group in that state the leader committed nothing more and the
publisher waited for its confirm for ever. Source: Raft paper §5.3 (a follower acknowledges what
it stored), DESIGN.md §4 (the group commit)."""

from __future__ import annotations

import struct
import types

import anyio

from amqp_broker.clustering.quorum import QuorumRuntime, _Replica
from amqp_broker.clustering.quorum_members import read_members
from cluster.codec import QUORUM_RAFT
from cluster.quorum.machine import envelope
from cluster.quorum.members import MembersNotice, encode_notice
from cluster.raft import codec as raft_codec
from cluster.raft import fifo as f
from cluster.raft.fifo import FifoConfig
from cluster.raft.messages import (
    AppendEntries,
    AppendEntriesReply,
    Entry,
    EntryKind,
    Message,
    encode_members,
)

_FRAME = struct.Struct(">BHI")


class Links:
    """Peer links that are always up; records what each broker was sent (raw AMQP frames)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def can_send(self, node: str, size: int) -> bool:
        return True

    def send_raw(self, node: str, data: bytes) -> None:
        self.sent.append((node, data))

    def connect(self, node: str, address: str) -> None:
        pass


def _raft_replies(links: Links, to: str) -> list[AppendEntriesReply]:
    """The AppendEntries replies sent to ``to``."""
    return [m for m in _raft_messages(links, to) if isinstance(m, AppendEntriesReply)]


def _raft_messages(links: Links, to: str) -> list[Message]:
    """The Raft messages sent to ``to``: each Cluster.Quorum is a method frame, a header frame
    and body frames whose payload is the Raft message."""
    out = []
    for node, data in links.sent:
        if node != to:
            continue
        pos, method, body = 0, b"", b""
        while pos < len(data):
            kind, _channel, size = _FRAME.unpack_from(data, pos)
            payload = data[pos + _FRAME.size:pos + _FRAME.size + size]
            pos += _FRAME.size + size + 1
            if kind == 1:
                method = payload
            elif kind == 3:
                body += payload
        # the method's arguments end with the kind octet (see ``_Replica.prefix``)
        if method and method[-1] == QUORUM_RAFT:
            out.append(raft_codec.decode(body))
    return out


def _command(seq: int) -> bytes:
    enqueue = f.Enqueue("n2#1", seq, None, b"\x00\x01q" + b"\x00" * 14, b"m%d" % seq, 0)
    return envelope("n2#1", seq, f.encode(enqueue))


async def _until(check) -> bool:
    """Whether ``check()`` became true within about 3 s (bounded polling)."""
    for _ in range(300):
        if check():
            return True
        await anyio.sleep(0.01)
    return check()


def test_entries_appended_just_before_a_members_file_write_are_synced_and_acknowledged(
        tmp_path):
    async def main() -> None:
        broker = types.SimpleNamespace(needs_dispatch=set(), run_dispatch=lambda: None)
        runtime = QuorumRuntime(broker, tmp_path, "n1")
        links = Links()
        runtime.attach(links, dict)
        async with anyio.create_task_group() as tg:
            tg.start_soon(runtime.run)
            assert await _until(lambda: runtime._tg is not None)
            rep = _Replica("g", "/", "q", ("n1", "n2", "n3"), tmp_path / "quorum" / "g",
                           FifoConfig())
            runtime.replicas["g"] = rep
            raft = runtime._open_replica(rep, bootstrap=("n1", "n2", "n3"))
            rep.group = raft
            runtime.execute(rep, raft.node.tick(runtime.now_ms()))
            # leader n2 (term 1) removes n3: entry 2; acknowledged once durable
            config = Entry(2, 1, EntryKind.CONFIG, encode_members(("n1", "n2")))
            runtime.execute(rep, raft.receive("n2", AppendEntries(1, "n2", 1, 0, (config,), 1),
                                              runtime.now_ms()))
            assert await _until(lambda: any(r.success and r.match_index == 2
                                            for r in _raft_replies(links, "n2")))
            # a publish (entry 3), and at once the leader's notice that (n1, n2) is committed:
            # this broker writes members.json in a worker thread meanwhile
            entry = Entry(3, 1, EntryKind.COMMAND, _command(1))
            runtime.execute(rep, raft.receive("n2", AppendEntries(1, "n2", 2, 1, (entry,), 2),
                                              runtime.now_ms()))
            runtime.on_notice(rep, "n2", encode_notice(
                MembersNotice(1, 2, ("n1", "n2"), (), ("n1", "n2"), 2)))
            acked = await _until(lambda: any(r.success and r.match_index == 3
                                             for r in _raft_replies(links, "n2")))
            assert read_members(rep.directory) == (2, ("n1", "n2"))
            assert acked, f"entry 3 not acknowledged: durable up to {raft.node.persisted_index}"
            assert raft.node.persisted_index == 3
            tg.cancel_scope.cancel()
        runtime.close()

    anyio.run(main)
