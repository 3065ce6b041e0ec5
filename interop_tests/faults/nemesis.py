"""Nemeses: the faults, and the schedule that injects and heals them during a run.

Named after Jepsen's (jepsen.nemesis: ``partition-random-node``, ``partition-random-halves``,
``partition-majorities-ring``, process kill/pause nemeses), and the faults RabbitMQ's Jepsen suite
runs against quorum queues. A partition is a *grudge*: ``{node: set of nodes it does not hear
from}`` over broker indexes, built by the pure functions below and installed by
:meth:`Network.apply_grudge <interop_tests.faults.netns.Network.apply_grudge>`.

Each nemesis's ``fault(ctx, duration)`` injects one fault, holds it ``duration`` s and heals it
(in a ``finally``), recording ``nemesis`` events: ``kill`` (kill -9 of a random broker or of the
cluster's leader, restarted with the same data dir and name when the fault ends), ``pause``
(SIGSTOP for ``duration`` s, longer than the 3-ping-interval suspicion time, then SIGCONT),
``partition-one``, ``partition-halves``, ``partition-ring``, ``link-flap`` (one peer link cut and
restored every 0.5-1.5 s), ``mixed`` (one of the others, at random, per fault), and
``power-loss`` / ``power-loss-majority`` / ``power-loss-all`` (one broker, ``n // 2 + 1`` of them,
or all at once: kill -9, then every write not fsynced dropped by lazyfs, restarted after
``duration`` s; the brokers run on :mod:`interop_tests.faults.lazyfs`, see ``NEEDS_LAZYFS``).
More nemeses add themselves to ``NEMESES`` from their own modules (imported by ``runner``):
``corrupt`` (:mod:`interop_tests.faults.corrupt`: one broker's files damaged while it is down) and
the kill targets of :mod:`interop_tests.faults.kills` (``kill-queue-leader``: the quorum queue's
Raft leader, ``kill-majority``, ``kill-all``).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .brokers import Brokers
from .history import History
from .netns import Network

__all__ = ["NEEDS_DISK", "NEEDS_LAZYFS", "NEMESES", "Context", "Grudge", "complete_grudge", "halves",
           "isolate_one", "majorities_ring", "run_schedule"]

Grudge = dict[int, set[int]]


def complete_grudge(components: list[list[int]]) -> Grudge:
    """A grudge where each node hears only the nodes of its own component (a clean split)."""
    everyone = {n for comp in components for n in comp}
    return {n: everyone - set(comp) for comp in components for n in comp}


def isolate_one(n: int, rng: random.Random) -> Grudge:
    """One random node cut off from the other ``n - 1`` in both directions."""
    node = rng.randrange(n)
    return complete_grudge([[node], [i for i in range(n) if i != node]])


def halves(n: int, rng: random.Random) -> Grudge:
    """Random halves: a shuffled split into ``n // 2`` and ``n - n // 2`` nodes."""
    nodes = list(range(n))
    rng.shuffle(nodes)
    return complete_grudge([nodes[: n // 2], nodes[n // 2:]])


def majorities_ring(n: int, rng: random.Random) -> Grudge:
    """Every node hears a majority (itself included), no two the same majority: nodes in a
    shuffled ring, each hearing a window of ``n // 2 + 1`` ring positions around itself
    (symmetric for 5 nodes: both neighbours; for 3 nodes one-way: itself and its successor, as
    Jepsen's ``majorities-ring`` grudge). Needs ``n >= 3``; raises ``ValueError`` otherwise."""
    if n < 3:
        raise ValueError("a majorities ring needs at least 3 nodes")
    ring = list(range(n))
    rng.shuffle(ring)
    majority = n // 2 + 1
    before = (majority - 1) // 2
    after = majority - 1 - before
    grudge: Grudge = {}
    for pos, node in enumerate(ring):
        hears = {ring[(pos + k) % n] for k in range(-before, after + 1)}
        grudge[node] = set(range(n)) - hears
    return grudge


@dataclass
class Context:
    """What a nemesis acts on: the brokers, the network, a seeded RNG, the history, an
    ``abort`` event that cuts every wait short (Ctrl-C, failure), the workload's ``queue`` and
    ``queue_type``, and ``state`` a nemesis keeps between its faults (e.g. ``corrupt``'s file
    copies)."""

    brokers: Brokers
    net: Network
    history: History
    rng: random.Random
    abort: threading.Event = field(default_factory=threading.Event)
    queue: str = "jepsen.queue"
    queue_type: str = "classic"
    state: dict[str, Any] = field(default_factory=dict)

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; False when aborted."""
        return not self.abort.wait(max(0.0, seconds))

    def record(self, action: str, **details: Any) -> None:
        """Record a ``nemesis`` event."""
        self.history.record("nemesis", action=action, **details)


def _names(ctx: Context, nodes: Any) -> list[str]:
    return [ctx.brokers[i].name for i in sorted(nodes)]


#: Seconds a restarted broker gets to be back in one agreed view before the next fault.
REJOIN_TIMEOUT = 30.0


def kill(ctx: Context, duration: float) -> None:
    """kill -9 a random broker or the cluster leader; restart it after ``duration`` s, then wait
    (at most ``REJOIN_TIMEOUT`` s) until it is back in one agreed view, so that faults stay within
    a minority: one broker down at a time (the fault model the broker promises to survive; a
    restart takes several seconds on a loaded machine, and killing a second broker meanwhile would
    leave a minority of the old view that may not admit anyone)."""
    leader = ctx.brokers.leader()
    if leader is not None and ctx.rng.random() < 0.5:
        target, kind = leader, "leader"
    else:
        target, kind = ctx.rng.randrange(len(ctx.brokers)), "random"
    ctx.brokers.kill(target)
    ctx.record("kill", target=ctx.brokers[target].name, kind=kind)
    try:
        ctx.sleep(duration)
    finally:
        ctx.brokers.start(target)
        ctx.record("restart", target=ctx.brokers[target].name)
    _await_rejoin(ctx, ctx.brokers[target].name)


def _await_rejoin(ctx: Context, target: str, timeout: float = REJOIN_TIMEOUT) -> None:
    """Wait (at most ``timeout`` s) until every broker is back in one agreed view; record
    ``rejoined`` or ``not-rejoined`` with ``target`` (the restarted, a name or names)."""
    started = ctx.history.now()
    while not ctx.abort.is_set() and ctx.history.now() - started < timeout:
        if ctx.brokers.agreed():
            ctx.record("rejoined", target=target, after_s=round(ctx.history.now() - started, 2))
            return
        ctx.sleep(0.2)
    ctx.record("not-rejoined", target=target, after_s=timeout)


def pause(ctx: Context, duration: float) -> None:
    """SIGSTOP a random broker for ``duration`` s, then SIGCONT."""
    target = ctx.rng.randrange(len(ctx.brokers))
    ctx.brokers.pause(target)
    ctx.record("pause", target=ctx.brokers[target].name)
    try:
        ctx.sleep(duration)
    finally:
        ctx.brokers.resume(target)
        ctx.record("resume", target=ctx.brokers[target].name)


def _partition(make: Callable[[int, random.Random], Grudge], label: str) -> Callable[..., None]:
    def fault(ctx: Context, duration: float) -> None:
        grudge = make(len(ctx.brokers), ctx.rng)
        ctx.net.apply_grudge(grudge)
        ctx.record("partition", kind=label,
                   grudge={ctx.brokers[n].name: _names(ctx, deaf) for n, deaf in grudge.items()})
        try:
            ctx.sleep(duration)
        finally:
            ctx.net.heal()
            ctx.record("heal", kind=label)
    fault.__doc__ = f"Install a {label} grudge for ``duration`` s, then heal."
    return fault


def link_flap(ctx: Context, duration: float) -> None:
    """Cut one random peer link (both ways) and restore it every 0.5-1.5 s for ``duration``."""
    a, b = ctx.rng.sample(range(len(ctx.brokers)), 2)
    names = _names(ctx, (a, b))
    ctx.record("flap-start", link=names)
    flaps = 0
    try:
        elapsed = 0.0
        while elapsed < duration and flaps < 1000:
            ctx.net.cut_both(a, b)
            down = ctx.rng.uniform(0.5, 1.5)
            if not ctx.sleep(down):
                break
            ctx.net.restore_both(a, b)
            up = ctx.rng.uniform(0.5, 1.5)
            if not ctx.sleep(up):
                break
            elapsed += down + up
            flaps += 1
    finally:
        ctx.net.restore_both(a, b)
        ctx.record("flap-end", link=names, flaps=flaps)


NEMESES: dict[str, Callable[[Context, float], None]] = {
    "kill": kill,
    "pause": pause,
    "partition-one": _partition(isolate_one, "partition-one"),
    "partition-halves": _partition(halves, "partition-halves"),
    "partition-ring": _partition(majorities_ring, "partition-ring"),
    "link-flap": link_flap,
}


def mixed(ctx: Context, duration: float) -> None:
    """One of the other nemeses, chosen at random, for ``duration`` s."""
    name = ctx.rng.choice([n for n in sorted(NEMESES)
                           if (ctx.brokers.lazyfs or n not in NEEDS_LAZYFS)
                           and (ctx.brokers.disks or n not in NEEDS_DISK)])
    ctx.record("mixed", chose=name)
    NEMESES[name](ctx, duration)


NEMESES["mixed"] = mixed


def _power_loss(pick: Callable[[Context], list[int]], label: str,
                who: str) -> Callable[..., None]:
    def fault(ctx: Context, duration: float) -> None:
        targets = pick(ctx)
        names = _names(ctx, targets)
        try:
            dropped = ctx.brokers.power_loss(targets)
            ctx.record("power-loss", kind=label, targets=names, dropped=dropped)
            ctx.sleep(duration)
        finally:
            for t in targets:
                ctx.brokers.start(t)
            ctx.record("restart", targets=names)
        _await_rejoin(ctx, ",".join(names), POWER_REJOIN_TIMEOUT)
    fault.__doc__ = (f"Power loss of {who} (kill -9, then every write not fsynced dropped by "
                     "lazyfs); restart after ``duration`` s with the same data dir, name and "
                     "address; wait for one view.")
    return fault


def _one(ctx: Context) -> list[int]:
    leader = ctx.brokers.leader()
    if leader is not None and ctx.rng.random() < 0.5:
        return [leader]
    return [ctx.rng.randrange(len(ctx.brokers))]


#: Seconds restarted brokers get to agree after a power loss (a majority or all restart at once).
POWER_REJOIN_TIMEOUT = 60.0
#: Nemeses whose brokers must run on lazyfs (``Brokers(lazyfs=True)``); ``mixed`` skips them
#: otherwise.
NEEDS_LAZYFS = frozenset({"power-loss", "power-loss-majority", "power-loss-all"})
#: Nemeses whose brokers must run on loop disks (``Brokers(disk=...)``,
#: :mod:`interop_tests.faults.diskfull`); ``mixed`` skips them otherwise.
NEEDS_DISK = frozenset({"disk-full"})
NEMESES["power-loss"] = _power_loss(_one, "power-loss", "one broker (the leader or any)")
NEMESES["power-loss-majority"] = _power_loss(
    lambda ctx: sorted(ctx.rng.sample(range(len(ctx.brokers)), len(ctx.brokers) // 2 + 1)),
    "power-loss-majority", "a random majority of the brokers at once")
NEMESES["power-loss-all"] = _power_loss(lambda ctx: list(range(len(ctx.brokers))),
                                        "power-loss-all", "every broker at once")


def run_schedule(ctx: Context, name: str, seconds: float, fault_s: float = 4.0,
                 calm_s: float = 3.0, warmup_s: float = 2.0) -> int:
    """Inject nemesis ``name`` repeatedly during a ``seconds``-long workload: ``warmup_s`` of
    calm, then cycles of ``fault_s`` s of fault (a little randomised) and ``calm_s`` s of calm
    while a whole cycle still fits. Returns the number of faults injected. Raises ``KeyError``
    for an unknown name. Heals the network and resumes paused brokers before returning; dead
    brokers are restarted by the faults themselves."""
    fault = NEMESES[name]
    end = ctx.history.now() + seconds
    count = 0
    if not ctx.sleep(warmup_s):
        return 0
    while count < 1000 and not ctx.abort.is_set():
        duration = fault_s * ctx.rng.uniform(0.75, 1.25)
        if ctx.history.now() + duration + 1.0 > end:
            break
        fault(ctx, duration)
        count += 1
        if not ctx.sleep(min(calm_s, max(0.0, end - ctx.history.now()))):
            break
    ctx.net.heal()
    for b in ctx.brokers.brokers:
        ctx.brokers.resume(b.index)
    return count
