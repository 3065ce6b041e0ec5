"""Membership in a simulated network of 3-5 nodes: crashes, partitions, restarts, simulated clock.

Invariants: each node's views strictly grow; a view number means one member list everywhere; a view
is only announced by a node that could reach a majority of the view before it (a minority side
never elects a leader nor changes membership); after faults stop, the live nodes of the side holding
a majority converge to one view of exactly themselves; a single crash in a stable cluster is
detected (every survivor has a view without the dead node) in under 2 s with 0.5 s pings and 3 misses.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cluster import actions as a
from cluster.membership import Status, view_key
from cluster.tests.sim import Sim

DETECTION_LIMIT = 2.0


def names(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def check_safety(sim: Sim, unique_numbers: bool = True) -> None:
    """Views strictly grow (in ``view_key`` order) on every node incarnation; without partitions a
    view number also means one member list everywhere (see the known limit in ``membership``)."""
    by_view: dict[int, tuple[str, ...]] = {}
    for node, hist in sim.installed.items():
        keys = [view_key(v, tuple((m, m) for m in members)) for _, v, members in hist]
        assert all(x < y for x, y in zip(keys, keys[1:], strict=False)), f"{node}: views did not grow: {hist}"
        for _, view, members in hist:
            if unique_numbers:
                assert by_view.setdefault(view, members) == members, f"{view:#x} has two lists"
    for ann in sim.announcements:
        if not ann.prev_members:
            continue   # bootstrap, or a joiner's first view
        assert ann.node == ann.members[0] or ann.node in ann.prev_members


def check_majority_announcements(sim: Sim, topology_log: list[tuple[float, dict]]) -> None:
    """Every announcement came from a side holding a majority of the previous view (judged on the
    topology in force, skipping announcements within 0.5 s of a topology change)."""
    for ann in sim.announcements:
        if not ann.prev_members or ann.view in {v for v in ()}:
            continue
        changes = [t for t, _ in topology_log if t <= ann.time]
        if changes and ann.time - changes[-1] < 0.5:
            continue
        state = topology_log[len(changes) - 1][1] if changes else {"crashed": set(), "groups": None}
        side = {n for n in ann.prev_members if n not in state["crashed"]
                and (state["groups"] is None
                     or any(ann.node in g and n in g for g in state["groups"]))}
        assert len(side) * 2 > len(ann.prev_members), (
            f"{ann.node} announced {ann.view:#x} {ann.members} from a minority {side} of "
            f"{ann.prev_members} at {ann.time:.2f}")


def voted_view(node) -> tuple[int, tuple]:
    """The view a node votes in: its view when in one, else its durable vote's (restarted)."""
    if node.status is not Status.JOINING:
        return node.view, node.members
    return node.stored.view, node.stored.members


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize("loud", [True, False], ids=["rst", "silent"])
def test_single_crash_detected_under_two_seconds(n: int, loud: bool) -> None:
    worst = 0.0
    for victim in names(n):
        sim = Sim(names(n), seed=n)
        sim.form()
        sim.run_until(sim.now + 3.0)
        t0 = sim.now
        sim.crash(victim, loud=loud)
        live = set(sim.names) - {victim}
        assert sim.run_while(lambda live=live, sim=sim: not sim.converged(live), t0 + 5.0), \
            sim.describe()
        worst = max(worst, sim.now - t0)
        check_safety(sim)
    assert worst < DETECTION_LIMIT, f"detection took {worst:.2f} s"


def test_minority_side_never_changes() -> None:
    sim = Sim(names(5), seed=7)
    sim.form()
    sim.run_until(sim.now + 2.0)
    sim.partition({"n0", "n1"}, {"n2", "n3", "n4"})
    sim.run_until(sim.now + 8.0)
    assert sim.converged({"n2", "n3", "n4"}), sim.describe()
    assert sim.nodes["n2"].is_leader
    for n in ("n0", "n1"):
        assert sim.nodes[n].view == 5 << 16 and len(sim.nodes[n].members) == 5   # unchanged
    sim.heal()
    sim.run_until(sim.now + 10.0)
    assert sim.converged(set(names(5))), sim.describe()
    assert [sim.nodes[n].names for n in ("n0",)][0][:3] == ["n2", "n3", "n4"]
    check_safety(sim)


def test_even_split_freezes_both_sides() -> None:
    sim = Sim(names(4), seed=3)
    sim.form()
    before = sim.nodes["n0"].view
    sim.partition({"n0", "n1"}, {"n2", "n3"})
    sim.run_until(sim.now + 6.0)
    assert all(node.view == before for node in sim.nodes.values()), sim.describe()


