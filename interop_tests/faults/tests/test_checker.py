"""The checker and the grudges, pure: histories in, counts out; no processes, no namespaces."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from interop_tests.faults.checker import check, unavailable_seconds
from interop_tests.faults.history import History, load
from interop_tests.faults.nemesis import complete_grudge, halves, isolate_one, majorities_ring
from interop_tests.faults.report import SECTION, append_results, summary_line
from interop_tests.faults.runner import RunOutcome


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
                                       "unavailable_s=0.0")
