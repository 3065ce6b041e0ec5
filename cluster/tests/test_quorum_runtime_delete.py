"""A quorum queue deleted while a group-commit round still syncs its log
(``amqp_broker.clustering.quorum.QuorumRuntime``, real ``DiskLog`` files).

The CI run at 385178e lost its shared broker this way: a test deleted a quorum queue while the
group commit's worker thread ran that queue's fsyncs; ``Queue.Delete`` closed the log and deleted
its directory, the thread then wrote the log's mark, found no ``marks`` file, and the
``FileNotFoundError`` stopped the broker (every later test on that broker failed to connect).
What must hold: the round ends without an error, and a queue declared again at once under the
same name (the same group id, the same directory) keeps its own log, untouched by the old one's
late writes."""

from __future__ import annotations

import types

from amqp_broker.clustering.quorum import QuorumRuntime, _Replica
from amqp_broker.clustering.quorum_timers import _run_all
from cluster.raft.disklog import DiskLog
from cluster.raft.fifo import FifoConfig


def _replica(runtime: QuorumRuntime, tmp_path) -> _Replica:
    """A one-member group ``g`` of this broker, bootstrapped (its first entries appended)."""
    rep = _Replica("g", "/", "q", ("n1",), tmp_path / "quorum" / "g", FifoConfig())
    runtime.replicas["g"] = rep
    raft = runtime._open_replica(rep, bootstrap=("n1",))
    rep.group = raft
    runtime.execute(rep, raft.node.tick(runtime.now_ms()))
    return rep


def _runtime(tmp_path) -> QuorumRuntime:
    broker = types.SimpleNamespace(needs_dispatch=set(), run_dispatch=lambda: None)
    runtime = QuorumRuntime(broker, tmp_path, "n1")
    runtime.group_commit = True          # this test drives the rounds (as ``sync_round``)
    return runtime


def test_a_queue_deleted_during_a_group_commit_round_ends_the_round_cleanly(tmp_path):
    runtime = _runtime(tmp_path)
    old = _replica(runtime, tmp_path)
    flushed = runtime.begin_sync()       # on the loop: the round's writes
    assert [r for r, _p, _n in flushed] == [old]
    runtime._close(old, delete_files=True)          # Queue.Delete, while the fsyncs run
    assert not old.directory.exists()
    _run_all([p for _r, p, _n in flushed])          # the worker thread's half: must not raise
    runtime.end_sync(flushed)
    assert not old.directory.exists()               # nothing recreated it
    assert not runtime.replicas and not runtime._closing
    runtime.close()


def test_a_queue_declared_again_during_that_round_keeps_its_own_log(tmp_path):
    runtime = _runtime(tmp_path)
    old = _replica(runtime, tmp_path)
    flushed = runtime.begin_sync()
    runtime._close(old, delete_files=True)
    new = _replica(runtime, tmp_path)               # declared again: the same directory
    assert new.directory == old.directory
    _run_all([p for _r, p, _n in flushed])
    runtime.end_sync(flushed)
    while runtime.sync_round():
        pass
    new_last = new.raft.node.log.last_index
    assert new_last >= 1
    runtime.close()
    reopened = DiskLog(new.directory)
    assert reopened.lost is None
    state = reopened.load()
    assert state.entries and state.entries[-1].index == new_last
    reopened.close()
