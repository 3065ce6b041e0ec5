"""Cluster benchmark 1, CPU per message, local vs relayed (see ``benchmarks/cluster.py``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from benchmarks.cluster_bench import Bench, bench_cmd, bench_timeout, cpu_seconds, describe_bench
from benchmarks.cluster_proxy import SplitProxy
from cluster.tests.processes import Member


@dataclass
class CpuRun:
    case: str  # "local" | "relayed"
    queue: str
    bench: Bench
    cpu_a: float = 0.0  # CPU seconds of broker A over the run
    cpu_b: float = 0.0
    cpu_proxy: float = 0.0

    @property
    def consumed(self) -> int:
        return int(self.bench.figures["consumed"]) if self.bench.figures else 0

    def us_per_msg(self, cpu: float) -> float:
        return cpu * 1e6 / self.consumed if self.consumed else float("nan")

    @property
    def total_us(self) -> float:
        return self.us_per_msg(self.cpu_a + self.cpu_b)


def cpu_run(binary: Path, proxy: SplitProxy, a: Member, b: Member, case: str, queue: str,
            rate: int, seconds: int) -> CpuRun:
    """One fixed-rate amqbench run through the proxy: admin, consumer, producer connections."""
    admin_consumer = a if case == "local" else b
    proxy.set_routes([(admin_consumer.host, admin_consumer.port)] * 2 + [(a.host, a.port)])
    bench = Bench(bench_cmd(binary, "127.0.0.1", proxy.port, queue, seconds, "--rate", str(rate)),
                  bench_timeout(seconds))
    me = os.getpid()
    pa, pb = a.proc.pid, b.proc.pid
    before = cpu_seconds(pa), cpu_seconds(pb), cpu_seconds(me)
    bench.start().finish()
    after = cpu_seconds(pa), cpu_seconds(pb), cpu_seconds(me)
    run = CpuRun(case, queue, bench, after[0] - before[0], after[1] - before[1],
                 after[2] - before[2])
    if proxy.accepted != 3:
        bench.error = (bench.error + "; " if bench.error else "") + (
            f"the proxy saw {proxy.accepted} connections, expected 3")
    return run


def measure_cpu(binary: Path, a: Member, b: Member, rate: int, seconds: int, rounds: int,
                warmup: bool) -> list[CpuRun]:
    proxy = SplitProxy()
    runs: list[CpuRun] = []
    try:
        if warmup:
            for case in ("local", "relayed"):
                r = cpu_run(binary, proxy, a, b, case, f"cpu-warmup-{case}", rate, 1)
                print(f"  warm-up {case}: {describe_bench(r.bench)}", flush=True)
        order: list[str] = []
        for i in range(rounds):
            order += ["local", "relayed"] if i % 2 == 0 else ["relayed", "local"]
        for n, case in enumerate(order, 1):
            r = cpu_run(binary, proxy, a, b, case, f"cpu-{case}-{n}", rate, seconds)
            runs.append(r)
            print(f"  {case:8} {describe_bench(r.bench)}; CPU µs/msg A {r.us_per_msg(r.cpu_a):.1f}"
                  f" + B {r.us_per_msg(r.cpu_b):.1f} = {r.total_us:.1f} "
                  f"(proxy {r.us_per_msg(r.cpu_proxy):.1f})", flush=True)
    finally:
        proxy.close()
    return runs
