"""The metadata state machine on the Raft engine, in the deterministic simulator (``raft_sim``).

Each seed runs 3 to 5 members with seeded message loss, duplication and reordering, disk delays,
clock skew, snapshots, and a schedule of faults (crashes losing unsynced appends, restarts,
partitions, one-way links, rings, an isolated leader, leadership transfers, and in half the runs
members added and removed: ``test_raft_sim.fault``), while clients submit random conflicting
commands (``metadata_workload``) to random members. A client on a follower has its command
forwarded to the leader that member knows, as the wiring will do, and is answered by its own
member once that member applied the entry the leader gave it. Checked:
- live (``raft_sim``): members that applied the same index have byte-identical snapshots and the
  same outcome for it; a snapshot restores exactly that state;
- at the end: every command a leader acknowledged is applied by every member at its index; a
  single ``MetadataMachine`` applying the committed log in order gives, at every index, the
  state every member had there and the outcome every member (so every answered client) got.

``METADATA_SIM_SEEDS`` (default 80; 3000 passed when written) sets the number of seeds,
``METADATA_SIM_SEED`` runs one.
"""

from __future__ import annotations

import os
import random

import pytest

from cluster.metadata import codec
from cluster.metadata import commands as m
from cluster.metadata.machine import MetadataMachine
from cluster.metadata.outcomes import Declared, Refused
from cluster.raft import actions as ra
from cluster.raft.messages import EntryKind, decode_members
from cluster.tests.metadata_workload import random_command
from cluster.tests.raft_sim import InvariantError, Net, RaftSim
from cluster.tests.test_raft_sim import fault, member_change

