"""tune_gc: a broker's per-frame allocations stop setting off a collection every few hundred."""

from __future__ import annotations

import subprocess
import sys

from amqp_broker.server.gc_tuning import GEN0_THRESHOLD

# Reads as the broker handles them: a 256 KiB read of 16 B messages is ~11,000 frames, a tuple
# each, alive together in the list the frame splitter returns and dropped when the read is done
# (100 reads). Prints the gen-0 threshold, how many generation-0 collections ran, then whether a
# dropped reference cycle was collected (weakref callback) once a growing backlog (60,000 queue
# entries) brought a collection round on its own.
WORKLOAD = """
import gc, sys, weakref
if sys.argv[1] == "tuned":
    from amqp_broker.server.gc_tuning import tune_gc
    print(tune_gc()[0])
else:
    print(gc.get_threshold()[0])
runs = [0]
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 0
                    and runs.__setitem__(0, runs[0] + 1))
for i in range(100):
    frames = [(1, j & 0xFFFF, b"payload") for j in range(11000)]
del frames
print(runs[0])
class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a
gone = []
ref = weakref.ref(a, lambda _: gone.append(True))
del a, b
backlog = [[i] for i in range(60000)]
print(bool(gone))
"""


def _run(mode: str) -> tuple[int, int, bool]:
    proc = subprocess.run([sys.executable, "-c", WORKLOAD, mode], capture_output=True, text=True,
                          timeout=120, check=True)
    threshold, runs, collected = proc.stdout.split()
    return int(threshold), int(runs), collected == "True"


def test_tuned_process_collects_far_less_often_and_still_collects_cycles() -> None:
    default_threshold, default_runs, default_collected = _run("default")
    tuned_threshold, tuned_runs, tuned_collected = _run("tuned")
    assert tuned_threshold == GEN0_THRESHOLD > default_threshold
    # 1.1 million frames: ~15 collections a read with CPython's threshold of 700, none tuned
    # (a read's frames never add up to the threshold before they are dropped)
    assert default_runs >= 1000
    assert tuned_runs == 0
    # a reference cycle dropped by the broker is still freed by a later collection
    assert default_collected and tuned_collected
