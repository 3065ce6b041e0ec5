"""A broker whose disk was replaced (its data dir wiped) joins again with the same name while its
replica is still a member of a replicated stream's group (issue 25 with issue 24's
``wipe-rejoin``). Real parts: ``QuorumRuntime`` and ``StreamReplicas`` with ``DiskLog`` and the
stream's segment files in a temporary directory, ``RaftNode``; a recording stand-in for the peer
links.

Found reading the stream replicas against the quorum queues' rule (``test_quorum_rejoin.py``):
the joining broker got the stream's declaration in the join replay, found no files and, being
one of the declared members, bootstrapped the group again -- an empty Raft log, voting at once.
Its lost log then counts as a vote: a candidate missing records this replica had acknowledged
(committed with it as the majority) could be elected with its grant, and confirmed messages of
the stream would be gone (Ongaro's thesis §11.7.1). What must hold: a declaration applied while
the broker is still joining (``broker.accepting_clients`` False) makes no Raft replica (the
stream is read from the members meanwhile); the replica is made when the group's leader names
this broker (members notice, ``amqp_broker.clustering.stream_members``), empty at the leader's
term, and votes only once its log reaches the leader's commit index (``RaftNode``
``vote_floor``). Source: Raft paper §5.4.1, RabbitMQ "Clustering"."""

from __future__ import annotations

import types

import anyio

from amqp_broker.clustering.quorum import QuorumRuntime
from amqp_broker.clustering.stream import install
from cluster.codec import QUORUM_MEMBERS, QUORUM_RAFT, Quorum
from cluster.quorum import config as qconfig
from cluster.quorum.members import MembersNotice, encode_notice
from cluster.raft import codec as raft_codec
from cluster.raft.messages import RequestVote, RequestVoteReply
from queues.arguments import QueueSettings
from queues.stream.manager import StreamManager

from .test_quorum_runtime import Links, _raft_messages, _until

MEMBERS = ("n1", "n2", "n3")


def test_a_wiped_stream_member_rejoining_votes_only_once_the_leader_names_it(tmp_path):
    async def main() -> None:
        broker = types.SimpleNamespace(needs_dispatch=set(), run_dispatch=lambda: None,
                                       accepting_clients=False,   # joining: in the replay
                                       cluster_hooks=object(), queue_types={},
                                       peer_content=lambda *_a: None)
        runtime = QuorumRuntime(broker, tmp_path, "n3")
        broker.peer_content = runtime.on_peer_content
        install(broker, runtime)
        links = Links()
        runtime.attach(links, dict)
        manager = StreamManager(tmp_path / "streams")
        vhost = types.SimpleNamespace(name="/", stream_manager=lambda: manager)

        def send(kind: int, frm: str, body: bytes) -> None:
            channel = types.SimpleNamespace(connection=types.SimpleNamespace(peer_node=frm))
            broker.peer_content(channel, Quorum("/", "s", "g", kind), body)

        def grants() -> list[bool]:
            return [m.granted for m in _raft_messages(links, "n2")
                    if isinstance(m, RequestVoteReply)]

        async with anyio.create_task_group() as tg:
            tg.start_soon(runtime.run)
            assert await _until(lambda: runtime._tg is not None)
            broker.queue_types["stream"].create(vhost, "s", QueueSettings(), arguments={
                "x-queue-type": "stream", qconfig.MEMBERS_ARG: ",".join(MEMBERS),
                qconfig.GROUP_ARG: "g"})
            rep = runtime.replicas["g"]
            # a stale candidate (n2, log up to index 40 of term 5) asks for a vote in term 6,
            # as it would with the leader n1 down: this broker lost what it had acknowledged
            send(QUORUM_RAFT, "n2", raft_codec.encode(RequestVote(6, "n2", 40, 5)))
            await anyio.sleep(0.2)
            assert not any(grants()), "a wiped stream member granted a vote with an empty log"
            assert rep.raft is None, "a wiped stream member bootstrapped the group again"
            # the leader (n1, term 5, commit 100) names this broker: a replica is made
            send(QUORUM_MEMBERS, "n1", encode_notice(
                MembersNotice(5, 1, MEMBERS, (), MEMBERS, commit=100)))
            assert rep.raft is not None
            assert rep.raft.node.vote_floor == 100
            send(QUORUM_RAFT, "n2", raft_codec.encode(RequestVote(6, "n2", 40, 5)))
            assert await _until(grants)
            assert not any(grants())
            tg.cancel_scope.cancel()
        runtime.close()
        manager.close()

    anyio.run(main)
