"""The checker and the grudges, pure: histories in, counts out; no processes, no namespaces. Also
the run's other checks: tracebacks in the brokers' logs, and quorum queue replicas compared."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cluster.quorum.machine import QuorumMachine, envelope
from cluster.raft import fifo_commands
from cluster.raft.disklog import DiskLog
from cluster.raft.fifo import FifoConfig
from cluster.raft.messages import (
    EMPTY_SNAPSHOT,
    Entry,
    EntryKind,
    PersistentState,
    Snapshot,
    encode_members,
)
from interop_tests.faults.checker import check, unavailable_seconds
from interop_tests.faults.history import History, load
from interop_tests.faults.logscan import LogFindings, scan_logs
from interop_tests.faults.nemesis import complete_grudge, halves, isolate_one, majorities_ring
from interop_tests.faults.replicas import compare, compare_groups
from interop_tests.faults.report import SECTION, append_results, summary_line
from interop_tests.faults.runner import RunOutcome
from queues.store import format as fmt


def pub(t: float, ident: int, kind: str, client: str = "pub-n1") -> dict:
    return {"t": t, "op": "publish", "type": kind, "id": ident, "client": client}


def deliver(t: float, ident: int) -> dict:
    return {"t": t, "op": "deliver", "id": ident, "client": "con-n1"}


def published(ident: int, kind: str, t: float = 1.0) -> list[dict]:
    return [pub(t, ident, "invoke"), pub(t + 0.01, ident, kind)]


def test_every_confirmed_message_delivered_once_is_clean() -> None:
    events = [e for i in range(1, 6) for e in published(i, "ok")]
    events += [deliver(2.0, i) for i in range(1, 6)]
    r = check(events)
    assert (r.attempted, r.confirmed, r.lost, r.unexpected, r.duplicates) == (5, 5, 0, 0, 0)
    assert r.valid


def test_confirmed_but_never_delivered_is_lost() -> None:
    events = [*published(1, "ok"), *published(2, "ok"), deliver(3.0, 1)]
    r = check(events)
    assert r.lost == 1 and r.lost_ids == (2,)
    assert not r.valid


def test_failed_or_unknown_and_not_delivered_is_not_lost() -> None:
    events = [*published(1, "fail"), *published(2, "info")]
    r = check(events)
    assert (r.lost, r.failed, r.unknown, r.recovered) == (0, 1, 1, 0)


def test_failed_or_unknown_but_delivered_is_recovered() -> None:
    events = [*published(1, "fail"), *published(2, "info"), deliver(3, 1), deliver(3, 2)]
    r = check(events)
    assert (r.recovered, r.lost, r.unexpected) == (2, 0, 0)


def test_delivered_but_never_published_is_unexpected() -> None:
    events = [*published(1, "ok"), deliver(2, 1), deliver(2, 99), deliver(2, -1)]
    r = check(events)
    assert r.unexpected == 2 and r.unexpected_ids == (-1, 99)
    assert not r.valid


def test_invoked_without_outcome_and_delivered_is_not_unexpected() -> None:
    r = check([pub(1, 7, "invoke"), deliver(2, 7)])
    assert (r.unexpected, r.confirmed, r.lost) == (0, 0, 0)


def test_duplicates_are_counted_apart_from_unexpected() -> None:
    events = [*published(1, "ok"), deliver(2, 1), deliver(3, 1), deliver(4, 1)]
    r = check(events)
    assert (r.duplicates, r.unexpected, r.deliveries) == (2, 0, 3)
    assert r.valid


def test_a_late_ok_after_unknown_counts_as_confirmed() -> None:
    events = [pub(1, 5, "invoke"), pub(6, 5, "info"), pub(7, 5, "ok")]
    assert check(events).confirmed == 1
    assert check(events).lost == 1


def test_unavailable_counts_gaps_over_one_second_per_publisher() -> None:
    events = [{"t": 0.0, "op": "phase", "phase": "workload-start"}]
    for t in (0.5, 1.0, 4.0, 4.5):        # a 3 s gap
        events.append(pub(t, int(t * 10), "ok", "a"))
    for t in (0.2, 9.5):                   # a 9.3 s gap
        events.append(pub(t, 100 + int(t * 10), "ok", "b"))
    events.append({"t": 10.0, "op": "phase", "phase": "workload-stop"})
    # a: 1.0->4.0 (3.0) and 4.5->10.0 (5.5); b: 0.2->9.5 (9.3)
    assert unavailable_seconds(events) == pytest.approx(3.0 + 5.5 + 9.3)


def test_a_publisher_without_any_confirm_is_unavailable_all_along() -> None:
    events = [{"t": 1.0, "op": "phase", "phase": "workload-start"}, pub(2, 1, "invoke", "a"),
              pub(3, 1, "fail", "a"), {"t": 11.0, "op": "phase", "phase": "workload-stop"}]
    assert check(events).unavailable_s == pytest.approx(10.0)


def test_history_round_trips_through_json_lines(tmp_path: Path) -> None:
    h = History(clock=iter([0.0, 0.5, 1.25]).__next__)
    h.record("publish", type="invoke", id=1, client="p")
    h.record("deliver", id=1, client="c")
    h.write(tmp_path / "h.jsonl")
    events = load(tmp_path / "h.jsonl")
    assert [e["t"] for e in events] == [0.5, 1.25]
    assert check(events).attempted == 1


def test_grudges_isolate_split_and_ring() -> None:
    rng = random.Random(7)
    g = isolate_one(5, rng)
    alone = [n for n, deaf in g.items() if len(deaf) == 4]
    assert len(alone) == 1 and all(deaf == set(alone) for n, deaf in g.items() if n != alone[0])
    g = halves(5, rng)
    sizes = sorted(len(deaf) for deaf in g.values())
    assert sizes == [2, 2, 2, 3, 3]
    assert complete_grudge([[0], [1, 2]]) == {0: {1, 2}, 1: {0}, 2: {0}}


@pytest.mark.parametrize("n", [3, 5])
def test_majorities_ring_every_node_hears_a_different_majority(n: int) -> None:
    for seed in range(20):
        g = majorities_ring(n, random.Random(seed))
        hears = [frozenset(set(range(n)) - g[node]) for node in range(n)]
        assert all(node in hears[node] and len(hears[node]) == n // 2 + 1 for node in range(n))
        assert len(set(hears)) == n
        if n == 5:   # symmetric: both neighbours
            assert all((a in g[b]) == (b in g[a]) for a in range(n) for b in range(n))


def test_results_section_is_made_once_and_keeps_other_sections(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n\n## Run of x\n\nbody\n\n## Other section\n\nkeep me\n")
    outcome = RunOutcome("kill", tmp_path / "r1")
    append_results(path, "cmd one", "kill", "classic", 3, 20, [outcome])
    append_results(path, "cmd two", "pause", "classic", 3, 20, [outcome])
    text = path.read_text()
    assert text.count(SECTION) == 1 and "keep me" in text and "## Run of x" in text
    assert text.index("cmd one") < text.index("cmd two")
    assert summary_line([outcome]) == ("runs=1 confirmed=0 lost=0 unexpected=0 duplicates=0 "
                                       "unavailable_s=0.0 tracebacks=0 diverged=0 "
                                       "divergent=0 lost_changes=0")


# ---------------------------------------------------------------- lost: prefix, middle, suffix
def test_lost_messages_are_split_by_their_place_in_each_publisher_sequence() -> None:
    events = []
    for ident in range(1, 11):            # publisher a: 1..10, b: 101..105
        events += [pub(1, ident, "invoke", "a"), pub(1.1, ident, "ok", "a")]
    for ident in range(101, 106):
        events += [pub(1, ident, "invoke", "b"), pub(1.1, ident, "ok", "b")]
    delivered = [3, 4, 6, 8]              # a lost 1, 2 (prefix), 5, 7 (middle), 9, 10 (suffix)
    events += [deliver(2, i) for i in delivered]   # b: nothing delivered: all prefix
    r = check(events)
    assert r.lost == 11
    assert (r.lost_prefix, r.lost_middle, r.lost_suffix) == (2 + 5, 2, 2)
    assert r.as_dict()["lost_middle"] == 2


def test_nothing_lost_splits_into_zeros() -> None:
    r = check([*published(1, "ok"), deliver(2, 1)])
    assert (r.lost_prefix, r.lost_middle, r.lost_suffix) == (0, 0, 0)


# ---------------------------------------------------------------- tracebacks in the brokers' logs
def test_tracebacks_in_a_broker_log_are_counted_with_an_excerpt(tmp_path: Path) -> None:
    log = tmp_path / "n1.log"
    log.write_text(
        "2026-01-01 10:00:00,000 INFO amqp_broker: ready\n"
        "2026-01-01 10:00:01,000 ERROR x: boom\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in f\n'
        "ValueError: bad\n"
        "2026-01-01 10:00:02,000 ERROR cluster.raft.disklog: raft log: q lost entries it had "
        "acknowledged: ...\n"
        "Traceback (most recent call last):\n  x\nKeyError: 1\n")
    found = scan_logs({"n1": log, "n2": tmp_path / "missing.log"})
    assert found.tracebacks == {"n1": 2, "n2": 0} and found.traceback_count == 2
    assert found.losses == {"n1": 1, "n2": 0}
    assert found.excerpts["n1"].splitlines()[-1] == "ValueError: bad"


def test_an_exception_group_that_stopped_a_broker_counts_as_one_traceback(tmp_path: Path
                                                                          ) -> None:
    # as anyio's task group prints it when a broker dies of an error at start (found by the
    # membership nemesis: a broker that could not start went uncounted)
    log = tmp_path / "n3.log"
    log.write_text(
        "2026-01-01 10:00:00,000 INFO amqp_broker: starting\n"
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "app.py", line 9, in main\n'
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | Traceback (most recent call last):\n"
        '    |   File "runtime.py", line 3, in start\n'
        "    | AttributeError: 'Config' object has no attribute 'x'\n"
        "    +------------------------------------\n")
    found = scan_logs({"n3": log})
    assert found.tracebacks == {"n3": 1}
    assert "AttributeError" in found.excerpts["n3"]


def test_a_traceback_fails_the_run_and_shows_in_the_summary(tmp_path: Path) -> None:
    outcome = RunOutcome("kill", tmp_path, depths={"n1": 0}, faults=1)
    outcome.result = check([*published(1, "ok"), deliver(2, 1)])
    assert outcome.passed
    outcome.logs = LogFindings(tracebacks={"n1": 0, "n2": 3})
    assert not outcome.passed
    assert summary_line([outcome]).endswith(" tracebacks=3 diverged=0 divergent=0 "
                                            "lost_changes=0")


# ---------------------------------------------------------------- replicas compared
def fifo_log(bodies: list[bytes], term: int = 1, first: int = 2) -> list[Entry]:
    """Entries publishing ``bodies`` (after a config entry at 1)."""
    out = [Entry(1, 1, EntryKind.CONFIG, encode_members(["n1", "n2", "n3"]))]
    for k, body in enumerate(bodies):
        command = fifo_commands.encode(fifo_commands.Enqueue("p", k + 1, None, b"", body, 0))
        out.append(Entry(first + k, term, EntryKind.COMMAND, envelope("n1#1", k + 1, command)))
    return out


def replica(entries: list[Entry], snapshot: Snapshot = EMPTY_SNAPSHOT) -> PersistentState:
    return PersistentState(1, None, snapshot, tuple(e for e in entries if e.index > snapshot.index))


def test_replicas_with_one_log_agree() -> None:
    log = fifo_log([b"1", b"2", b"3"])
    report = compare("g", {"n1": replica(log), "n2": replica(log), "n3": replica(log)})
    assert report.problems == [] and report.messages == {"n1": 3, "n2": 3, "n3": 3}
    assert report.state_index == 4


def test_a_replica_with_another_entry_at_an_index_is_a_divergence() -> None:
    log = fifo_log([b"1", b"2", b"3"])
    other = fifo_log([b"1", b"9", b"3"])
    report = compare("g", {"n1": replica(log), "n2": replica(log), "n3": replica(other)})
    assert report.diverged_at == 3 and report.state_mismatch == ["n3@4"]
    assert any("diverge at index 3" in p for p in report.problems)


def test_a_replica_behind_the_others_is_lagging() -> None:
    log = fifo_log([b"1", b"2", b"3"])
    report = compare("g", {"n1": replica(log), "n2": replica(log), "n3": replica(log[:2])})
    assert report.lagging == {"n3": 2} and report.diverged_at is None
    assert report.problems and report.state_index == 2


def test_a_snapshot_is_compared_through_the_state_it_restores() -> None:
    log = fifo_log([b"1", b"2", b"3", b"4"])
    machine = QuorumMachine(FifoConfig())
    for e in log[1:3]:
        machine.apply(e.index, e.data)
    good = Snapshot(3, 1, ("n1", "n2", "n3"), machine.snapshot())
    bad_machine = QuorumMachine(FifoConfig())
    bad_machine.apply(2, log[1].data)
    bad = Snapshot(3, 1, ("n1", "n2", "n3"), bad_machine.snapshot())   # lost message 2
    report = compare("g", {"n1": replica(log), "n2": replica(log, good)})
    assert report.problems == [] and report.messages == {"n1": 4, "n2": 4}
    report = compare("g", {"n1": replica(log), "n2": replica(log, bad)})
    # n2's machine misses message 2, so the later publishes of that sender are gaps to it
    assert report.state_mismatch == ["n2@3", "n2@5"] and report.messages == {"n1": 4, "n2": 1}


def test_replicas_are_read_from_copies_of_their_directories(tmp_path: Path) -> None:
    log = fifo_log([b"1", b"2"])
    for name in ("n1", "n2"):
        disk = DiskLog(tmp_path / name / "quorum" / "g1", fsync=False)
        disk.append(1, tuple(log))
        disk.close()
    seg = tmp_path / "n2" / "quorum" / "g1" / fmt.segment_name(1)
    before = seg.read_bytes()
    seg.write_bytes(before[:-5])          # n2's last record torn
    (reports,) = compare_groups({"n1": tmp_path / "n1", "n2": tmp_path / "n2",
                                 "n3": tmp_path / "n3"})
    assert reports.lagging == {"n2": 2} and reports.recovering.keys() == {"n2"}
    assert seg.read_bytes() == before[:-5]      # the broker's own files are left as they were
