"""Runtime parameters (shovels, federation upstreams) in the metadata state machine (issue 27 on
issue 23's log): every member that applies one committed order holds the same parameters and
answers alike, RabbitMQ's validation decides in the machine (400 with its text), a deleted vhost
takes its parameters along, snapshots carry them (and stay version 1 without any), and a
malformed command is refused without a crash. Source: RabbitMQ "Parameters and Policies",
"Dynamic Shovels"."""

from __future__ import annotations

import json

from cluster.metadata import codec
from cluster.metadata import commands as m
from cluster.metadata.machine import MetadataMachine
from cluster.metadata.outcomes import Deleted, Refused, Stored
from cluster.tests.test_metadata_machine import Member, play

SHOVEL = json.dumps({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://",
                     "dest-queue": "b"})
OTHER = json.dumps({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://",
                    "dest-queue": "c"})
UPSTREAM = json.dumps({"uri": "amqp://up", "max-hops": 2})


def test_two_members_putting_one_shovel_last_committed_wins_everywhere() -> None:
    log: list[m.Command] = [
        m.SetParameter("shovel", "/", "s", SHOVEL), m.SetParameter("shovel", "/", "s", OTHER),
        m.SetParameter("federation-upstream", "/", "up", UPSTREAM),
        m.SetParameter("federation-upstream-set", "/", "set",
                       json.dumps([{"upstream": "up"}]))]
    outcomes, snapshots = play(log)
    assert outcomes == [Stored(True), Stored(False), Stored(True), Stored(True)]
    assert len(set(snapshots)) == 1
    # the other order: the other value wins, on every member alike
    outcomes, other = play([log[1], log[0], *log[2:]])
    assert outcomes[:2] == [Stored(True), Stored(False)] and len(set(other)) == 1
    assert other[0] != snapshots[0]
    node = Member()
    for cmd in log:
        node.apply(cmd)
    assert node.machine.state.parameters[("/", "shovel", "s")] == OTHER


def test_clear_and_a_deleted_vhost_take_parameters_away() -> None:
    outcomes, _ = play([
        m.AddVhost("v"), m.SetParameter("shovel", "v", "s", SHOVEL),
        m.SetParameter("shovel", "/", "s", SHOVEL), m.ClearParameter("shovel", "/", "s"),
        m.ClearParameter("shovel", "/", "s"), m.DeleteVhost("v"),
        m.ClearParameter("shovel", "v", "s"), m.SetParameter("shovel", "v", "s", SHOVEL)])
    assert outcomes[:7] == [Stored(True), Stored(True), Stored(True), Deleted(True),
                            Deleted(False), Deleted(True), Deleted(False)]
    assert outcomes[7] == Refused(404, "NOT_FOUND - no vhost 'v'")


def test_rabbitmqs_validation_decides_in_the_machine_and_a_refusal_changes_nothing() -> None:
    node = Member()
    before = node.machine.snapshot()
    missing = json.dumps({"src-uri": "amqp://", "src-queue": "a"})
    out = node.apply(m.SetParameter("shovel", "/", "s", missing))
    assert out == Refused(400, 'Key "dest-uri" not found in s')   # rabbit_shovel_parameters
    out = node.apply(m.SetParameter("federation-upstream", "/", "up", json.dumps({"x": 1})))
    assert isinstance(out, Refused) and out.code == 400 and "uri" in out.text
    out = node.apply(m.SetParameter("shovel", "/", "s", "{not json"))
    assert isinstance(out, Refused) and out.code == 400 and "not JSON" in out.text
    for weird in ("[[[[[[[[", "null", "[1, {}]", '{"src-uri": {"a": []}}', "1e999"):
        out = node.apply(m.SetParameter("shovel", "/", "s", weird))
        assert isinstance(out, Refused) and out.code == 400, (weird, out)
    assert node.apply(m.SetParameter("policy", "/", "p", "{}")) == \
        Refused(404, "NOT_FOUND - no component 'policy'")
    assert node.apply(m.SetParameter("shovel", "nope", "s", SHOVEL)) == \
        Refused(404, "NOT_FOUND - no vhost 'nope'")
    assert node.machine.snapshot() == before


def test_a_malformed_parameter_command_is_refused_without_a_crash() -> None:
    node = Member()
    before = node.machine.snapshot()
    raw = codec.encode(m.SetParameter("shovel", "/", "s", SHOVEL))
    for data in (raw[:-3], raw + b"\x00", raw[:2] + b"\xff\xff\xff\xff"):
        out = node.machine.apply_entry(7, data)
        assert isinstance(out, Refused) and out.code == 541 and out.connection_level
    assert node.machine.snapshot() == before


def test_snapshots_carry_parameters_and_stay_version_1_without_them() -> None:
    node = Member()
    assert node.machine.snapshot()[0] == 1   # what a member that predates parameters writes
    node.apply(m.SetParameter("shovel", "/", "s", SHOVEL))
    node.apply(m.SetParameter("federation-upstream", "/", "up", UPSTREAM))
    image = node.machine.snapshot()
    assert image[0] == 2
    restored = MetadataMachine()
    restored.restore(image)
    assert restored.state.parameters == node.machine.state.parameters
    assert restored.snapshot() == image
    # a restored member goes on exactly as the one that replayed
    tail: list[m.Command] = [m.ClearParameter("shovel", "/", "s"),
                             m.SetParameter("shovel", "/", "t", OTHER)]
    assert [node.machine.apply(9 + i, c) for i, c in enumerate(tail)] == \
        [restored.apply(9 + i, c) for i, c in enumerate(tail)]
    assert restored.snapshot() == node.machine.snapshot()
    node.apply(m.ClearParameter("shovel", "/", "t"))
    node.apply(m.ClearParameter("federation-upstream", "/", "up"))
    assert node.machine.snapshot()[0] == 1