def test_restarted_node_rejoins_and_others_replay_to_it() -> None:
    sim = Sim(names(3), seed=11)
    sim.form()
    sim.crash("n1")
    sim.run_until(sim.now + 0.1)
    t_restart = sim.now
    sim.restart("n1")   # back before anybody noticed: removed, then added again
    assert sim.run_while(lambda: not sim.converged(set(names(3))), sim.now + 10.0), sim.describe()
    assert sim.nodes["n1"].names == ["n0", "n2", "n1"]
    replays = [e for n in ("n0", "n2") for t, e in sim.events[n]
               if isinstance(e, a.Replay) and e.to == "n1" and t > t_restart]
    assert {r.shared for r in replays} == {True, False}
    check_safety(sim)


FAULT = st.one_of(
    st.tuples(st.just("crash"), st.integers(0, 4), st.booleans()),
    st.tuples(st.just("restart"), st.integers(0, 4), st.just(False)),
    st.tuples(st.just("partition"), st.integers(1, 30), st.just(False)),
    st.tuples(st.just("heal"), st.just(0), st.just(False)),
)


@settings(max_examples=int(os.environ.get("CLUSTER_SIM_EXAMPLES", "40")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(3, 5), seed=st.integers(0, 2**16),
       faults=st.lists(FAULT, max_size=4), gaps=st.lists(st.floats(0.2, 3.0), min_size=4,
                                                           max_size=4))
def test_random_faults(n: int, seed: int, faults: list, gaps: list[float]) -> None:
    _random_faults(Sim(names(n), seed=seed), n, faults, gaps)


@settings(max_examples=int(os.environ.get("CLUSTER_SIM_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(3, 5), seed=st.integers(0, 2**16),
       faults=st.lists(FAULT, max_size=4), gaps=st.lists(st.floats(0.2, 3.0), min_size=4,
                                                           max_size=4))
def test_random_faults_views_committed_in_the_log(n: int, seed: int, faults: list,
                                                  gaps: list[float]) -> None:
    """The same faults with the metadata log deciding the views (``committed_views``): a view
    number means one member list everywhere, partitions or not -- no two lines of views."""
    _random_faults(Sim(names(n), seed=seed, committed_log=True), n, faults, gaps,
                   unique_numbers=True)


def _random_faults(sim: Sim, n: int, faults: list, gaps: list[float],
                   unique_numbers: bool = False) -> None:
    sim.form()
    sim.run_until(sim.now + 3.5)   # stable: the first fault's detection is timed
    topology: list[tuple[float, dict]] = []
    detections: list[tuple[str, float]] = []
    for (kind, arg, loud), gap in zip(faults, gaps, strict=False):
        node = f"n{arg % n}"
        stable = (sim.groups is None and not sim.crashed
                  and sim.converged(set(sim.names)) and sim.now - sim.last_topology_change > 3)
        if kind == "crash" and node not in sim.crashed:
            sim.crash(node, loud)
            if stable and gap >= DETECTION_LIMIT:
                detections.append((node, sim.now))
        elif kind == "restart" and node in sim.crashed:
            sim.restart(node)
        elif kind == "partition":
            side = {x for i, x in enumerate(sim.names) if arg >> i & 1}
            sim.partition(side, set(sim.names) - side)
        elif kind == "heal":
            sim.heal()
        topology.append((sim.now, {"crashed": set(sim.crashed),
                                   "groups": None if sim.groups is None
                                   else [set(g) for g in sim.groups]}))
        t_fault = sim.now
        sim.run_until(sim.now + gap)
        for victim, t in detections:
            if t == t_fault:
                gone = [u for u, node_ in sim.nodes.items() if u not in sim.crashed
                        and victim in node_.names]
                assert not gone, f"{victim} crashed at {t:.2f}, still in views of {gone}"
                event("crash detection timed")
    sim.run_until(sim.now + 15.0)
    check_safety(sim, unique_numbers=unique_numbers
                 or not any(kind == "partition" for kind, _, _ in faults))
    if not sim.committed_log:   # with the log, a majority of its configuration decides
        check_majority_announcements(sim, topology)
    # the side holding a majority of the highest view held in it (with the log: of the log's
    # configuration) has converged on exactly itself (a restarted node kept its vote on disk:
    # restarted members count towards that majority)
    live = [x for x in sim.names if x not in sim.crashed]
    for x in live:
        side = sim.component(x)
        best = max((sim.nodes[y] for y in side),
                   key=lambda nd: view_key(*voted_view(nd)))
        members = {m for m, _ in voted_view(best)[1]}
        if sim.committed_log and sim.config is not None:
            members = sim.config
        if len(side & members) * 2 > len(members):
            assert sim.converged(side), f"side {side} of {best.name}: {sim.describe()}"
            event(f"majority side of {len(side)} converged")
