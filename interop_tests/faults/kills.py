"""Kill targets beyond the ``kill`` nemesis's one broker: the quorum queue's Raft leader, a
majority at once, all at once; each restarted after the fault.

- ``kill-queue-leader``: kill -9 the member that leads the workload's quorum queue, as a running
  broker's management API reports it (``GET /api/queues/<vhost>/<name>``: ``leader``, RabbitMQ's
  field for quorum queues; :func:`queue_leader`); a random broker when none is known (classic
  queues have no leader: the event says ``kind: random``). Not the head of the cluster view,
  which the ``kill`` nemesis targets.
- ``kill-majority``: kill -9 ``n // 2 + 1`` random brokers at once.
- ``kill-all``: kill -9 every broker at once.

The dead are restarted after ``duration`` s with the same data dir, name and address, and the
fault waits until every broker is back in one agreed view (30 s for one, 60 s for more).
With a majority down nothing can be confirmed meanwhile: what must hold is that nothing confirmed
before is lost and that the cluster comes back by itself (the membership "Restart" rule of
``cluster.membership``; Raft's persisted term, vote and log).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from .brokers import MANAGEMENT_PORT, PASSWORD, USER
from .nemesis import NEMESES, REJOIN_TIMEOUT, Context, _await_rejoin

__all__ = ["kill_targets", "management_get", "queue_leader"]

#: Seconds brokers get to agree again after a majority or all of them restarted.
MANY_REJOIN_TIMEOUT = 60.0


def management_get(host: str, path: str, timeout: float = 1.0) -> object:
    """GET ``path`` (below ``/api``) from the management API of the broker at ``host``, as the
    harness's administrator user; the decoded JSON. Raises ``OSError`` (unreachable, an HTTP
    error) and ``ValueError`` (not JSON)."""
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    req = urllib.request.Request(f"http://{host}:{MANAGEMENT_PORT}/api{path}",
                                 headers={"Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def queue_leader(ctx: Context, vhost: str = "/") -> int | None:
    """The index of the broker whose replica leads ``ctx.queue``, as the first running broker
    that knows one says; None when no running broker names a leader among the brokers."""
    by_name = {b.name: b.index for b in ctx.brokers.brokers}
    path = f"/queues/{urllib.parse.quote(vhost, safe='')}/{urllib.parse.quote(ctx.queue)}"
    for b in ctx.brokers.brokers:
        if not b.running or b.paused:
            continue
        try:
            info = management_get(b.host, path)
        except (OSError, ValueError):
            continue
        leader = info.get("leader") if isinstance(info, dict) else None
        if isinstance(leader, str) and leader in by_name:
            return by_name[leader]
    return None


def kill_targets(pick: Callable[[Context], tuple[list[int], str]], label: str,
                 doc: str) -> Callable[[Context, float], None]:
    """A nemesis that kills -9 the brokers ``pick(ctx)`` returns (indexes, kind), restarts them
    after ``duration`` s and waits for one agreed view."""
    def fault(ctx: Context, duration: float) -> None:
        targets, kind = pick(ctx)
        names = [ctx.brokers[i].name for i in targets]
        for i in targets:
            ctx.brokers.kill(i)
        ctx.record("kill", targets=names, kind=kind, nemesis=label)
        try:
            ctx.sleep(duration)
        finally:
            for i in targets:
                ctx.brokers.start(i)
            ctx.record("restart", targets=names)
        _await_rejoin(ctx, ",".join(names),
                      REJOIN_TIMEOUT if len(targets) == 1 else MANY_REJOIN_TIMEOUT)
    fault.__doc__ = doc
    return fault


def _queue_leader(ctx: Context) -> tuple[list[int], str]:
    leader = queue_leader(ctx)
    if leader is None:
        return [ctx.rng.randrange(len(ctx.brokers))], "random"
    return [leader], "queue-leader"


def _majority(ctx: Context) -> tuple[list[int], str]:
    n = len(ctx.brokers)
    return sorted(ctx.rng.sample(range(n), n // 2 + 1)), "majority"


def _all(ctx: Context) -> tuple[list[int], str]:
    return list(range(len(ctx.brokers))), "all"


NEMESES["kill-queue-leader"] = kill_targets(
    _queue_leader, "kill-queue-leader",
    "kill -9 the quorum queue's Raft leader (a random broker when none is known); restart it "
    "after ``duration`` s; wait for one view.")
NEMESES["kill-majority"] = kill_targets(
    _majority, "kill-majority",
    "kill -9 a random majority of the brokers at once; restart them after ``duration`` s.")
NEMESES["kill-all"] = kill_targets(
    _all, "kill-all", "kill -9 every broker at once; restart them after ``duration`` s.")
