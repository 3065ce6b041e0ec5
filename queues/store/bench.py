"""Micro-benchmark of the message store: ``python -m queues.store.bench [directory]``.

Measures (on the disk holding ``directory``, default a fresh temporary directory under /tmp):
appends/s of 1 KiB persistent messages into the OS buffer (sync policy "none", one write per
~1 MiB), appends/s with group commit ("batch": sync() every ``batch`` messages, one fdatasync each),
acks/s, recovery time, and the raw fdatasync rate of 100-byte appends. Prints one line per figure.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands

from ..message import Message
from .store import MessageStore


def _fsync_rate(directory: Path, seconds: float = 2.0) -> float:
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            os.write(fd, b"x" * 100)
            os.fdatasync(fd)
            n += 1
        return n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def main(argv: list[str]) -> None:
    root = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="store-bench-"))
    n = 200_000
    msg = Message.build("amq.direct", "bench", os.urandom(1024),
                        commands.Basic.Properties(delivery_mode=2))
    try:
        for policy, batch in (("none", n), ("batch", 1000), ("batch", 100)):
            directory = root / f"{policy}-{batch}"
            store = MessageStore(directory, sync=policy)
            start = time.perf_counter()
            for i in range(n):
                store.append("q", msg)
                if i % batch == batch - 1:
                    store.sync()
            store.sync()
            dt = time.perf_counter() - start
            print(f"append 1 KiB, sync={policy}, sync every {batch}: {n / dt:,.0f} msg/s")
            ids = list(range(1, n + 1))
            start = time.perf_counter()
            for i in range(0, n, 100):
                for sid in ids[i:i + 100]:
                    store.ack("q", sid)
                store.sync()
            print(f"  ack one by one, sync every 100: {n / (time.perf_counter() - start):,.0f}/s;"
                  f" files left {store.stats().files}")
            store.close()
            shutil.rmtree(directory)
        directory = root / "recover"
        store = MessageStore(directory, sync="none")
        for _ in range(n):
            store.append("q", msg)
        store.close()
        start = time.perf_counter()
        store = MessageStore(directory)
        got = store.recover(body_budget=8 << 20)
        print(f"open+recover {len(got['q']):,} msgs: {time.perf_counter() - start:.2f} s")
        store.close()
        print(f"raw fdatasync of 100-byte appends: {_fsync_rate(root):,.0f}/s")
    finally:
        if not argv:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
