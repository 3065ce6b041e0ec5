"""A quorum queue's state machine alone under callgrind (issues 12 and 25): instructions a message.

``python -m benchmarks.quorum_machine [--mode mem|cache|paged] [--messages N]``: runs itself under
``valgrind --tool=callgrind`` with N and 2N messages (``PYTHONHASHSEED=0``) and prints
(Ir(2N) - Ir(N)) / N. Each message: a 1 KiB ``Enqueue`` with a 15-byte header, encoded with
``cluster.raft.fifo.encode`` and applied with ``FifoQueue.apply`` (as every replica applies it),
delivered at once to a consumer waiting with prefetch 0; a ``Settle`` per 64 messages;
``FifoConfig(delivery_limit=20)`` (RabbitMQ 4.0's default). ``--mode``: ``mem`` without paging
(every body in memory), ``cache`` paging on with the bodies in the read cache (the broker's
default), ``paged`` paging on with a read cache of 0 (every body read back through the seam, here
from a dict). Run it with ``AMQP_BROKER_PURE=1`` for the Python source (the default when the
build is stale). ``--run N``: the workload alone (what callgrind runs). Figures: RESULTS.md,
"Quorum queues larger than RAM".
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

HEADER = b"\x00\x3c\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x10\x00\x02"
BODY = b"x" * 1024
SETTLE_EVERY = 64


def workload(n: int, mode: str) -> None:
    """Apply ``n`` messages as the module docstring says."""
    from cluster.raft.fifo import Checkout, Enqueue, FifoConfig, FifoQueue, Settle, encode

    q = FifoQueue(FifoConfig(delivery_limit=20))
    if mode != "mem":
        q.read = lambda i: (HEADER, BODY)
    if mode == "paged":
        q.page_bytes = 0
    q.apply(1, encode(Checkout("c", 0, 0)))
    ids: list[int] = []
    index = 2
    for i in range(n):
        q.apply(index, encode(Enqueue("p", i, None, HEADER, BODY, 0)))
        ids.append(index)
        index += 1
        if len(ids) == SETTLE_EVERY:
            q.apply(index, encode(Settle("c", tuple(ids))))
            index += 1
            ids = []
    if q.message_count():
        raise SystemExit(f"{q.message_count()} messages left ready")


def instructions(n: int, mode: str) -> int:
    """Ir of one callgrind run of ``workload(n, mode)``."""
    with tempfile.TemporaryDirectory(prefix="quorum-machine-") as tmp:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out",
             sys.executable, "-m", "benchmarks.quorum_machine", "--mode", mode, "--run", str(n)],
            env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
            check=True)
    found = re.search(r"refs:\s+([\d,]+)", out.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from callgrind:\n{out.stderr}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["mem", "cache", "paged"], default="cache")
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--run", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.run is not None:
        workload(args.run, args.mode)
        return 0
    n = args.messages
    low, high = instructions(n, args.mode), instructions(2 * n, args.mode)
    print(f"{args.mode}: {(high - low) / n:,.0f} instructions a message "
          f"(Ir {low:,} at {n}, {high:,} at {2 * n})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
