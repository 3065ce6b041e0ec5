"""The metadata log's byte formats: commands round-trip, snapshots round-trip, and bad bytes raise
``MalformedMetadata`` and nothing else (hypothesis); the machine never raises on a command; the
package stays pure (no I/O module imported)."""

from __future__ import annotations

import ast
import dataclasses
import datetime
import decimal
import typing
from collections import abc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.metadata import codec
from cluster.metadata import commands as m
from cluster.metadata.machine import MetadataMachine
from cluster.metadata.wire import MalformedMetadata

# field-table values as pamqp decodes them (no NaN: it equals nothing, itself included)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=6),
    st.binary(max_size=6), st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=st.none() | st.just(datetime.UTC)))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
tables = st.dictionaries(st.text(max_size=8), values, max_size=4)
# names that mean something to the machine, mixed with anything
names = st.one_of(st.sampled_from(["/", "q", "x", "amq.x", "amq.direct", "", "n1", "c1", "shovel",
                                   '{"src-uri": "amqp://", "src-queue": "q", '
                                   '"dest-uri": "amqp://", "dest-queue": "x"}']),
                  st.text(max_size=6))
# arguments that mean something to the machine, mixed with anything
meaningful_args = st.dictionaries(
    st.sampled_from(["x-queue-type", "x-max-length", "x-quorum-initial-group-size",
                     "x-quorum-members", "x-quorum-group", "alternate-exchange", "x-match",
                     "x-message-ttl", "x-overflow", "x-max-age"]),
    st.one_of(values, st.sampled_from(["quorum", "stream", "classic", "any", "n1,n2", "1D"])),
    max_size=3)


def strategy_for(hint: object, meaningful: bool) -> st.SearchStrategy[Any]:
    if hint is str:
        return names if meaningful else st.text(max_size=8)
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(-(2 ** 1000), 2 ** 1000)
    if typing.get_origin(hint) is tuple:
        return st.lists(names, max_size=3).map(tuple)
    assert typing.get_origin(hint) is abc.Mapping, hint
    return st.one_of(tables, meaningful_args) if meaningful else tables


def commands(meaningful: bool = False) -> st.SearchStrategy[m.Command]:
    """Any command of any kind, its fields drawn by type."""
    def build(cls: type) -> st.SearchStrategy[Any]:
        hints = typing.get_type_hints(cls)
        return st.builds(cls, **{f.name: strategy_for(hints[f.name], meaningful)
                                 for f in dataclasses.fields(cls)})
    return st.one_of([build(cls) for cls in codec.KINDS])


@given(commands())
def test_every_command_round_trips(cmd: m.Command) -> None:
    data = codec.encode(cmd)
    back = codec.decode(data)
    assert back == cmd and type(back) is type(cmd)
    assert codec.encode(back) == data   # one encoding per command


def test_the_kinds_are_numbered_as_documented() -> None:
    assert codec.encode(m.DeclareExchange("/", "x"))[:2] == b"\x01\x01"
    assert codec.encode(m.MemberGone("n1"))[:2] == b"\x01\x0f"
    assert codec.encode(m.ClearParameter("shovel", "/", "s"))[:2] == b"\x01\x11"
    assert codec.encode(m.InstallView(0, 1, ("n1",), ("a:1",)))[:2] == b"\x01\x12"
    assert len(codec.KINDS) == 18


def _decode_or_malformed(data: bytes) -> None:
    try:
        codec.decode(data)
    except MalformedMetadata:
        pass


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_malformed_only(data: bytes) -> None:
    _decode_or_malformed(data)
    _decode_or_malformed(b"\x01" + bytes([data[0] % 16 if data else 3]) + data)


@given(commands(), st.data())
def test_damaged_commands_decode_or_raise_malformed_only(cmd: m.Command, data: st.DataObject
                                                        ) -> None:
    raw = bytearray(codec.encode(cmd))
    cut = data.draw(st.integers(0, len(raw)))
    _decode_or_malformed(bytes(raw[:cut]))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    _decode_or_malformed(bytes(raw))
    _decode_or_malformed(bytes(raw) + b"\x00")


