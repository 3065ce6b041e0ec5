"""A quorum queue's restart replays its backlog from the Raft log without a memory peak
(issue 25), with its real parts: ``DiskLog`` in a temporary directory, ``RaftNode``, the
state machine and ``QuorumRuntime`` with its timers, group commit and event loop.

A restart reads the log ``lazy``: its entries come as runs of terms (``PersistentState.dry``),
the ``Apply`` of the backlog builds an ``Entry`` per part of ``quorum_paging.BATCH_ENTRIES``
only (``DryEntries``), and the runtime runs the event loop between parts, so that the broker
serves others while the queue replays. RabbitMQ's quorum queues keep only a small record per
message in memory and recover their log from its segments ("Quorum Queues", memory usage;
rabbitmq/ra ``ra_log``)."""

from __future__ import annotations

import tracemalloc
import types

import anyio

from amqp_broker.clustering.quorum import QuorumRuntime, _Replica
from amqp_broker.clustering.quorum_paging import BATCH_ENTRIES
from cluster.quorum.machine import envelope
from cluster.raft import fifo as f
from cluster.raft.disklog import DiskLog
from cluster.raft.fifo import FifoConfig
from cluster.raft.messages import Entry, EntryKind, encode_members

N = 20 * BATCH_ENTRIES   # a backlog of 20 parts
HEADER = b"\x00\x01q" + b"\x00" * 14


def _body(seq: int) -> bytes:
    return b"message %06d " % seq + b"." * 80


def _write_backlog(directory) -> None:
    """A group of one (n1) in term 1 with ``N`` Enqueues after its CONFIG entry, on disk."""
    disk = DiskLog(directory, fsync=False)
    disk.save_state(1, "n1")
    disk.append(1, (Entry(1, 1, EntryKind.CONFIG, encode_members(("n1",))),))
    for start in range(1, N + 1, 1024):
        disk.append(start + 1, tuple(
            Entry(seq + 1, 1, EntryKind.COMMAND,
                  envelope("n1#1", seq, f.encode(f.Enqueue("n1#1", seq, None, HEADER,
                                                           _body(seq), 0))))
            for seq in range(start, min(start + 1024, N + 1))))
    disk.sync()
    disk.close()


async def _until(check, steps: int = 3000) -> bool:
    """Whether ``check()`` became true within about 30 s (bounded polling)."""
    for _ in range(steps):
        if check():
            return True
        await anyio.sleep(0.01)
    return check()


def test_a_restart_replays_its_backlog_in_slices_without_an_object_per_message(tmp_path,
                                                                               monkeypatch):
    """The replica reopened on a backlog of N messages: while it replays, the event loop runs
    (another task sees the queue's count part way); traced memory never grows by more than
    64 bytes a message (the columns, the log's positions and one part of entries in flight; an
    ``Entry`` per message as before was over 200), and every message comes back whole, in
    order."""
    monkeypatch.setenv("AMQP_QUORUM_PAGE_BYTES", "0")   # no read cache: every body paged
    directory = tmp_path / "quorum" / "g"
    _write_backlog(directory)

    async def main() -> tuple[list[int], int, list[f.Deliver]]:
        broker = types.SimpleNamespace(needs_dispatch=set(), run_dispatch=lambda: None)
        runtime = QuorumRuntime(broker, tmp_path, "n1", fsync=False)
        seen: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(runtime.run)
            assert await _until(lambda: runtime._tg is not None)
            rep = _Replica("g", "/", "q", ("n1",), directory, FifoConfig())
            runtime.replicas["g"] = rep
            runtime.ticker_wanted()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                raft = runtime._open_replica(rep, bootstrap=("n1",))
                rep.group = raft
                fifo = raft.machine.fifo

                async def watch() -> None:   # another client of the event loop
                    for _ in range(3000):    # until the replay starts (an election first)
                        if rep.blocked or fifo.message_count():
                            break
                        await anyio.sleep(0.01)
                    for _ in range(100_000):
                        seen.append(fifo.message_count())
                        if seen[-1] >= N:
                            return
                        await anyio.sleep(0)

                tg.start_soon(watch)
                assert await _until(lambda: fifo.message_count() >= N and not rep.blocked)
                peak = tracemalloc.get_traced_memory()[1] - base
            finally:
                tracemalloc.stop()
            got = [d for d in fifo.apply_command(N + 10, f.Checkout("c", 0, 0))
                   if isinstance(d, f.Deliver)]
            tg.cancel_scope.cancel()
        runtime.close()
        return seen, peak, got

    seen, peak, got = anyio.run(main)
    assert peak / N < 64, f"{peak / N:.0f} B a message at the peak of the replay"
    assert any(0 < c < N for c in seen), "the event loop never ran during the replay"
    assert [(d.header, d.body) for d in got] == [(HEADER, _body(s)) for s in range(1, N + 1)]
