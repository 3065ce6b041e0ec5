"""Which quorum-queue leaderships to move so that the brokers lead about as many queues each:
RabbitMQ's ``rabbitmq-queues rebalance quorum`` (``rabbit_amqqueue:rebalance/3``), pure.

``Rebalance(queues, running)``: ``queues`` are ``(key, leader, members, length)`` (``key`` any
hashable naming the queue, ``length`` its log entries, RabbitMQ's ``queue_length``: last written
index minus snapshot index), ``running`` the brokers that may lead (the cluster's members not in
maintenance). As RabbitMQ's: at most ``ceil(len(queues) / len(running))`` leaders per broker are
wanted; brokers are visited in name order; a broker over that hands its shortest queue not moved
yet to the member of that queue (running, not its leader) that leads the fewest queues, the
first such in name order; every queue moves at most once; the plan ends when no broker is over
the limit with a queue still to move. ``next_move()`` says the next move (``Move``) or None;
``done(move, migrated)`` records its outcome (a failed transfer leaves the queue where it was,
marked as tried, as RabbitMQ's ``update_not_migrated_queue``); ``summary()`` the leaders per
broker the plan ends with, as ``rabbitmq-queues rebalance`` prints them. Source: rabbitmq-server
v3.10.8 ``deps/rabbit/src/rabbit_amqqueue.erl`` (``maybe_rebalance``, ``iterative_rebalance``,
``maybe_migrate``, ``sort_by_number_of_queues``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

__all__ = ["Move", "Rebalance"]


@dataclass(frozen=True, slots=True)
class Move:
    """Hand the leadership of queue ``key`` from broker ``source`` to broker ``target``."""

    key: Hashable
    source: str
    target: str


class Rebalance:
    """The plan's state (see module docstring)."""

    def __init__(self, queues: Iterable[tuple[Hashable, str, Iterable[str], int]],
                 running: Iterable[str]) -> None:
        queues = list(queues)
        self.running = set(running)
        self.members = {key: tuple(members) for key, _leader, members, _length in queues}
        self.length = {key: length for key, _leader, _members, length in queues}
        #: broker -> [(length, key, moved or tried)], shortest first (RabbitMQ's group_by_node)
        self.by_node: dict[str, list[tuple[int, Hashable, bool]]] = {}
        for key, leader, _members, length in queues:
            self.by_node.setdefault(leader, []).append((length, key, False))
        for entries in self.by_node.values():
            entries.sort(key=lambda e: e[0])
        count, brokers = len(queues), max(1, len(self.running))
        self.max_desired = count // brokers + (1 if count % brokers else 0)

    def _count(self, node: str) -> int:
        return len(self.by_node.get(node, ()))

    def next_move(self) -> Move | None:
        """The next leadership to move, or None when balanced (or nothing more can move)."""
        for node in sorted(self.by_node):
            entries = self.by_node[node]
            while len(entries) > self.max_desired and not entries[0][2]:
                _length, key, _ = entries[0]
                candidates = [m for m in self.members[key] if m != node and m in self.running]
                if not candidates:
                    self._tried(node)
                    continue
                target = min(sorted(candidates), key=self._count)
                return Move(key, node, target)
        return None

    def _tried(self, node: str) -> None:
        """The head queue of ``node`` stays there, marked (moved to the back, as RabbitMQ's)."""
        entries = self.by_node[node]
        length, key, _ = entries.pop(0)
        entries.append((length, key, True))

    def done(self, move: Move, migrated: bool) -> None:
        """Record ``move``'s outcome."""
        if not migrated:
            self._tried(move.source)
            return
        entries = self.by_node[move.source]
        entries[:] = [e for e in entries if e[1] != move.key]
        self.by_node.setdefault(move.target, []).append((self.length[move.key], move.key, True))

    def summary(self) -> list[dict[str, object]]:
        """Leaders per broker (every running one, and any other that leads), by name:
        ``{"Node name": N, "Number of quorum queues": n}`` as rabbitmq-queues prints them."""
        nodes = sorted(self.running | {n for n, e in self.by_node.items() if e})
        return [{"Node name": n, "Number of quorum queues": self._count(n)} for n in nodes]
