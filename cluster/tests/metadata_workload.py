"""Random metadata commands over a few names, so that concurrent clients conflict often (tests).

``random_command(rng, members)`` draws one command of every kind the metadata log has, over two
vhosts, three queues, three exchanges (one of them reserved), two users and two connections per
member, with the arguments whose equivalence is checked (x-max-length 10 or 20), the three queue
types, exclusive queues homed on ``members``, headers bindings with a bad ``x-match`` now and
then, policies (sometimes ``ha-mode``), vhosts, users with random hashes, permissions, and
``MemberGone``. Every draw comes from ``rng``: a seed gives the same workload.
"""

from __future__ import annotations

import random
from typing import Any

from cluster.metadata import commands as m

VHOSTS = ("/", "v1")
QUEUES = ("q0", "q1", "q2")
EXCHANGES = ("x0", "x1", "amq.x")
USERS = ("u0", "u1")


def _queue_args(rng: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if rng.random() < 0.5:
        args["x-max-length"] = rng.choice([10, 20])
    r = rng.random()
    if r < 0.15:
        args["x-queue-type"] = "quorum"
    elif r < 0.2:
        args["x-queue-type"] = "stream"
    elif r < 0.25:
        args["x-message-ttl"] = -1   # invalid: 406
    return args


def _binding(rng: random.Random, cls: type, connection: str) -> m.Bind | m.Unbind:
    vhost = rng.choice(VHOSTS)
    to_exchange = rng.random() < 0.3
    args: dict[str, Any] = {}
    if rng.random() < 0.2:
        args["x-match"] = rng.choice(["any", "all", "bad"])
    return cls(vhost, rng.choice(EXCHANGES + ("",)),
               rng.choice(EXCHANGES if to_exchange else QUEUES),
               m.EXCHANGE if to_exchange else m.QUEUE, rng.choice(["", "a", "a.*"]), args,
               connection)


def random_command(rng: random.Random, members: list[str]) -> m.Command:
    """One random command (see the module docstring)."""
    member = rng.choice(members)
    connection = f"{member}/c{rng.randint(0, 1)}"
    vhost = rng.choice(VHOSTS)
    kind = rng.choices(
        ["declare_queue", "delete_queue", "declare_exchange", "delete_exchange", "bind",
         "unbind", "set_policy", "clear_policy", "add_vhost", "delete_vhost", "put_user",
         "delete_user", "set_permission", "clear_permission", "member_gone"],
        weights=[14, 5, 8, 4, 10, 4, 3, 2, 3, 1, 3, 1, 2, 1, 1])[0]
    if kind == "declare_queue":
        args = _queue_args(rng)
        durable = args.get("x-queue-type") in ("quorum", "stream") or rng.random() < 0.5
        return m.DeclareQueue(vhost, rng.choice(QUEUES), durable, rng.random() < 0.15,
                              rng.random() < 0.1, args, connection, member)
    if kind == "delete_queue":
        return m.DeleteQueue(vhost, rng.choice(QUEUES), connection)
    if kind == "declare_exchange":
        args = {"alternate-exchange": "x1"} if rng.random() < 0.1 else {}
        return m.DeclareExchange(vhost, rng.choice(EXCHANGES + ("",)),
                                 rng.choice(["direct", "fanout", "topic", "headers", "nope"]),
                                 rng.random() < 0.5, rng.random() < 0.3, False, args)
    if kind == "delete_exchange":
        return m.DeleteExchange(vhost, rng.choice(EXCHANGES), rng.random() < 0.3)
    if kind in ("bind", "unbind"):
        return _binding(rng, m.Bind if kind == "bind" else m.Unbind, connection)
    if kind == "set_policy":
        definition: dict[str, Any] = {"max-length": rng.choice([5, 10])}
        if rng.random() < 0.2:
            definition = {"ha-mode": "all"}
        return m.SetPolicy(vhost, rng.choice(["p0", "p1"]), rng.choice(["^q", "q1", "("]),
                           definition, rng.randint(0, 2))
    if kind == "clear_policy":
        return m.ClearPolicy(vhost, rng.choice(["p0", "p1"]))
    if kind == "add_vhost":
        return m.AddVhost(vhost, rng.choice(["", "test"]), (), rng.choice(USERS + ("",)))
    if kind == "delete_vhost":
        return m.DeleteVhost("v1")
    if kind == "put_user":
        return m.PutUser(rng.choice(USERS), f"hash{rng.randrange(1000)}",
                         tags=rng.choice([(), ("administrator",)]))
    if kind == "delete_user":
        return m.DeleteUser(rng.choice(USERS))
    if kind == "set_permission":
        return m.SetPermission(rng.choice(USERS), vhost, rng.choice([".*", "^q"]))
    if kind == "clear_permission":
        return m.ClearPermission(rng.choice(USERS), vhost)
    return m.MemberGone(member)
