"""Tests for the topic matcher: examples, edge cases, and hypothesis properties against a plain
recursive reference matcher."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.destination import Destination, exchange, queue
from routing.exchange_types.topic import TopicMatcher, split_topic_key


def ref_match(pattern: list[str], words: list[str]) -> bool:
    """Plain recursive AMQP topic match: '*' is one word, '#' zero or more."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(ref_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == "*" or head == words[0]) and ref_match(rest, words[1:])


def ref_route(bindings: set[tuple[str, Destination]], routing_key: str) -> set[Destination]:
    rk = split_topic_key(routing_key)
    return {d for key, d in bindings if ref_match(split_topic_key(key), rk)}


def routed(m: TopicMatcher, key: str) -> set[Destination]:
    return set(m.route(key, None))


# ---------------------------------------------------------------------------------- examples


def test_rabbitmq_tutorial_examples() -> None:
    m = TopicMatcher("t")
    q1, q2 = queue("Q1"), queue("Q2")
    m.bind(q1, "*.orange.*", {})
    m.bind(q2, "*.*.rabbit", {})
    m.bind(q2, "lazy.#", {})
    assert routed(m, "quick.orange.rabbit") == {q1, q2}
    assert routed(m, "lazy.orange.elephant") == {q1, q2}
    assert routed(m, "quick.orange.fox") == {q1}
    assert routed(m, "lazy.brown.fox") == {q2}
    assert routed(m, "lazy.pink.rabbit") == {q2}
    assert routed(m, "quick.brown.fox") == set()
    assert routed(m, "orange") == set()
    assert routed(m, "quick.orange.male.rabbit") == set()
    assert routed(m, "lazy.orange.male.rabbit") == {q2}
    assert routed(m, "lazy") == {q2}


def test_empty_key_is_zero_words_like_rabbitmq() -> None:
    assert split_topic_key("") == []
    assert split_topic_key("a.") == ["a", ""]
    assert split_topic_key(".") == ["", ""]
    m = TopicMatcher("t")
    m.bind(queue("hash"), "#", {})
    m.bind(queue("star"), "*", {})
    m.bind(queue("empty"), "", {})
    assert routed(m, "") == {queue("hash"), queue("empty")}
    assert routed(m, "a") == {queue("hash"), queue("star")}
    assert routed(m, ".") == {queue("hash")}


def test_hash_positions() -> None:
    m = TopicMatcher("t")
    m.bind(queue("tail"), "a.#", {})
    m.bind(queue("head"), "#.a", {})
    m.bind(queue("mid"), "a.#.b", {})
    m.bind(queue("two"), "#.#", {})
    assert routed(m, "a") == {queue("tail"), queue("head"), queue("two")}
    assert routed(m, "a.b") == {queue("tail"), queue("mid"), queue("two")}
    assert routed(m, "a.x.y.b") == {queue("tail"), queue("mid"), queue("two")}
    assert routed(m, "x.a") == {queue("head"), queue("two")}
    assert routed(m, "") == {queue("two")}


def test_empty_words_and_literal_wildcard_words() -> None:
    m = TopicMatcher("t")
    m.bind(queue("q"), "a.*.b", {})
    m.bind(queue("lit"), "a*b", {})
    assert routed(m, "a..b") == {queue("q")}
    assert routed(m, "a.*.b") == {queue("q")}
    assert routed(m, "a*b") == {queue("lit")}
    assert routed(m, "axb") == set()


def test_multiple_bindings_same_destination_and_exchange_destinations() -> None:
    m = TopicMatcher("t")
    m.bind(queue("q"), "a.*", {})
    m.bind(queue("q"), "*.b", {})
    m.bind(exchange("x"), "#", {})
    t = m.targets("a.b")
    assert sorted(t.destinations, key=repr) == sorted([queue("q"), exchange("x")], key=repr)
    assert t.queue_names == {"q"} and not t.only_queues


def test_cache_is_invalidated_by_bind_and_unbind() -> None:
    m = TopicMatcher("t")
    assert routed(m, "a.b") == set()
    m.bind(queue("q"), "a.*", {})
    assert routed(m, "a.b") == {queue("q")}
    m.unbind(queue("q"), "a.*", {})
    assert routed(m, "a.b") == set()


