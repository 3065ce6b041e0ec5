"""Cluster benchmark 3, failure detection (see ``benchmarks/cluster.py``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster.tests.processes import Cluster, Member

ACTION = {"kill": "kill -9", "freeze": "SIGSTOP"}


@dataclass
class KillRun:
    victim: str  # "member" | "leader"
    ping_interval: float
    action: str  # "kill" (SIGKILL) | "freeze" (SIGSTOP)
    seconds: float | None  # kill to the last survivor's new view; None: not within the timeout
    per_survivor: list[float | None] = field(default_factory=list)
    error: str = ""


def kill_run(base: Path, victim: str, ping_interval: float, action: str,
             timeout: float = 15.0) -> KillRun:
    cluster = Cluster.create(base, "--ping-interval", str(ping_interval), "--log-level", "warning")
    try:
        n2, n3, n4 = cluster.start_three()
        dead = n2 if victim == "leader" else n4  # the view is ordered, the leader first
        survivors = [m for m in (n2, n3, n4) if m is not dead]
        expected = [m.address for m in survivors]
        seen: list[float | None] = [None] * len(survivors)

        def poll(i: int, member: Member, t0: float) -> None:
            while time.monotonic() - t0 < timeout:
                tick = time.monotonic()
                if member.members() == expected:
                    seen[i] = time.monotonic() - t0
                    return
                time.sleep(max(0.0, 0.02 - (time.monotonic() - tick)))

        t0 = time.monotonic()
        if action == "kill":
            dead.proc.kill()  # SIGKILL: the kernel closes its sockets, peers see the links drop
        else:
            cluster.freeze(dead)  # SIGSTOP: sockets stay open, only the ring ping notices
        pollers = [threading.Thread(target=poll, args=(i, m, t0), daemon=True)
                   for i, m in enumerate(survivors)]
        for p in pollers:
            p.start()
        for p in pollers:
            p.join(timeout + 5)
        if action == "kill":
            dead.proc.wait(10)
        took = None if None in seen else max(s for s in seen if s is not None)
        return KillRun(victim, ping_interval, action, took, seen)
    except AssertionError as exc:
        return KillRun(victim, ping_interval, action, None, error=str(exc).splitlines()[0])
    finally:
        cluster.stop_all()


def measure_failover(workdir: Path, ping_intervals: Sequence[float], repeats: int,
                     actions: Sequence[str]) -> list[KillRun]:
    runs = []
    n = 0
    for action in actions:
        for pi in ping_intervals:
            for victim in ("member", "leader"):
                for _ in range(repeats):
                    n += 1
                    base = workdir / f"kill-{n}"
                    base.mkdir()
                    r = kill_run(base, victim, pi, action)
                    runs.append(r)
                    shown = "; ".join("—" if s is None else f"{s:.3f}" for s in r.per_survivor)
                    print(f"  ping {pi} s, {ACTION[action]} of the {victim}: "
                          + (f"{r.seconds:.3f} s (survivors {shown})" if r.seconds is not None
                             else f"NO NEW VIEW {r.error}"), flush=True)
    return runs