def test_deeply_nested_tables_are_malformed_not_a_crash() -> None:
    table = b"\x01" + b"\x00\x00\x00\x01\x00\x00\x00\x01aF" * 20000 + b"\x00\x00\x00\x00"
    data = b"\x01\x01" + b"\x00\x00\x00\x01/" + b"\x00\x00\x00\x01x" + b"\x00\x00\x00\x06direct" \
        + b"\x00\x00\x00" + len(table).to_bytes(4, "big") + table
    with pytest.raises(MalformedMetadata):
        codec.decode(data)


def test_a_value_the_format_cannot_carry_is_refused_at_encode() -> None:
    with pytest.raises(TypeError):
        codec.encode(m.DeclareQueue("/", "q", arguments={"x": object()}))
    with pytest.raises(ValueError):
        codec.encode(m.SetPolicy("/", "p", ".*", {}, priority=1 << 4000))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands(meaningful=True), max_size=30))
def test_the_machine_never_raises_and_its_snapshot_round_trips(cmds: list[m.Command]) -> None:
    one, two = MetadataMachine(), MetadataMachine()
    one.configure(("n1", "n2", "n3"))
    one.apply(1, m.AddVhost("/"))
    two.restore(one.snapshot())
    for index, cmd in enumerate(cmds, start=2):
        one.apply(index, cmd)
        two.apply_entry(index, codec.encode(cmd))
        if index % 7 == 0:   # a member that restored a snapshot goes on alike
            two.restore(two.snapshot())
    assert two.snapshot() == one.snapshot()
    again = MetadataMachine()
    again.restore(one.snapshot())
    assert again.snapshot() == one.snapshot()


@given(st.binary(max_size=200))
def test_random_snapshots_restore_or_raise_malformed_only(data: bytes) -> None:
    mm = MetadataMachine()
    mm.apply(1, m.AddVhost("/"))
    before = mm.snapshot()
    try:
        mm.restore(b"\x01" + data)
    except MalformedMetadata:
        assert mm.snapshot() == before   # unchanged


def _busy_snapshot() -> bytes:
    mm = MetadataMachine()
    for i, cmd in enumerate([
            m.AddVhost("/"), m.PutUser("u", "h"), m.SetPermission("u", "/"),
            m.SetPolicy("/", "p", "^q", {"max-length": 3}), m.DeclareExchange("/", "x", "topic"),
            m.DeclareQueue("/", "q", arguments={"x-max-length": 10}),
            m.Bind("/", "x", "q", routing_key="a.*", arguments={"k": [1, "v"]}),
            m.Bind("/", "amq.fanout", "x", m.EXCHANGE)], start=1):
        mm.apply(i, cmd)
    return mm.snapshot()


@given(st.data())
def test_damaged_snapshots_restore_or_raise_malformed_only(data: st.DataObject) -> None:
    raw = bytearray(_busy_snapshot())
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        MetadataMachine().restore(bytes(raw[:data.draw(st.integers(0, len(raw)))]))
    except MalformedMetadata:
        pass


def test_field_values_keep_their_types_through_a_snapshot() -> None:
    args = {"i": 1, "b": True, "f": 1.5, "s": "x", "y": b"\xff", "n": None,
            "d": decimal.Decimal("1.10"), "t": datetime.datetime(2024, 1, 2, 3, 4, 5),
            "l": [1, "a"], "m": {"k": False}}
    mm = MetadataMachine()
    mm.apply(1, m.AddVhost("/"))
    mm.apply(2, m.DeclareQueue("/", "q", arguments=args))
    again = MetadataMachine()
    again.restore(mm.snapshot())
    held = again.state.vhosts["/"].queues["q"].arguments
    assert held == args
    assert {k: type(v) for k, v in held.items()} == {k: type(v) for k, v in args.items()}


def test_the_package_imports_no_io() -> None:
    banned = {"os", "time", "socket", "asyncio", "anyio", "io", "pathlib", "threading",
              "random", "sqlite3", "selectors"}
    for path in (Path(__file__).parent.parent / "metadata").glob("*.py"):
        for stmt in ast.walk(ast.parse(path.read_text())):
            mods = [al.name for al in stmt.names] if isinstance(stmt, ast.Import) else \
                [stmt.module or ""] if isinstance(stmt, ast.ImportFrom) else []
            for mod in mods:
                assert mod.split(".")[0] not in banned, f"{path.name} imports {mod}"