def test_unbind_prunes_trie() -> None:
    m = TopicMatcher("t")
    m.bind(queue("q"), "a.b.c", {})
    m.bind(queue("q"), "a.b.c", {"x": 1})
    m.bind(queue("r"), "a.*.#", {})
    assert m.node_count() == 1 + 3 + 2
    m.unbind(queue("q"), "a.b.c", {})
    assert m.node_count() == 6  # still bound with {"x": 1}
    assert routed(m, "a.b.c") == {queue("q"), queue("r")}
    m.unbind(queue("q"), "a.b.c", {"x": 1})
    assert m.node_count() == 1 + 3  # a, *, #
    m.unbind_destination(queue("r"))
    assert m.node_count() == 1 and len(m) == 0


def test_many_hashes_do_not_explode() -> None:
    m = TopicMatcher("t")
    m.bind(queue("q"), ".".join(["#"] * 12 + ["z"]), {})
    m.bind(queue("r"), ".".join(["#", "a"] * 6 + ["#"]), {})
    key = ".".join(["a"] * 40)
    # a matcher that backtracks over every way to split the words between the #s would not
    # finish here (12 #s over 40 words); no timed assertion: the suite would hang instead
    assert routed(m, key) == {queue("r")}
    assert routed(m, key + ".z") == {queue("q"), queue("r")}


def test_many_bindings_route_quickly() -> None:
    m = TopicMatcher("t")
    for i in range(5000):
        m.bind(queue(f"q{i}"), f"stock.{i}.*", {})
        m.bind(queue(f"h{i}"), f"#.{i}", {})
    assert routed(m, "stock.42.nyse") == {queue("q42")}
    assert routed(m, "x.y.42") == {queue("h42")}
    for i in range(0, 5000, 97):  # uncached walks, each bound pattern found among 10,000
        assert set(m._match(["stock", str(i), "nyse"])) == {queue(f"q{i}")}
        assert set(m._match(["x", str(i)])) == {queue(f"h{i}")}


# ---------------------------------------------------------------------------------- properties

BINDING_WORDS = st.sampled_from(["a", "b", "", "*", "#"])
ROUTING_WORDS = st.sampled_from(["a", "b", "", "c", "*", "#"])
binding_keys = st.lists(BINDING_WORDS, max_size=5).map(".".join)
routing_keys = st.lists(ROUTING_WORDS, max_size=6).map(".".join)
dests = st.sampled_from([queue("q1"), queue("q2"), queue("q3"), exchange("x1")])
binding_sets = st.sets(st.tuples(binding_keys, dests), max_size=25)


@settings(max_examples=300, deadline=None)
@given(bindings=binding_sets, keys=st.lists(routing_keys, min_size=1, max_size=20))
def test_trie_agrees_with_reference(
    bindings: set[tuple[str, Destination]], keys: list[str]
) -> None:
    m = TopicMatcher("t")
    for key, d in bindings:
        assert m.bind(d, key, {})
    assert len(m) == len(bindings)
    for rk in keys:
        expected = ref_route(bindings, rk)
        assert routed(m, rk) == expected, rk
        assert routed(m, rk) == expected  # second time from the cache
        assert m.targets(rk).queue_names == {d.name for d in expected if d.is_queue}


ops = st.lists(
    st.tuples(
        st.sampled_from(["bind", "unbind"]), binding_keys, dests, st.sampled_from([{}, {"v": 1}])
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(sequence=ops, keys=st.lists(routing_keys, min_size=1, max_size=15))
def test_bind_unbind_sequence_equals_fresh_trie(
    sequence: list[tuple[str, str, Destination, dict[str, int]]], keys: list[str]
) -> None:
    m = TopicMatcher("t")
    live: dict[tuple[str, Destination, int], None] = {}
    for i, (op, key, d, args) in enumerate(sequence):
        ident = (key, d, len(args))
        if op == "bind":
            assert m.bind(d, key, args) is (ident not in live)
            live[ident] = None
        else:
            assert m.unbind(d, key, args) is (ident in live)
            live.pop(ident, None)
        if i % 7 == 0:  # interleave routing so the cache is exercised across changes
            for rk in keys[:3]:
                assert routed(m, rk) == ref_route({(k, dd) for k, dd, _ in live}, rk)
    fresh = TopicMatcher("t")
    for key, d, nargs in live:
        fresh.bind(d, key, {"v": 1} if nargs else {})
    assert len(m) == len(fresh) == len(live)
    assert m.node_count() == fresh.node_count()
    assert {(b.binding_key, b.destination, b.identity) for b in m.bindings()} == {
        (b.binding_key, b.destination, b.identity) for b in fresh.bindings()
    }
    remaining = {(k, d) for k, d, _ in live}
    for rk in keys:
        assert routed(m, rk) == routed(fresh, rk) == ref_route(remaining, rk)
