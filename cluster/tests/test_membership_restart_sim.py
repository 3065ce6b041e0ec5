"""Membership after a majority of the view restarts at once (simulated network and clock).

A restarted member keeps its durable vote (``cluster.durable``: the sim keeps each node's last
``Persist`` as its data dir). Scenarios: 2 of 3 (3 of 5) members crash and come back while one
survives, leader or not; the whole cluster loses power and comes back one by one, or all at once;
a member whose disk was lost has no vote (the survivors stay a frozen minority). Invariants of
``test_membership_sim`` hold throughout (views grow, one member list per number, every announcement
from a side holding a majority of the view before it), the cluster converges on one view of all
members within a bounded simulated time, and a serving survivor is never excluded (its state is
kept: the restarted members re-join it, not the other way round).
"""

from __future__ import annotations

import os

import pytest

from cluster import actions as a
from cluster.tests.sim import Sim
from cluster.tests.test_membership_sim import check_majority_announcements, check_safety, names

RECOVERY_LIMIT = 40.0   # simulated seconds; the bound of every wait below
SEEDS = range(int(os.environ.get("RESTART_SIM_SEEDS", "6")))   # more: a longer search


def crash_all(sim: Sim, victims: list[str], topology: list) -> None:
    for v in victims:
        sim.crash(v)
    topology.append((sim.now, {"crashed": set(sim.crashed), "groups": None}))


def restart(sim: Sim, victims: list[str], topology: list) -> None:
    for v in victims:
        sim.restart(v)
    topology.append((sim.now, {"crashed": set(sim.crashed), "groups": None}))


def excluded_after(sim: Sim, name: str, t: float) -> list[a.Action]:
    return [e for when, e in sim.events[name] if when >= t and isinstance(e, a.Excluded)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("n", "survivors"), [(3, ["n0"]), (3, ["n1"]), (3, ["n2"]),
                                              (5, ["n0", "n4"]), (5, ["n3", "n4"])])
def test_majority_crash_then_restart_readmits_through_the_survivors(
        n: int, survivors: list[str], seed: int) -> None:
    sim = Sim(names(n), seed=seed)
    sim.form()
    sim.run_until(sim.now + 2.0)
    topology: list = []
    victims = [x for x in sim.names if x not in survivors]
    t_crash = sim.now
    crash_all(sim, victims, topology)
    sim.run_until(sim.now + 3.0)
    before = {s: sim.nodes[s].view for s in survivors}
    assert all(len(sim.nodes[s].members) == n for s in survivors), sim.describe()  # a minority
    restart(sim, victims, topology)
    assert sim.run_while(lambda: not sim.converged(set(sim.names)), sim.now + RECOVERY_LIMIT), \
        sim.describe()
    assert all(sim.nodes[s].view > before[s] for s in survivors)
    # the survivors kept serving: never excluded, and one of them leads the new view
    assert not any(excluded_after(sim, s, t_crash) for s in survivors)
    assert sim.nodes[survivors[0]].leader in survivors
    check_safety(sim)
    check_majority_announcements(sim, topology)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [3, 5])
def test_full_cluster_power_loss_then_restart_one_by_one(n: int, seed: int) -> None:
    sim = Sim(names(n), seed=seed)
    sim.form()
    sim.run_until(sim.now + 2.0)
    topology: list = []
    crash_all(sim, list(sim.names), topology)
    sim.run_until(sim.now + 2.0)
    order = sim.names[::-1] if seed % 2 else sim.names[:]
    for i, x in enumerate(order):
        restart(sim, [x], topology)
        up = set(order[:i + 1])
        if len(up) * 2 <= n:   # a minority of the old view: nobody serves yet
            sim.run_until(sim.now + 6.0)
            assert all(sim.nodes[y].status.value == "joining" for y in up), sim.describe()
        else:
            assert sim.run_while(lambda up=up: not sim.converged(up), sim.now + RECOVERY_LIMIT), \
                sim.describe()
    assert sim.converged(set(sim.names)), sim.describe()
    check_safety(sim)
    check_majority_announcements(sim, topology)


