"""The quorum runtime (``amqp_broker.clustering.quorum.QuorumRuntime``, real ``DiskLog``, Raft
node, group commit and worker threads) on a full disk: its replica directory on a real tmpfs
that a filler file fills. A follower hears a leader of a newer term with a new entry: it must
persist the term (a ``state`` file written whole and renamed) and append the entry, and neither
write has room. What must hold: the runtime keeps running (before the fix the persist's ENOSPC
ended it: ``_persist_async`` re-raised every ``OSError``, and so did the group commit's write),
nothing is acknowledged while unwritten, and once space is back the term is durable and the
entry acknowledged. Issue 24 (``disk-full``). Needs root (mount)."""

from __future__ import annotations

import logging
import types

import anyio
import pytest

from amqp_broker.clustering.quorum import QuorumRuntime, _Replica
from cluster.raft.disklog import DiskLog
from cluster.raft.fifo import FifoConfig
from cluster.raft.messages import AppendEntries, Entry, EntryKind, encode_members
from queues.store.tests.small_fs import UNAVAILABLE, fill, free, small_fs

from .test_quorum_runtime import Links, _command, _raft_replies

pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))


async def _until(check, seconds: float = 10.0) -> bool:
    """Whether ``check()`` became true within ``seconds`` (bounded polling)."""
    for _ in range(int(seconds * 50)):
        if check():
            return True
        await anyio.sleep(0.02)
    return check()


def test_a_follower_waits_out_a_full_disk_then_persists_and_acknowledges(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="amqp_broker.clustering")
    with small_fs(tmp_path / "fs", 1 << 20) as fs:
        async def main() -> None:
            broker = types.SimpleNamespace(needs_dispatch=set(), run_dispatch=lambda: None)
            runtime = QuorumRuntime(broker, fs, "n1")
            links = Links()
            runtime.attach(links, dict)
            async with anyio.create_task_group() as tg:
                tg.start_soon(runtime.run)
                assert await _until(lambda: runtime._tg is not None)
                rep = _Replica("g", "/", "q", ("n1", "n2", "n3"), fs / "quorum" / "g",
                               FifoConfig())
                runtime.replicas["g"] = rep
                raft = runtime._open_replica(rep, bootstrap=("n1", "n2", "n3"))
                rep.group = raft
                runtime.execute(rep, raft.node.tick(runtime.now_ms()))
                config = Entry(2, 1, EntryKind.CONFIG, encode_members(("n1", "n2", "n3")))
                runtime.execute(rep, raft.receive(
                    "n2", AppendEntries(1, "n2", 1, 0, (config,), 1), runtime.now_ms()))
                assert await _until(lambda: any(r.success and r.match_index == 2
                                                for r in _raft_replies(links, "n2")))
                fill(fs)
                entry = Entry(3, 2, EntryKind.COMMAND, _command(1))
                runtime.execute(rep, raft.receive(
                    "n2", AppendEntries(2, "n2", 2, 1, (entry,), 2), runtime.now_ms()))
                assert await _until(lambda: "cannot persist its Raft state" in caplog.text)
                assert not any(r.match_index == 3 for r in _raft_replies(links, "n2"))
                free(fs)
                acked = await _until(lambda: any(r.success and r.match_index == 3
                                                 for r in _raft_replies(links, "n2")))
                assert acked, f"entry 3 not acknowledged: {raft.node.persisted_index}"
                tg.cancel_scope.cancel()
            runtime.close()
            state = DiskLog(fs / "quorum" / "g").load()
            assert state.term == 2
            assert [e.index for e in state.entries][-1] == 3

        anyio.run(main)
