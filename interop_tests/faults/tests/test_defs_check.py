"""The definitions checker (``interop_tests.faults.defs_check``): divergent names and lost
acknowledged changes, from hand-made definitions and histories (pure, milliseconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interop_tests.faults.defs_check import (
    binding_key,
    check_definitions,
    divergent,
    keyed,
    lost_changes,
    misattributed,
    removes,
)
from interop_tests.faults.report import DEFS_SECTION, append_results, run_line, summary_line
from interop_tests.faults.runner import RunOutcome

DEFS: dict[str, Any] = {
    "users": [{"name": "d.u0", "password_hash": "h1", "tags": "administrator"},
              {"name": "guest", "password_hash": "g", "tags": []}],
    "vhosts": [{"name": "/"}],
    "permissions": [{"user": "d.u0", "vhost": "/", "configure": ".*", "write": "", "read": ""}],
    "policies": [],
    "queues": [{"name": "d.q0", "vhost": "/", "durable": True, "arguments": {"x-max-length": 10}}],
    "exchanges": [{"name": "d.x0", "vhost": "/", "type": "direct", "arguments": {}}],
    "bindings": [{"source": "d.x0", "vhost": "/", "destination": "d.q0",
                  "destination_type": "queue", "routing_key": "a", "arguments": {}}],
}


def define(n: int, t: float, kind: str, action: str = "put", key: str = "", value: Any = None,
           ) -> dict[str, Any]:
    e = {"t": t, "op": "define", "type": kind, "n": n, "client": "c", "broker": "n1"}
    if kind == "invoke":
        e.update(action=action, key=key, value=value)
    return e


def test_keyed_flattens_the_export_to_names_and_values_of_the_prefix() -> None:
    k = keyed(DEFS, "d.")
    assert k == {"user:d.u0": ["h1", ["administrator"]],
                 "permission:/:d.u0": [".*", "", ""],
                 "queue:/:d.q0": {"x-max-length": 10},
                 "exchange:/:d.x0": {"type": "direct", "arguments": {}},
                 binding_key("/", "d.x0", "queue", "d.q0", "a"): {}}


def test_a_name_counts_as_divergent_when_missing_or_different_on_one_member() -> None:
    a = keyed(DEFS, "d.")
    b = dict(a, **{"queue:/:d.q0": {"x-max-length": 20}})
    c = {k: v for k, v in a.items() if k != "exchange:/:d.x0"}
    assert divergent({"n1": a, "n2": a, "n3": a}) == []
    assert divergent({"n1": a, "n2": b, "n3": c}) == ["exchange:/:d.x0", "queue:/:d.q0"]


def test_cascades() -> None:
    b = binding_key("/", "x", "queue", "q", "k")
    assert removes("queue:/:q", b) and removes("exchange:/:x", b) and removes("vhost:/", b)
    assert not removes("queue:/:x", b) and not removes("exchange:/:q", b)
    assert removes("user:u", "permission:/:u") and not removes("user:u", "permission:/:v")
    assert removes("vhost:v", "queue:v:q") and not removes("vhost:v", "queue:/:q")


def test_an_acknowledged_declare_missing_at_the_end_is_lost_unless_a_delete_may_follow() -> None:
    put = [define(1, 1.0, "invoke", "put", "queue:/:q", {}), define(1, 1.1, "ok")]
    assert lost_changes(put, {"n1": {}}) == ["n1/queue:/:q"]
    assert lost_changes(put, {"n1": {"queue:/:q": {}}}) == []
    # a delete invoked before the declare's Ok may have come after it
    concurrent = [*put, define(2, 1.05, "invoke", "delete", "queue:/:q"), define(2, 1.2, "ok")]
    assert lost_changes(concurrent, {"n1": {}}) == []
    assert lost_changes(concurrent, {"n1": {"queue:/:q": {}}}) == []
    # a delete acknowledged before the declare began cannot undo it
    earlier = [define(2, 0.1, "invoke", "delete", "queue:/:q"), define(2, 0.2, "ok"), *put]
    assert lost_changes(earlier, {"n1": {}}) == ["n1/queue:/:q"]
    # a refused delete undoes nothing; an unanswered one may have happened
    refused = [*put, define(2, 2.0, "invoke", "delete", "queue:/:q"), define(2, 2.1, "fail")]
    assert lost_changes(refused, {"n1": {}}) == ["n1/queue:/:q"]
    unknown = [*put, define(2, 2.0, "invoke", "delete", "queue:/:q"), define(2, 2.1, "info")]
    assert lost_changes(unknown, {"n1": {}}) == []


def test_a_value_overwritten_later_must_not_come_back() -> None:
    events = [define(1, 1.0, "invoke", "put", "user:u", ["h1", []]), define(1, 1.1, "ok"),
              define(2, 2.0, "invoke", "put", "user:u", ["h2", []]), define(2, 2.1, "ok")]
    assert lost_changes(events, {"n1": {"user:u": ["h2", []]}}) == []
    assert lost_changes(events, {"n1": {"user:u": ["h1", []]}}) == ["n1/user:u"]


def test_a_binding_goes_with_its_queue_and_a_deleted_name_must_stay_deleted() -> None:
    b = binding_key("/", "x", "queue", "q", "k")
    events = [define(1, 1.0, "invoke", "put", b, {}), define(1, 1.1, "ok"),
              define(2, 2.0, "invoke", "delete", "queue:/:q"), define(2, 2.1, "ok")]
    assert lost_changes(events, {"n1": {}}) == []
    assert lost_changes(events, {"n1": {b: {}}}) == ["n1/" + b]


def test_check_definitions_counts() -> None:
    events = [define(1, 1.0, "invoke", "put", "queue:/:q", {}), define(1, 1.1, "ok"),
              define(2, 1.0, "invoke", "put", "queue:/:q", {"x-max-length": 1}),
              define(2, 1.1, "fail"), define(3, 1.0, "invoke", "delete", "exchange:/:x")]
    r = check_definitions(events, {"n1": {"queue:/:q": {}}, "n2": {}})
    assert (r.changes, r.acked, r.refused, r.unknown) == (3, 1, 1, 1)
    assert (r.divergent, r.lost_changes) == (1, 1) and not r.valid
    assert r.as_dict()["lost_names"] == ["n2/queue:/:q"]


def test_a_definitions_run_passes_only_without_divergence_and_reports_it(tmp_path: Path) -> None:
    good = check_definitions([define(1, 1.0, "invoke", "put", "queue:/:q", {}),
                              define(1, 1.1, "ok")], {"n1": {"queue:/:q": {}}})
    outcome = RunOutcome("kill", tmp_path / "r1", faults=1, workload="definitions",
                         definitions=good)
    assert outcome.passed
    bad = check_definitions([], {"n1": {"queue:/:q": {}}, "n2": {}}, unread=["n3"])
    assert not bad.valid and bad.unread == ("n3",)
    outcome.definitions = bad
    assert not outcome.passed
    assert summary_line([outcome]).endswith(" divergent=1 lost_changes=0")
    assert "divergent_names=['queue:/:q']" in run_line(1, 1, outcome)
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n\n## Fault injection (issue 11)\n\nold\n")
    append_results(path, "cmd", "kill", "classic", 3, 10, [outcome])
    text = path.read_text()
    assert text.count(DEFS_SECTION) == 1 and "| kill | 3 | 10 | 1 | 0 | 0 | 0 | 0 | 1 | 0 |" in text


def test_a_refusal_about_another_name_is_misattributed() -> None:
    x406 = "406 PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'd.q3' in vhost '/'"
    b = binding_key("/", "d.x0", "queue", "d.q3", "a")
    events = [define(1, 1.0, "invoke", "put", "exchange:/:d.x2", {}),
              {**define(1, 1.1, "fail"), "error": x406},
              define(2, 1.0, "invoke", "put", "queue:/:d.q3", {}),
              {**define(2, 1.1, "fail"), "error": x406},
              define(3, 1.0, "invoke", "put", b, {}),
              {**define(3, 1.1, "fail"), "error": "404 NOT_FOUND - no queue 'd.q3' in vhost '/'"},
              define(4, 1.0, "invoke", "put", b, {}),
              {**define(4, 1.1, "fail"),
               "error": "404 NOT_FOUND - inequivalent for exchange 'd.x0' in vhost '/'"}]
    assert misattributed(events) == [f"exchange:/:d.x2: {x406}"]
    assert not check_definitions(events, {"n1": {}}).valid
