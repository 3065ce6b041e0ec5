"""Replica management of a quorum queue's group: the requests and notices that move a group to
other brokers, and the checks RabbitMQ makes before it changes a group. Pure.

Owns: the payloads of two Cluster.Quorum kinds and the rules around them.
- A *change request* (``encode_change``): "add" or "delete" a broker's replica. Any broker can
  take the operation (``rabbitmq-queues add_member`` / ``delete_member`` / ``grow`` / ``shrink``
  reach whichever node the CLI talks to); it goes to the group's leader, which alone can change
  the configuration (one server at a time, Raft thesis §4.1; a new server is caught up as a
  non-voter before its configuration entry is appended, §4.2.1: ``RaftNode.add_member``).
- A *members notice* (``encode_notice``): the leader tells every broker of the cluster view the
  group's committed configuration (the one no later leader can undo) and the servers it is
  catching up. A broker named as a learner starts an empty replica (at the leader's term) and
  receives the snapshot and log; a broker with a replica that is neither a member nor a learner
  of a configuration at least as new as its own log's closes its replica and deletes its files,
  and serves the queue from outside the group (``remote.RemoteGroup``); brokers outside the group
  learn where to forward. Notices are ordered by (leader term, configuration index): older ones
  are ignored.
Checks (``check_change``), with RabbitMQ's error reasons (``rabbit_quorum_queue:add_member/4``,
``delete_member/3``): adding a node that is not running in the cluster is ``node_not_running``;
adding a member or deleting a non-member is a no-op (RabbitMQ: "idempotent by design"); deleting
the only member is ``last_node``. ``grow`` with strategy ``even`` adds only to groups with an even
number of members (RabbitMQ's rabbitmq-queues(8)).
Must not know: sockets, files, clocks. Sources: RabbitMQ "Quorum Queues" ("Replica management"),
rabbitmq-queues(8); Ongaro's thesis §4.1-§4.2.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ADD", "DELETE", "TRANSFER", "MembersNotice", "encode_change", "decode_change", "encode_notice",
           "decode_notice", "check_change", "grows", "NODE_NOT_RUNNING", "LAST_NODE",
           "CHANGE_IN_PROGRESS", "NO_LEADER"]

ADD = 1
DELETE = 2
TRANSFER = 3   # hand the leadership to the member named (``rabbitmq-queues rebalance``, drain)
#: RabbitMQ's reasons (``{error, node_not_running}``, ``{error, last_node}``), and ours.
NODE_NOT_RUNNING = "node_not_running"
LAST_NODE = "last_node"
CHANGE_IN_PROGRESS = "change_in_progress"   # another change (or a new leader's first commit) runs
NO_LEADER = "no_leader"                     # the group has no leader this broker knows of

_CHANGE = struct.Struct(">B")
_NOTICE = struct.Struct(">QQQ")


def encode_change(op: int, node: str) -> bytes:
    """A change request: ``op`` (``ADD`` / ``DELETE`` / ``TRANSFER``) u8, then the node name
    (utf-8)."""
    return _CHANGE.pack(op) + node.encode()


def decode_change(payload: bytes) -> tuple[int, str]:
    """(op, node) of a change request. Raises ``ValueError`` when malformed."""
    if len(payload) < 2 or payload[0] not in (ADD, DELETE, TRANSFER):
        raise ValueError("not a change request")
    try:
        return payload[0], bytes(payload[1:]).decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"not a change request: {exc}") from exc


@dataclass(frozen=True, slots=True)
class MembersNotice:
    """What a leader of ``term`` tells the cluster: the configuration committed at log ``index``
    (``members``), the servers being caught up (``learners``) and its newest configuration
    (``latest``: appended, maybe not committed yet; a server named there keeps its replica);
    ``commit``: its commit index when sent (a re-created replica votes only once its log
    reaches it: ``RaftNode`` ``vote_floor``)."""

    term: int
    index: int
    members: tuple[str, ...]
    learners: tuple[str, ...] = ()
    latest: tuple[str, ...] = ()
    commit: int = 0

    @property
    def key(self) -> tuple[int, int]:
        """The order of notices: (term, index)."""
        return self.term, self.index


def encode_notice(notice: MembersNotice) -> bytes:
    """``term`` u64, ``index`` u64, ``commit`` u64, then members, learners and latest, each comma-separated,
    separated by ``;`` (utf-8). Raises ``ValueError`` for a name containing ``,`` or ``;``."""
    for name in (*notice.members, *notice.learners, *notice.latest):
        if "," in name or ";" in name or not name:
            raise ValueError(f"bad node name {name!r}")
    text = ";".join(",".join(names) for names in (notice.members, notice.learners,
                                                    notice.latest))
    return _NOTICE.pack(notice.term, notice.index, notice.commit) + text.encode()


def decode_notice(payload: bytes) -> MembersNotice:
    """The notice of ``encode_notice``. Raises ``ValueError`` when malformed (no members too)."""
    try:
        term, index, commit = _NOTICE.unpack_from(payload)
        parts = bytes(payload[_NOTICE.size:]).decode().split(";")
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a members notice: {exc}") from exc
    if len(parts) != 3 or not parts[0]:
        raise ValueError("not a members notice")
    members, learners, latest = (tuple(m for m in p.split(",") if m) for p in parts)
    return MembersNotice(term, index, members, learners, latest, commit)


def check_change(op: int, node: str, members: Iterable[str], running: Iterable[str]
                 ) -> tuple[bool, str | None]:
    """Whether ``op`` of ``node`` on a group of ``members`` is needed, and why it cannot be
    made: (False, None) a no-op (adding a member, deleting a non-member: RabbitMQ answers ok);
    (False, reason) refused (``NODE_NOT_RUNNING``: adding a node not in ``running``, the
    cluster view; ``LAST_NODE``: deleting the only member); (True, None) to be made."""
    members = tuple(members)
    if op == ADD:
        if node in members:
            return False, None
        if node not in set(running):
            return False, NODE_NOT_RUNNING
        return True, None
    if node not in members:
        return False, None
    if len(members) == 1:
        return False, LAST_NODE
    return True, None


def grows(strategy: str, node: str, members: Iterable[str]) -> bool:
    """Whether ``grow NODE STRATEGY`` adds ``node`` to a group of ``members``: ``all`` every
    group it is not in, ``even`` only those with an even number of members (rabbitmq-queues(8)).
    Raises ``ValueError`` for another strategy."""
    if strategy not in ("all", "even"):
        raise ValueError(f"strategy must be 'all' or 'even', not {strategy!r}")
    members = tuple(members)
    if node in members:
        return False
    return strategy == "all" or len(members) % 2 == 0
