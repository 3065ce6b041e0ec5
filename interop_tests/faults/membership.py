"""The ``membership`` nemesis: quorum-queue replicas added and removed, brokers removed from the
cluster and joined again, while kills and partitions run in the same fault (a seeded mix).

Each fault picks an operation and a companion fault (both from the run's seeded RNG) and runs
them at the same time; the companion lasts ``duration`` s, the operation as long as it takes
(every step bounded). Operations, with quorum queues (RabbitMQ's replica management,
``rabbitmq-queues add_member / delete_member / grow / shrink``, through the management API of a
running broker, as ``amqp-broker ctl`` calls it):

- ``delete-add``: ``delete_member`` of a random member of the workload queue's group, then
  ``add_member`` of it again;
- ``shrink-grow``: ``shrink NODE`` (every queue), then ``grow NODE all``;
- ``replace``: a broker removed and a new one joined in its place, as RabbitMQ's procedure for
  replacing a node (``rabbitmq-queues shrink`` of it, ``forget_cluster_node``, reset, join,
  ``grow``): SIGTERM (our orderly Cluster.Leave), ``shrink`` of its replicas from another broker,
  its data dir wiped, started again with the same name and address (it joins afresh, through the
  others), then ``grow NODE all``;
- ``rejoin-stale``: kill -9 of a broker, ``delete_member`` of its replica while it is down, the
  broker restarted with its old files (a replica of a configuration it is no longer in), then
  ``add_member`` of it again;
- ``wipe-rejoin``: a broker's disk replaced without the procedure: kill -9, its data dir
  wiped, restarted with the same name and address while its replica is still a member of the
  group (the operator skipped ``shrink``; a replica that lost everything it acknowledged must not
  count as if it held it).

With a replicated stream (``--queue-type stream``, issue 25) the operations are those that
change one replica -- ``delete-add``, ``rejoin-stale``, ``wipe-rejoin`` -- through RabbitMQ's
``rabbitmq-streams add_replica / delete_replica`` (``amqp-broker ctl add_replica``, the API's
``/api/queues/stream/...``); there is no grow or shrink for streams, in RabbitMQ either.

With classic queues (no replicas to manage) the operation is ``leave-rejoin``: SIGTERM (an
orderly leave), then a restart with its data dir (a wiped one would lose the messages a classic
queue keeps on that broker only, as on RabbitMQ). Companions (never aimed at the operation's
broker): ``none``, ``kill`` (kill -9 of another broker, restarted after ``duration`` s),
``kill-queue-leader`` (the queue's Raft leader when it is another broker), ``partition-one``,
``partition-halves`` (healed after ``duration`` s). ``AMQP_FAULTS_MEMBERSHIP_OPS=op,op``
narrows the operations chosen from (``OPS_ENV``).

A group smaller than the cluster (a queue declared while a broker was still joining) is
grown to every broker before the operation. Before the fault ends the nemesis waits (at most ``SETTLE_TIMEOUT`` s) for one agreed view and
for the group to have every broker again (re-asking ``add_member`` for those missing: a change
that timed out during a partition), so that the run ends with every replica in the group and the
replica comparison covers them all. History events: ``membership`` (operation, target, companion),
``member-call`` (each API call: what, broker asked, HTTP status, result), ``stop`` / ``wipe`` /
``kill`` / ``restart`` / ``partition`` / ``heal``, ``membership-settled`` (members, after_s) or
``membership-not-settled``.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .brokers import MANAGEMENT_PORT, PASSWORD, USER
from .kills import queue_leader
from .nemesis import NEMESES, Context, _await_rejoin, complete_grudge

__all__ = ["COMPANIONS", "OPS", "STREAM_OPS", "management_call", "membership", "queue_members"]

OPS = ("delete-add", "shrink-grow", "replace", "rejoin-stale", "wipe-rejoin")
STREAM_OPS = ("delete-add", "rejoin-stale", "wipe-rejoin")
REPLICATED = ("quorum", "stream")
CLASSIC_OPS = ("leave-rejoin",)
#: Environment variable: a comma-separated subset of the operations to choose from (to reproduce
#: or study one; unknown names are ignored, an empty set means all).
OPS_ENV = "AMQP_FAULTS_MEMBERSHIP_OPS"
COMPANIONS = ("none", "kill", "kill-queue-leader", "partition-one", "partition-halves")
#: Seconds a replica change may take at the broker (its own bound is 30 s) plus the HTTP round.
CALL_TIMEOUT = 35.0
#: Seconds the fault waits at its end for one view and a full group.
SETTLE_TIMEOUT = 60.0
#: Seconds a broker gets to leave in order after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0


def management_call(host: str, method: str, path: str, body: dict[str, Any] | None = None,
                    timeout: float = CALL_TIMEOUT) -> tuple[int, Any]:
    """``method`` ``path`` (below ``/api``) on the management API of the broker at ``host``, as
    the harness's administrator; (HTTP status, decoded JSON body or None). An HTTP error is an
    answer (its status and body); raises ``OSError`` when the broker cannot be reached."""
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{host}:{MANAGEMENT_PORT}/api{path}", data=data,
                                 method=method,
                                 headers={"Authorization": f"Basic {auth}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def _queue_path(ctx: Context) -> str:
    return f"/%2F/{urllib.parse.quote(ctx.queue, safe='')}"


def queue_members(ctx: Context) -> list[str] | None:
    """The workload queue's group (``members``) as the first running broker that holds a replica
    reports it (one outside the group reports the declared members; asked last); None when no
    broker answers."""
    answers: list[list[str]] = []
    for b in ctx.brokers.brokers:
        if not b.running or b.paused:
            continue
        try:
            status, info = management_call(b.host, "GET", "/queues" + _queue_path(ctx),
                                           timeout=1.0)
        except OSError:
            continue
        if status == 200 and isinstance(info, dict) and isinstance(info.get("members"), list):
            if b.name in info["members"]:
                return [str(m) for m in info["members"]]
            answers.append([str(m) for m in info["members"]])
    return answers[0] if answers else None


def _call(ctx: Context, what: str, method: str, path: str, body: dict[str, Any] | None = None,
          avoid: int | None = None) -> int | None:
    """Ask the running brokers in turn (``avoid`` last) until one answers with success (a 404 or
    5xx -- a broker still catching up, a change that timed out -- goes on to the next); record
    each answer; returns the last HTTP status (None: nobody answered)."""
    last = None
    order = [b for b in ctx.brokers.brokers if b.index != avoid] + \
        [b for b in ctx.brokers.brokers if b.index == avoid]
    for b in order:
        if ctx.abort.is_set():
            return None
        if not b.running or b.paused:
            continue
        try:
            status, answer = management_call(b.host, method, path, body)
        except OSError as exc:
            ctx.record("member-call", what=what, asked=b.name, error=str(exc)[:120])
            continue
        ctx.record("member-call", what=what, asked=b.name, status=status, answer=answer)
        last = status
        if status < 400 or (status != 404 and status < 500):
            return status
    return last


def _replicas_path(ctx: Context, op: str) -> str:
    kind = "stream" if ctx.queue_type == "stream" else "quorum"
    return f"/queues/{kind}{_queue_path(ctx)}/replicas/{op}"


def _add(ctx: Context, node: str, avoid: int | None = None) -> int | None:
    what = "add_replica" if ctx.queue_type == "stream" else "add_member"
    return _call(ctx, f"{what} {node}", "POST", _replicas_path(ctx, "add"), {"node": node},
                 avoid)


def _delete(ctx: Context, node: str, avoid: int | None = None) -> int | None:
    what = "delete_replica" if ctx.queue_type == "stream" else "delete_member"
    return _call(ctx, f"{what} {node}", "DELETE", _replicas_path(ctx, "delete"),
                 {"node": node}, avoid)


def _shrink(ctx: Context, node: str, avoid: int | None = None) -> int | None:
    return _call(ctx, f"shrink {node}", "DELETE",
                 f"/queues/quorum/replicas/on/{urllib.parse.quote(node)}/shrink", None, avoid)


def _grow(ctx: Context, node: str, avoid: int | None = None) -> int | None:
    return _call(ctx, f"grow {node} all", "POST",
                 f"/queues/quorum/replicas/on/{urllib.parse.quote(node)}/grow",
                 {"strategy": "all"}, avoid)


def _stop(ctx: Context, index: int) -> None:
    """SIGTERM broker ``index`` (an orderly leave) and reap it; kill -9 after ``STOP_TIMEOUT``."""
    b = ctx.brokers[index]
    ctx.brokers.resume(index)
    if b.proc is not None and b.proc.poll() is None:
        b.proc.send_signal(signal.SIGTERM)
        try:
            b.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            ctx.brokers.kill(index)
    ctx.record("stop", target=b.name, returncode=b.proc.returncode if b.proc else None)


def _wipe(ctx: Context, index: int) -> None:
    b = ctx.brokers[index]
    shutil.rmtree(b.data_dir, ignore_errors=True)
    b.data_dir.mkdir(parents=True, exist_ok=True)
    ctx.record("wipe", target=b.name)


def _run_op(ctx: Context, op: str, target: int, duration: float) -> None:
    """The operation's steps (see the module docstring); each API call is bounded."""
    name = ctx.brokers[target].name
    half = duration / 2
    if op == "delete-add":
        _delete(ctx, name)
        ctx.sleep(half)
        _add(ctx, name)
    elif op == "shrink-grow":
        _shrink(ctx, name, avoid=target)
        ctx.sleep(half)
        _grow(ctx, name, avoid=target)
    elif op == "replace":
        _stop(ctx, target)
        _shrink(ctx, name, avoid=target)
        _wipe(ctx, target)
        ctx.sleep(half)
        ctx.brokers.start(target)
        ctx.record("restart", target=name, fresh=True)
        _await_rejoin(ctx, name)
        _grow(ctx, name, avoid=target)
    elif op == "rejoin-stale":
        ctx.brokers.kill(target)
        ctx.record("kill", target=name, kind="member")
        _delete(ctx, name, avoid=target)
        ctx.sleep(half)
        ctx.brokers.start(target)
        ctx.record("restart", target=name)
        _await_rejoin(ctx, name)
        _add(ctx, name, avoid=target)
    elif op == "wipe-rejoin":
        ctx.brokers.kill(target)
        ctx.record("kill", target=name, kind="member")
        _wipe(ctx, target)
        ctx.sleep(half)
        ctx.brokers.start(target)
        ctx.record("restart", target=name, fresh=True)
        _await_rejoin(ctx, name)
    elif op == "leave-rejoin":
        _stop(ctx, target)
        ctx.sleep(half)
        ctx.brokers.start(target)
        ctx.record("restart", target=name)
        _await_rejoin(ctx, name)
    else:
        raise ValueError(f"unknown membership operation {op!r}")