SEEDS = int(os.environ.get("METADATA_SIM_SEEDS", "80"))
CHUNKS = max(4, SEEDS // 150)   # about 20 s each, under pytest-timeout's 120 s


class MetadataSM:
    """``raft_sim.SimMachine`` over ``MetadataMachine``: COMMAND entries are applied, CONFIG
    entries configure it, NOOPs do nothing."""

    def __init__(self) -> None:
        self.machine = MetadataMachine()

    def apply(self, index: int, kind: EntryKind, data: bytes) -> object:
        """The outcome of a COMMAND entry; None for the others."""
        if kind is EntryKind.COMMAND:
            return self.machine.apply_entry(index, data)
        if kind is EntryKind.CONFIG:
            self.machine.configure(decode_members(data))
        return None

    def snapshot(self) -> bytes:
        """``MetadataMachine.snapshot``."""
        return self.machine.snapshot()

    def restore(self, data: bytes) -> None:
        """``MetadataMachine.restore`` (raises ``MalformedMetadata`` for bad bytes)."""
        self.machine.restore(data)


class Clients:
    """Clients connected to members: ``submit`` a command at a member, answers on apply."""

    def __init__(self, sim: RaftSim) -> None:
        self.sim = sim
        self.waiting: dict[tuple[str, int], tuple[int, bytes]] = {}   # (member, index) -> ...
        self.answers: list[tuple[str, int, object]] = []              # (member, index, outcome)
        self.lost = 0

    def submit(self, member: str, command: m.Command) -> None:
        """The client's member proposes ``command`` when it leads, else forwards it to the
        leader it knows (dropped when it knows none, or that one is down)."""
        sim = self.sim
        rep = sim.replicas.get(member)
        if rep is None:
            return
        target = member if rep.node.is_leader else rep.node.leader
        if target is None or target not in sim.replicas:
            return
        data = codec.encode(command)
        for result in sim.propose(target, commands=[data]):
            if isinstance(result, ra.Proposed):
                self.waiting[(member, result.index)] = (result.term, data)

    def on_apply(self, member: str, index: int, term: int, outcome: object) -> None:
        """``RaftSim.on_apply``: a client waiting on ``member`` for ``index`` is answered when
        the entry there is its own (same term), else its command was lost with a leader."""
        mine = self.waiting.pop((member, index), None)
        if mine is None:
            return
        if mine[0] == term:
            self.answers.append((member, index, outcome))
        else:
            self.lost += 1   # another leader's entry took the index: the client is told to retry


def reference(sim: RaftSim) -> dict[int, tuple[object, bytes]]:
    """A single machine applying the committed log in order: index -> (outcome, snapshot)."""
    machine = MetadataSM()
    out: dict[int, tuple[object, bytes]] = {}
    last = max(sim.applied)
    for index in range(1, last + 1):
        if index not in sim.applied:
            raise InvariantError(f"nobody applied index {index} of {last}")
        term, data, _ = sim.applied[index]
        kind, _data = sim.entries[(index, term)]
        outcome = machine.apply(index, kind, data)
        out[index] = (outcome, machine.snapshot())
    return out


def run_seed(seed: int) -> tuple[RaftSim, Clients]:
    """One random run; raises ``AssertionError`` with the fault history on a violation."""
    rng = random.Random(seed)
    n = rng.choice([3, 3, 4, 5])
    net = Net(latency=(0.5, rng.choice([3.0, 6.0, 20.0])),
              loss=rng.choice([0.0, 0.01, 0.05, 0.2]), dup=rng.choice([0.0, 0.02, 0.1]),
              disk=(0.1, rng.choice([1.0, 3.0, 10.0])))
    sim = RaftSim([f"n{i}" for i in range(n)], seed=seed, net=net,
                  skew=rng.choice([0.0, 0.05, 0.2]), snapshot_every=rng.choice([0, 5, 20]),
                  machine=MetadataSM)
    clients = Clients(sim)
    sim.on_apply = clients.on_apply
    allow_membership = rng.random() < 0.5
    history: list[str] = []
    try:
        sim.run_until(rng.uniform(300, 600))
        for vhost in ("/", "v1"):
            clients.submit(sim.ids[0], m.AddVhost(vhost))
        for _ in range(rng.randint(2, 5)):
            history.append(f"{sim.now:.0f}: {fault(sim, rng, allow_membership)}")
            if allow_membership and rng.random() < 0.3:
                history.append(f"{sim.now:.0f}: {member_change(sim, rng)}")
            end = sim.now + rng.uniform(50, 300)
            while sim.now < end:
                for _ in range(rng.randint(1, 3)):   # clients on several members at once
                    member = rng.choice(sim.ids)
                    clients.submit(member, random_command(rng, sim.ids))
                sim.run_until(sim.now + rng.uniform(2, 30))
            sim.check(full=False)
        history.append(f"{sim.now:.0f}: heal, restart all")
        sim.heal()
        for node in sorted(sim.crashed):
            sim.restart(node)
        sim.net.loss = min(sim.net.loss, 0.05)
        sim.converge(within=30_000)
        sim.check_converged()
        check_against_reference(sim, clients)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed}: {exc}\nfaults: {history}\n{sim.describe()}") from exc
    return sim, clients


def check_against_reference(sim: RaftSim, clients: Clients) -> None:
    """Every member's state and outcome at every index, and every client's answer, are what a
    single machine applying the committed log in order gives."""
    ref = reference(sim)
    for index, (_term, _data, state) in sim.applied.items():
        if state != ref[index][1]:
            raise InvariantError(f"members' state after {index} is not the committed order's")
        if sim.results[index] != ref[index][0]:
            raise InvariantError(f"members decided {sim.results[index]!r} at {index}, the "
                                 f"committed order {ref[index][0]!r}")
    for member, index, outcome in clients.answers:
        if outcome != ref[index][0]:
            raise InvariantError(f"{member} answered {outcome!r} at {index}, the committed "
                                 f"order gives {ref[index][0]!r}")


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_conflicting_commands_under_faults(chunk: int) -> None:
    only = os.environ.get("METADATA_SIM_SEED")
    if only and chunk:
        pytest.skip("one seed")
    seeds = [int(only)] if only else range(chunk, SEEDS, CHUNKS)
    answers = refused = created = 0
    for seed in seeds:
        _, clients = run_seed(seed)
        answers += len(clients.answers)
        refused += sum(isinstance(o, Refused) for _, _, o in clients.answers)
        created += sum(isinstance(o, Declared) and o.created for _, _, o in clients.answers)
    # the workload did conflict: some clients were refused, others created things
    assert answers and refused and created
