"""A broker whose disk was replaced (its data dir wiped) joins again with the same name while its
replica is still a member of a quorum queue's group: the ``membership`` nemesis's
``wipe-rejoin`` (issue 24). Real parts: ``QuorumRuntime`` with ``DiskLog`` in a temporary
directory, ``RaftNode``; a recording stand-in for the peer links.

Found by the nemesis: the joining broker got the queue's declaration in the join replay, found no
files and, being one of the declared members, bootstrapped the group again -- an empty log at
term 0, voting at once. Its lost log then counted as a vote: a candidate missing entries this
replica had acknowledged (committed with it as the majority) could be elected with its grant and
the committed entries would be gone (the Raft "lost disk" hazard, Ongaro's thesis §11.7.1; Ra's
log-divergence bug, 2.15.2). What must hold: a declaration applied while the broker is still
joining (``broker.accepting_clients`` False: the queue existed before it joined) makes no
replica; the replica is made when the group's leader names this broker (members notice), empty
at the leader's term, and votes only once its log reaches the leader's commit index
(``RaftNode`` ``vote_floor``). Source: Raft paper §5.4.1 (election restriction), RabbitMQ
"Clustering" (a reset node must be forgotten and its quorum members removed before it rejoins)."""

from __future__ import annotations

import types

import anyio

from amqp_broker.clustering.quorum import QuorumRuntime
from cluster.codec import QUORUM_RAFT, Quorum
from cluster.quorum import config as qconfig
from cluster.quorum.members import MembersNotice, encode_notice
from cluster.raft import codec as raft_codec
from cluster.raft.messages import Message, RequestVote, RequestVoteReply
from queues.arguments import QueueSettings

from .test_quorum_runtime import Links, _raft_messages, _until

MEMBERS = ("n1", "n2", "n3")


def _vote_replies(links: Links, to: str) -> list[RequestVoteReply]:
    """The vote replies sent to ``to``."""
    return [m for m in _raft_messages(links, to) if isinstance(m, RequestVoteReply)]


def test_a_wiped_member_rejoining_makes_no_replica_until_the_leader_names_it(tmp_path):
    async def main() -> None:
        broker = types.SimpleNamespace(needs_dispatch=set(), run_dispatch=lambda: None,
                                       accepting_clients=False)   # joining: in the replay
        runtime = QuorumRuntime(broker, tmp_path, "n3")
        links = Links()
        runtime.attach(links, dict)
        vhost = types.SimpleNamespace(name="/")
        async with anyio.create_task_group() as tg:
            tg.start_soon(runtime.run)
            assert await _until(lambda: runtime._tg is not None)
            runtime.create(vhost, "q", QueueSettings(), arguments={
                "x-queue-type": "quorum", qconfig.MEMBERS_ARG: ",".join(MEMBERS),
                qconfig.GROUP_ARG: "g"})
            rep = runtime.replicas["g"]
            # a stale candidate (n2, whose log stops at index 40 of term 5) asks for a vote in
            # term 6, as it would with the leader n1 down: this broker lost what it had
            # acknowledged, so nothing here may grant it
            _send(runtime, rep, "n2", RequestVote(6, "n2", 40, 5))
            await anyio.sleep(0.2)
            assert not any(r.granted for r in _vote_replies(links, "n2")), \
                "a wiped member granted a vote with an empty log"
            assert rep.raft is None, "a wiped member bootstrapped the group again"
            # the leader (n1, term 5, commit 100) names this broker a member: a replica is made
            runtime.on_notice(rep, "n1", encode_notice(
                MembersNotice(5, 1, MEMBERS, (), MEMBERS, commit=100)))
            assert rep.raft is not None
            assert rep.raft.node.vote_floor == 100
            _send(runtime, rep, "n2", RequestVote(6, "n2", 40, 5))
            assert await _until(lambda: _vote_replies(links, "n2"))
            assert not any(r.granted for r in _vote_replies(links, "n2"))
            tg.cancel_scope.cancel()
        runtime.close()

    anyio.run(main)


def _send(runtime: QuorumRuntime, rep: object, frm: str, msg: Message) -> None:
    """Hand ``msg`` to ``runtime`` as a Cluster.Quorum from broker ``frm`` (its content)."""
    channel = types.SimpleNamespace(connection=types.SimpleNamespace(peer_node=frm))
    method = Quorum(rep.vhost, rep.name, rep.uid, QUORUM_RAFT)  # type: ignore[attr-defined]
    runtime.on_peer_content(channel, method, raft_codec.encode(msg))