@pytest.mark.parametrize("seed", SEEDS)
def test_full_cluster_power_loss_then_all_restart_at_once(seed: int) -> None:
    sim = Sim(names(3), seed=seed)
    sim.form()
    topology: list = []
    crash_all(sim, list(sim.names), topology)
    sim.run_until(sim.now + 1.0)
    restart(sim, list(sim.names), topology)
    assert sim.run_while(lambda: not sim.converged(set(sim.names)), sim.now + RECOVERY_LIMIT), \
        sim.describe()
    check_safety(sim)
    check_majority_announcements(sim, topology)


def test_restarted_members_that_lost_their_disk_have_no_vote() -> None:
    sim = Sim(names(3), seed=1)
    sim.form()
    view = sim.nodes["n0"].view
    for v in ("n1", "n2"):
        sim.crash(v)
    sim.run_until(sim.now + 3.0)
    for v in ("n1", "n2"):
        sim.restart(v, lose_disk=True)
    sim.run_until(sim.now + 20.0)
    # the survivor is still a minority of its view: it changed nothing, nobody else serves
    assert sim.nodes["n0"].view == view and len(sim.nodes["n0"].members) == 3, sim.describe()
    assert all(sim.nodes[v].status.value == "joining" for v in ("n1", "n2")), sim.describe()
    check_safety(sim)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gap", [1.0, 3.0, 6.0])
def test_leader_then_last_member_crash_one_after_the_other_then_restart(
        seed: int, gap: float) -> None:
    """The leader crashes, the survivors form a view without it, then the *last* member of that
    view crashes too (before the survivor could drop it: a minority changes nothing) and both
    restart. The restarted last member must not take the survivor's Membership, which lists its
    former self last, for the announcement of its Join: it stayed SYNCING for ever, waiting for a
    replay nobody sent (found by the fault harness's power-loss-majority nemesis: the broker
    refused every client with "this node is joining the cluster" while the others counted it)."""
    sim = Sim(names(3), seed=seed)
    sim.form()
    sim.run_until(sim.now + 2.0)
    topology: list = []
    leader = sim.nodes[sim.names[0]].leader
    crash_all(sim, [leader], topology)
    first = next(x for x in sim.names if x != leader)
    assert sim.run_while(lambda: leader in sim.nodes[first].names, sim.now + RECOVERY_LIMIT), \
        sim.describe()
    last = sim.nodes[first].names[-1]
    crash_all(sim, [last], topology)
    sim.run_until(sim.now + gap)
    restart(sim, [leader, last], topology)
    assert sim.run_while(lambda: not sim.converged(set(sim.names)), sim.now + RECOVERY_LIMIT), \
        sim.describe()
    check_safety(sim)
    check_majority_announcements(sim, topology)


@pytest.mark.parametrize("seed", SEEDS)
def test_after_a_power_loss_only_the_metadata_leader_restarts_the_view(seed: int) -> None:
    """``Node.may_recover`` (the broker: this member leads the metadata log, elected by a
    majority of its last configuration) decides who may start the view over: here only n2, so
    n0 and n1 back first wait (they cannot reach one without it), and once n2 is back the view
    is restarted by n2, which leads it."""
    sim = Sim(names(3), seed=seed)
    sim.form()
    sim.run_until(sim.now + 2.0)
    topology: list = []
    crash_all(sim, list(sim.names), topology)
    sim.run_until(sim.now + 1.0)
    restart(sim, ["n0", "n1"], topology)
    for x in sim.names:
        sim.nodes[x].may_recover = lambda x=x: x == "n2"
    sim.run_until(sim.now + 8.0)   # twice recover_after
    assert all(sim.nodes[y].status.value == "joining" for y in ("n0", "n1")), sim.describe()
    restart(sim, ["n2"], topology)
    sim.nodes["n2"].may_recover = lambda: True
    assert sim.run_while(lambda: not sim.converged(set(sim.names)), sim.now + RECOVERY_LIMIT), \
        sim.describe()
    assert sim.nodes["n0"].leader == "n2"
    check_safety(sim)
    check_majority_announcements(sim, topology)