def _companion(ctx: Context, kind: str, target: int, duration: float, done: threading.Event
               ) -> None:
    """Run companion fault ``kind`` for ``duration`` s, never aimed at broker ``target``."""
    n = len(ctx.brokers)
    others = [i for i in range(n) if i != target]
    try:
        if kind in ("kill", "kill-queue-leader"):
            victim = ctx.rng.choice(others)
            if kind == "kill-queue-leader" and ctx.queue_type in REPLICATED:
                leader = queue_leader(ctx)
                if leader is not None and leader != target:
                    victim = leader
            ctx.brokers.kill(victim)
            ctx.record("kill", target=ctx.brokers[victim].name, kind=kind, companion=True)
            try:
                ctx.sleep(duration)
            finally:
                ctx.brokers.start(victim)
                ctx.record("restart", target=ctx.brokers[victim].name, companion=True)
        elif kind in ("partition-one", "partition-halves"):
            nodes = list(range(n))
            ctx.rng.shuffle(nodes)
            cut = 1 if kind == "partition-one" else n // 2
            grudge: dict[int, Iterable[int]] = dict(complete_grudge([nodes[:cut], nodes[cut:]]))
            ctx.net.apply_grudge(grudge)
            ctx.record("partition", kind=kind, companion=True,
                       grudge={ctx.brokers[a].name: [ctx.brokers[b].name for b in sorted(d)]
                               for a, d in grudge.items()})
            try:
                ctx.sleep(duration)
            finally:
                ctx.net.heal()
                ctx.record("heal", kind=kind, companion=True)
    finally:
        done.set()


