"""The topic exchange type: dot-separated words with ``*`` (one word) and ``#`` (zero or more).

Owns: a trie of binding-key words with separate literal, ``*`` and ``#`` edges (as RabbitMQ's
rabbit_db_topic_exchange), the walk that matches a routing key against it, and a bounded cache of
results per routing key (cleared on every bind/unbind).
Must not know: exchange-to-exchange recursion, alternate exchanges, regular expressions.

Word splitting follows RabbitMQ (``split_topic_key_binary``): ``""`` is *zero* words, otherwise the
key is split on every ``"."``, so ``"a."`` is ``["a", ""]`` and ``"."`` is ``["", ""]``. Hence binding
``"*"`` does not match routing key ``""`` while ``"#"`` and ``""`` do.

Matching cost: the walk visits each (trie node, word position) state at most once, so it is bounded
by (nodes reachable) x (words + 1) even for keys like ``"#.#.#.a"``; without ``#`` it is linear in
the number of words times the branching at ``*``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from routing.binding import Binding
from routing.destination import Destination
from routing.exchange_types.base import Matcher
from routing.targets import EMPTY_TARGETS, Targets

__all__ = ["TopicMatcher", "split_topic_key"]

_STAR = "*"
_HASH = "#"
_CACHE_LIMIT = 4096


def split_topic_key(key: str) -> list[str]:
    """Split a routing or binding key into words: ``""`` -> ``[]``, else ``key.split(".")``.

    Source: RabbitMQ rabbit_db_topic_exchange ``split_topic_key_binary``; AMQP 0-9-1 §3.1.3.3.
    """
    return key.split(".") if key else []


class _Node:
    """One trie node: outgoing literal/``*``/``#`` edges and the destinations ending here."""

    __slots__ = ("parent", "word", "children", "star", "hash", "dests", "under_hash", "is_hash")

    def __init__(self, parent: _Node | None, word: str | None) -> None:
        self.parent = parent
        self.word = word
        self.children: dict[str, _Node] | None = None
        self.star: _Node | None = None
        self.hash: _Node | None = None
        self.dests: dict[Destination, int] | None = None
        self.is_hash = word == _HASH
        # a '#' on the path from the root means the state (node, position) can be reached by
        # several walks, so the matcher must remember which states it already expanded
        self.under_hash: bool = self.is_hash or (parent is not None and parent.under_hash)

    def child(self, word: str) -> _Node | None:
        if word == _STAR:
            return self.star
        if word == _HASH:
            return self.hash
        return self.children.get(word) if self.children is not None else None

    def add_child(self, word: str) -> _Node:
        node = _Node(self, word)
        if word == _STAR:
            self.star = node
        elif word == _HASH:
            self.hash = node
        else:
            if self.children is None:
                self.children = {}
            self.children[word] = node
        return node

    def drop_child(self, word: str) -> None:
        if word == _STAR:
            self.star = None
        elif word == _HASH:
            self.hash = None
        else:
            assert self.children is not None
            del self.children[word]
            if not self.children:
                self.children = None

    def is_empty(self) -> bool:
        return (
            self.dests is None and self.children is None and self.star is None and self.hash is None
        )


class TopicMatcher(Matcher):
    """Topic exchange bindings, matched through a word trie.

    ``targets(routing_key)`` returns a ``Targets`` (cached per routing key, up to 4096 keys, cache
    dropped on any change); ``route`` returns its destinations. Binding arguments identify bindings
    but do not affect matching. Never raises on any string key.
    Source: AMQP 0-9-1 §3.1.3.3 "The Topic Exchange Type"; RabbitMQ: Exchanges guide (topic);
    RabbitMQ rabbit_db_topic_exchange (trie with literal, ``*`` and ``#`` edges).
    """

    __slots__ = ("_root", "_cache", "_nodes")
    type_name = "topic"

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._root = _Node(None, None)
        self._cache: dict[str, Targets] = {}
        self._nodes = 1

    # ----------------------------------------------------------------------------- index

    def _add(self, binding: Binding) -> None:
        self._cache.clear()
        node = self._root
        for word in split_topic_key(binding.binding_key):
            nxt = node.child(word)
            if nxt is None:
                nxt = node.add_child(word)
                self._nodes += 1
            node = nxt
        if node.dests is None:
            node.dests = {}
        d = binding.destination
        node.dests[d] = node.dests.get(d, 0) + 1

    def _remove(self, binding: Binding) -> None:
        self._cache.clear()
        node: _Node | None = self._root
        for word in split_topic_key(binding.binding_key):
            assert node is not None
            node = node.child(word)
        assert node is not None and node.dests is not None
        d = binding.destination
        n = node.dests[d] - 1
        if n:
            node.dests[d] = n
            return
        del node.dests[d]
        if not node.dests:
            node.dests = None
        # prune now-empty nodes up to the root
        while node.parent is not None and node.is_empty():
            assert node.word is not None
            node.parent.drop_child(node.word)
            self._nodes -= 1
            node = node.parent

    def node_count(self) -> int:
        """The number of trie nodes including the root (introspection for tests and metrics)."""
        return self._nodes

    # ----------------------------------------------------------------------------- routing

    def targets(self, routing_key: str) -> Targets:
        """The destinations whose binding key pattern matches ``routing_key`` (cached)."""
        t = self._cache.get(routing_key)
        if t is None:
            found = self._match(split_topic_key(routing_key))
            t = Targets.of(found) if found else EMPTY_TARGETS
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[routing_key] = t
        return t

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> Iterable[Destination]:
        """The destinations matching ``routing_key``; ``headers`` is ignored."""
        return self.targets(routing_key).destinations

    def _match(self, words: list[str]) -> dict[Destination, None]:
        """Walk the trie for ``words``; return matched destinations in an ordered dict."""
        n = len(words)
        out: dict[Destination, None] = {}
        stack: list[tuple[_Node, int]] = [(self._root, 0)]
        seen: set[tuple[_Node, int]] = set()
        push = stack.append
        while stack:
            node, i = stack.pop()
            if node.is_hash and i < n:
                # '#' swallows word i and stays put
                state = (node, i + 1)
                if state not in seen:
                    seen.add(state)
                    push(state)
            if i == n:
                if node.dests is not None:
                    out.update(dict.fromkeys(node.dests))
                h = node.hash  # '#' matches zero words
                if h is not None and (h, n) not in seen:
                    seen.add((h, n))
                    push((h, n))
                continue
            children = node.children
            if children is not None:
                c = children.get(words[i])
                if c is not None:
                    if not c.under_hash:
                        push((c, i + 1))
                    elif (c, i + 1) not in seen:
                        seen.add((c, i + 1))
                        push((c, i + 1))
            c = node.star
            if c is not None:
                if not c.under_hash:
                    push((c, i + 1))
                elif (c, i + 1) not in seen:
                    seen.add((c, i + 1))
                    push((c, i + 1))
            h = node.hash
            if h is not None and (h, i) not in seen:
                seen.add((h, i))
                push((h, i))
        return out
