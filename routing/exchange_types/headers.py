"""The headers exchange type: a message goes to bindings whose arguments match its headers.

Owns: parsing and validating ``x-match``, compiling each binding's arguments into match conditions,
and evaluating them against message headers.
Must not know: routing keys (ignored), the wire codec (headers arrive decoded), other exchanges.

Semantics (RabbitMQ rabbit_exchange_type_headers, 3.13/4.x):

* ``x-match`` is ``all`` (default when absent), ``any``, ``all-with-x`` or ``any-with-x``; any other
  string, or a non-string value, is rejected at bind time with ``InvalidArgument``.
* The ``x-match`` argument itself is never a condition. With ``all``/``any`` every other argument
  whose key starts with ``"x-"`` is ignored; with the ``-with-x`` variants those are conditions too.
* A condition whose value is ``None`` (AMQP void) holds when the header is present, whatever its
  value. Otherwise it holds when the header is present and ``field_equal`` to the argument (so a
  bool never equals an int, an int never equals a float, and str equals bytes with the same UTF-8).
* ``all`` holds when every condition holds -- so a binding with no conditions matches every
  message; ``any`` holds when at least one does -- so one with no conditions matches nothing.
* A message without headers is matched as if its headers were ``{}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from routing.binding import Binding
from routing.destination import Destination
from routing.errors import InvalidArgument
from routing.exchange_types.base import Matcher
from routing.values import field_equal

__all__ = ["HeadersMatcher", "HeadersSpec", "XMatch", "parse_x_match"]

XMatch = Literal["all", "any", "all-with-x", "any-with-x"]
_MODES: Final[frozenset[str]] = frozenset({"all", "any", "all-with-x", "any-with-x"})
_VOID: Final = object()
_MISSING: Final = object()


def parse_x_match(arguments: Mapping[str, Any] | None) -> XMatch:
    """Return the binding's ``x-match`` mode, ``"all"`` when absent.

    Accepts ``str`` or UTF-8 ``bytes``. Raises ``InvalidArgument`` for any other value or type.
    Source: RabbitMQ rabbit_exchange_type_headers ``validate_binding``.
    """
    if not arguments or "x-match" not in arguments:
        return "all"
    value = arguments["x-match"]
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(f"Invalid x-match field value {value!r}") from None
    if not isinstance(value, str):
        raise InvalidArgument(
            f"Invalid x-match field type {type(value).__name__} (value {value!r}); expected longstr"
        )
    if value not in _MODES:
        raise InvalidArgument(
            f"Invalid x-match field value <<\"{value}\">>; expected all, any, all-with-x, or "
            "any-with-x"  # RabbitMQ prints the value as an Erlang binary
        )
    return value  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class HeadersSpec:
    """A compiled headers binding: the match mode and its ``(key, value)`` conditions.

    ``conditions`` holds ``(header name, expected value)``; an expected value of ``None`` means
    "present with any value". ``require_all`` is True for ``all``/``all-with-x``. Build with
    ``HeadersSpec.compile``.
    Source: RabbitMQ rabbit_exchange_type_headers ``match/2``, ``match_x/2``.
    """

    mode: XMatch
    conditions: tuple[tuple[str, Any], ...]
    require_all: bool

    @classmethod
    def compile(cls, arguments: Mapping[str, Any] | None) -> HeadersSpec:
        """Compile binding ``arguments``. Raises ``InvalidArgument`` for a bad ``x-match``."""
        mode = parse_x_match(arguments)
        with_x = mode.endswith("-with-x")
        conds = tuple(
            (k, v)
            for k, v in (arguments or {}).items()
            if k != "x-match" and (with_x or not k.startswith("x-"))
        )
        return cls(mode, conds, not mode.startswith("any"))

    def matches(self, headers: Mapping[str, Any] | None) -> bool:
        """True if a message with ``headers`` (None == ``{}``) satisfies this binding."""
        h = headers or {}
        if self.require_all:
            for key, expected in self.conditions:
                actual = h.get(key, _MISSING)
                if actual is _MISSING:
                    return False
                if expected is not None and not field_equal(expected, actual):
                    return False
            return True
        for key, expected in self.conditions:
            actual = h.get(key, _MISSING)
            if actual is not _MISSING and (expected is None or field_equal(expected, actual)):
                return True
        return False


class HeadersMatcher(Matcher):
    """Headers exchange bindings; routing evaluates every binding's ``HeadersSpec`` in turn.

    ``bind`` raises ``InvalidArgument`` for an invalid ``x-match``. Routing keys and binding keys
    are ignored for matching (the key still identifies the binding). ``route`` never raises.
    Source: AMQP 0-9-1 §3.1.3.4 "The Headers Exchange Type"; RabbitMQ: Exchanges guide (headers).
    """

    __slots__ = ("_specs",)
    type_name = "headers"
    needs_headers = True

    def __init__(self, source: str) -> None:
        super().__init__(source)
        self._specs: dict[Binding, tuple[HeadersSpec, Destination]] = {}

    def _validate(self, binding: Binding) -> None:
        parse_x_match(binding.arguments)

    def _add(self, binding: Binding) -> None:
        self._specs[binding] = (HeadersSpec.compile(binding.arguments), binding.destination)

    def _remove(self, binding: Binding) -> None:
        del self._specs[binding]

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> Iterable[Destination]:
        """Destinations of bindings whose arguments match ``headers``; ``routing_key`` ignored."""
        return self._iter_matches(headers or {})

    def _iter_matches(self, headers: Mapping[str, Any]) -> Iterator[Destination]:
        for spec, dest in self._specs.values():
            if spec.matches(headers):
                yield dest
