"""Property test: RoutingTable.route (fast path and general walk) against a plain reference model
of exchanges, exchange-to-exchange bindings, alternate exchanges and CC keys."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.destination import Destination, exchange, queue
from routing.exchange_types.topic import split_topic_key
from routing.table import RoutingTable
from routing.tests.test_topic import ref_match

EXCHANGES = ["e0", "e1", "e2", "e3"]
QUEUES = ["q0", "q1", "q2"]
KEYS = ["a", "b", "a.b", "*", "#", "a.*", "#.b", ""]
ROUTING_KEYS = ["a", "b", "a.b", "c", "", "q0", "q1"]

exchange_specs = st.fixed_dictionaries(
    {
        name: st.tuples(
            st.sampled_from(["direct", "fanout", "topic"]),
            st.one_of(st.none(), st.sampled_from(EXCHANGES + ["missing"])),
        )
        for name in EXCHANGES
    }
)
destinations = st.one_of(
    st.sampled_from(QUEUES).map(queue), st.sampled_from(EXCHANGES).map(exchange)
)
binding_lists = st.lists(
    st.tuples(st.sampled_from(EXCHANGES), destinations, st.sampled_from(KEYS)), max_size=14
)


def binding_matches(type_name: str, binding_key: str, routing_key: str) -> bool:
    if type_name == "fanout":
        return True
    if type_name == "direct":
        return binding_key == routing_key
    return ref_match(split_topic_key(binding_key), split_topic_key(routing_key))


def reference_route(
    specs: dict[str, tuple[str, str | None]],
    bindings: set[tuple[str, Destination, str]],
    start: str,
    keys: list[str],
) -> set[str]:
    if start == "":
        return {k for k in keys if k in QUEUES}
    reached: set[str] = set()
    visited: set[str] = set()

    def visit(name: str) -> None:
        if name in visited or name not in specs:
            return
        visited.add(name)
        type_name, ae = specs[name]
        hits = [
            d
            for src, d, bk in bindings
            if src == name and any(binding_matches(type_name, bk, k) for k in keys)
        ]
        for d in hits:
            if d.is_queue:
                reached.add(d.name)
            else:
                visit(d.name)
        if not hits and ae is not None:
            visit(ae)

    visit(start)
    return reached


@settings(max_examples=400, deadline=None)
@given(
    specs=exchange_specs,
    bindings=binding_lists,
    start=st.sampled_from(EXCHANGES + [""]),
    routing_key=st.sampled_from(ROUTING_KEYS),
    cc=st.one_of(st.none(), st.lists(st.sampled_from(ROUTING_KEYS), max_size=2)),
)
def test_route_agrees_with_reference_model(
    specs: dict[str, tuple[str, str | None]],
    bindings: list[tuple[str, Destination, str]],
    start: str,
    routing_key: str,
    cc: list[str] | None,
) -> None:
    t = RoutingTable()
    for q in QUEUES:
        t.add_queue(q)
    for name, (type_name, ae) in specs.items():
        args = {"alternate-exchange": ae} if ae is not None else {}
        t.declare_exchange(name, type_name, arguments=args)
    for src, dest, key in bindings:
        t.bind(src, dest, key)
    headers = {"CC": cc} if cc is not None else None
    keys = [routing_key] + (cc or [])
    expected = reference_route(specs, set(bindings), start, keys)
    assert t.route(start, routing_key, headers) == expected
    assert t.route(start, routing_key, lambda: headers) == expected
    if cc is None:
        assert t.route(start, routing_key, None, has_headers=False) == expected
        # the general walk gives the same answer as the fast path
        x = t.get_exchange(start)
        assert x is not None
        assert t._route_walk(x, (routing_key,), None) == expected
