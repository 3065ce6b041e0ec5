"""Malformed Cluster.Quorum content for a replicated stream's group and for the metadata log's
group (bad input never crashes a broker; issue 10's rule, as ``test_links`` checks for frames
and ``test_quorum_remote`` for a quorum queue's ship): each is dropped with one warning line,
nothing of it reaches the Raft log, and the group goes on working.

Real parts: ``clustering.quorum.QuorumRuntime`` (the driver both groups run on, as in a broker:
``MetadataRuntime`` hosts its group with ``host_group``), ``DiskLog`` in a temporary directory,
``RaftNode``, ``StreamGroup`` / ``MetadataGroup``; a recording stand-in for the peer links.
Before: a change request or a holding report sent to a group that has none (a quorum queue's
kinds) raised ``AttributeError`` out of the driver (the peer connection closed with 541 and a
traceback), and a forward whose length ran past its end was proposed cut short.
Source: AMQP 0-9-1 §4.2.3 (a malformed frame is the sender's error), DESIGN.md §6.
"""

from __future__ import annotations

import logging
import random
import struct
import types

import anyio
import pytest

from amqp_broker.clustering.metadata import TIMING
from amqp_broker.clustering.quorum import QuorumRuntime
from cluster.codec import (
    QUORUM_CHANGE,
    QUORUM_FORWARD,
    QUORUM_HOLDING,
    QUORUM_RAFT,
    Quorum,
)
from cluster.metadata.group import MetadataGroup
from cluster.quorum.members import ADD, encode_change
from cluster.quorum.shipping import encode_holding
from cluster.raft import codec as raft_codec
from cluster.raft.disklog import DiskLog
from cluster.raft.messages import RequestVote
from cluster.raft.node import RaftNode
from cluster.stream.group import StreamGroup
from cluster.stream.machine import StreamMachine

from .test_quorum_runtime import Links

_U32 = struct.Struct(">I")

#: name -> (Cluster.Quorum kind, content)
BAD = {
    "truncated Raft message": (QUORUM_RAFT, raft_codec.encode(RequestVote(1, "n2", 0, 0))[:5]),
    "forward longer than its body": (QUORUM_FORWARD, _U32.pack(1000) + b"xyz"),
    "forward with trailing bytes": (QUORUM_FORWARD, _U32.pack(1) + b"x" + b"\x00\x00"),
    "unknown kind": (99, b"x"),
}


def _group(kind: str, runtime: QuorumRuntime, tmp_path) -> StreamGroup | MetadataGroup:
    """A one-member group of ``kind`` ("stream" or "metadata") hosted on ``runtime``."""
    directory = tmp_path / kind
    disk = DiskLog(directory)
    node = RaftNode("n1", disk.load(), runtime.now_ms(), TIMING, random.Random(),
                    bootstrap=("n1",))
    group = (StreamGroup("n1", runtime.origin, node, StreamMachine()) if kind == "stream"
             else MetadataGroup("n1", runtime.origin, node))
    sink = types.SimpleNamespace(deleted=False, dlx=None, on_effects=lambda effects: None)
    runtime.host_group(kind, directory, group, disk, sink)
    return group


@pytest.mark.parametrize("kind", ["stream", "metadata"])
def test_malformed_content_is_dropped_with_one_line_and_the_group_goes_on(kind, tmp_path,
                                                                          caplog):
    cases = dict(BAD)
    if kind == "metadata":   # a stream's group answers holding reports with nothing, and takes
        # change requests since streams have add_replica / delete_replica (35a5253)
        cases["holding report (a quorum queue's kind)"] = (QUORUM_HOLDING,
                                                           encode_holding("n2#1", {}))
        cases["change request (a quorum queue's kind)"] = (QUORUM_CHANGE,
                                                           encode_change(ADD, "n9"))
    channel = types.SimpleNamespace(connection=types.SimpleNamespace(peer_node="n2"))

    async def main() -> None:
        broker = types.SimpleNamespace(needs_dispatch=set(), run_dispatch=lambda: None)
        runtime = QuorumRuntime(broker, tmp_path, "n1", timing=TIMING)
        runtime.attach(Links(), dict)
        async with anyio.create_task_group() as tg:
            tg.start_soon(runtime.run)
            group = _group(kind, runtime, tmp_path)
            with anyio.fail_after(10):
                while not (group.is_leader and group.node.commit_index):
                    await anyio.sleep(0.02)
            last = group.node.log.last_index
            for name, (qkind, body) in cases.items():
                caplog.clear()
                runtime.on_peer_content(channel, Quorum("", kind, kind, qkind), body)
                lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
                assert len(lines) == 1, (name, [r.getMessage() for r in lines])
                assert "n2" in lines[0].getMessage(), (name, lines[0].getMessage())
                assert group.node.log.last_index == last, f"{name}: reached the Raft log"
            # the group goes on: a well-formed forward is proposed and committed
            runtime.on_peer_content(channel, Quorum("", kind, kind, QUORUM_FORWARD),
                                    _U32.pack(3) + b"xyz")
            with anyio.fail_after(10):
                while group.node.commit_index <= last:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        runtime.close()

    anyio.run(main)
