"""The field-table codec: every value type comes back with its type and value."""

from __future__ import annotations

import datetime
import decimal
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_broker.definitions import decode_table, encode_table

ALL_TYPES = {
    "str": "héllo \udcff", "empty": "", "bytes": b"\x00\xff", "bytearray": bytearray(b"ab"),
    "int": 5, "neg": -3, "i64max": 2**63 - 1, "i64min": -(2**63), "huge": 2**100,
    "float": 1.1, "negzero": -0.0, "inf": math.inf, "true": True, "false": False, "none": None,
    "decimal": decimal.Decimal("3.14"), "bigdec": decimal.Decimal("-1.5E-300"),
    "utc": datetime.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC),
    "offset": datetime.datetime(2024, 1, 2, 3, 4, 5,
                                tzinfo=datetime.timezone(datetime.timedelta(hours=-5))),
    "naive": datetime.datetime(1999, 12, 31, 23, 59, 59),
    "nested": {"x": [1, "a", {"y": None, "z": [True, 2.5]}], "empty": {}},
    "list": [], "mixed": [1, True, 1.0, "1", b"1"],
}


def same(a, b) -> bool:
    """Equal with equal types all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                       math.copysign(1, b))
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)
    if isinstance(a, datetime.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return bool(a == b)


def test_every_field_type_round_trips():
    back = decode_table(encode_table(ALL_TYPES))
    for key, value in ALL_TYPES.items():
        assert same(value, back[key]), key


def test_nan_and_tuples():
    back = decode_table(encode_table({"nan": math.nan, "tuple": (1, 2)}))
    assert math.isnan(back["nan"]) and back["tuple"] == [1, 2]


def test_canonical_bytes_ignore_key_order():
    assert encode_table({"a": 1, "b": 2}) == encode_table({"b": 2, "a": 1})
    assert encode_table(None) == encode_table({})
    assert encode_table({"a": 1}) != encode_table({"a": True}) != encode_table({"a": 1.0})


def test_bad_input():
    with pytest.raises(TypeError):
        encode_table({"x": object()})
    with pytest.raises(TypeError):
        encode_table({1: "x"})  # type: ignore[dict-item]
    for blob in (b"", b"\x09", encode_table({"a": "bcd"})[:-1], encode_table({}) + b"x",
                 b"\x01\x00\x00\x00\x01\x00\x00\x00\x01kQ"):
        with pytest.raises(ValueError):
            decode_table(blob)


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    | st.binary() | st.decimals(allow_nan=False) | st.datetimes(timezones=st.none()
                                                                | st.just(datetime.UTC)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=10), values, max_size=6))
def test_round_trip_property(table):
    assert same(table, decode_table(encode_table(table)))