def _settle(ctx: Context, timeout: float = SETTLE_TIMEOUT) -> None:
    """Wait for one agreed view and (quorum queues) a group of every broker, asking
    ``add_member`` again for a missing one every few seconds; record how it ended."""
    start = ctx.history.now()
    want = sorted(b.name for b in ctx.brokers.brokers)
    asked = -10.0
    members: list[str] | None = None
    while not ctx.abort.is_set() and ctx.history.now() - start < timeout:
        if ctx.brokers.agreed():
            if ctx.queue_type not in REPLICATED:
                break
            members = queue_members(ctx)
            if members is not None and sorted(members) == want:
                break
            if members is not None and ctx.history.now() - asked >= 5.0:
                asked = ctx.history.now()
                for missing in sorted(set(want) - set(members)):
                    _add(ctx, missing)
        ctx.sleep(0.5)
    else:
        ctx.record("membership-not-settled", members=members,
                   after_s=round(ctx.history.now() - start, 2))
        return
    ctx.record("membership-settled", members=members,
               after_s=round(ctx.history.now() - start, 2))


def membership(ctx: Context, duration: float) -> None:
    """One ``membership`` fault (see the module docstring): an operation and a companion fault
    at once, then wait until the cluster and the group are whole again."""
    ops = {"quorum": OPS, "stream": STREAM_OPS}.get(ctx.queue_type, CLASSIC_OPS)
    chosen = [o for o in os.environ.get(OPS_ENV, "").split(",") if o in ops]
    op = ctx.rng.choice(chosen or ops)
    companion = ctx.rng.choice(COMPANIONS)
    members = queue_members(ctx) if ctx.queue_type in REPLICATED else None
    if members is not None and len(members) < len(ctx.brokers):
        # a group smaller than the cluster (declared while a broker was still joining) is
        # grown first, as an operator would before taking a member away: a group of two
        # that loses one member's disk has no majority left, on RabbitMQ too
        for b in ctx.brokers.brokers:
            if b.name not in members:
                _add(ctx, b.name)
        members = queue_members(ctx)
    pool = [b.index for b in ctx.brokers.brokers
            if members is None or b.name in members] or list(range(len(ctx.brokers)))
    target = ctx.rng.choice(pool)
    side = replace(ctx, rng=random.Random(ctx.rng.random()))
    ctx.record("membership", operation=op, target=ctx.brokers[target].name, companion=companion,
               members=members)
    done = threading.Event()
    thread = None
    if companion != "none":
        thread = threading.Thread(target=_companion, name="membership-companion",
                                  args=(side, companion, target, duration, done), daemon=True)
        thread.start()
    try:
        _run_op(ctx, op, target, duration)
    finally:
        if thread is not None:
            thread.join(duration + STOP_TIMEOUT + 30)
        for b in ctx.brokers.brokers:   # a step that raised may have left one down
            if not b.running:
                ctx.brokers.start(b.index)
                ctx.record("restart", target=b.name)
    _settle(ctx)


NEMESES["membership"] = membership
