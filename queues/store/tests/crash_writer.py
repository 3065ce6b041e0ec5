"""Child process of ``test_crash``: writes to a store under load until it is killed.

``python -m queues.store.tests.crash_writer DIRECTORY SEED``. Recovers the store, then loops:
append a batch (queues "a", "b", some to both), ack some messages that are already durable, sync;
before acking prints ``A <queue>:<ids>;...`` (what it is about to ack), after each sync prints one line ``S <id>:<queues>,...|<queue>:<ids acked>;...`` (queues like ``ab``) and
flushes: every id on such a line is durable, every ack on it is durable. Bodies are a 8-digit
counter repeated 64 times (512 bytes), so corruption is visible.
"""

from __future__ import annotations

import random
import sys

from queues.store import MessageStore
from queues.store.tests.support import msg


def main(directory: str, seed: int) -> None:
    rng = random.Random(seed)
    store = MessageStore(directory, segment_bytes=256 << 10)
    held = {q: [r.store_id for r in rs] for q, rs in store.recover().items()}
    held.setdefault("a", [])
    held.setdefault("b", [])
    counter = 0
    while True:
        appended = []
        for _ in range(rng.randint(1, 300)):
            counter += 1
            queues = rng.choice((["a"], ["b"], ["a", "b"]))
            appended.append((store.append(queues, msg(b"%08d" % counter * 64, queues[0])),
                             queues))
        acked: dict[str, list[int]] = {}
        for q in ("a", "b"):
            n = min(len(held[q]), rng.randint(0, 250))
            acked[q] = held[q][:n] if rng.random() < 0.8 else rng.sample(held[q], n)
        # announce the acks first: once written to the OS they may survive the kill unreported
        sys.stdout.write("A " + ";".join(f"{q}:" + ",".join(map(str, ids))
                                          for q, ids in acked.items()) + "\n")
        sys.stdout.flush()
        for q, ids in acked.items():
            for sid in ids:
                assert store.ack(q, sid)
            done = set(ids)
            held[q] = [s for s in held[q] if s not in done]
        store.sync()
        for sid, queues in appended:
            for q in queues:
                held[q].append(sid)
        line = ",".join(f"{s}:{''.join(qs)}" for s, qs in appended) + "|" + ";".join(
            f"{q}:" + ",".join(map(str, ids)) for q, ids in acked.items())
        sys.stdout.write(f"S {line}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
