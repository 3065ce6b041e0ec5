"""Method frame codec: pamqp for every method, a hand-written fast path for Basic.Publish.

Owns turning a method frame payload (class-id u16, method-id u16, arguments) into a pamqp command
object, or for Basic.Publish (the hottest method) into a slim ``Publish`` tuple, and encoding commands
into whole method frames. Errors: an unknown class/method is 540 NOT_IMPLEMENTED (as RabbitMQ), an
undecodable argument list is 502 SYNTAX_ERROR; both are connection exceptions (spec "Constants").
pamqp raises ``UnmarshalingException``, and a bare ``ValueError``/``struct.error`` on short payloads;
all are caught here. Must not know: channel state.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Final, Protocol

from pamqp import base, commands
from pamqp import constants as pamqp_constants
from pamqp.exceptions import UnmarshalingException

from . import constants as c
from .errors import ConnectionException

__all__ = ["FastCommand", "Publish", "decode_method", "encode_method", "PUBLISH_INDEX", "method_ids",
           "register_fast_decoder"]

PUBLISH_INDEX: Final = 0x003C0028
# RabbitMQ accepts any UTF-8 queue or exchange name of up to 255 bytes (it never applied the
# spec's character grammar, which pamqp's validators enforce): without this a reply carrying
# such a name (Queue.DeclareOk for a queue named "é") or a declaration propagated to a cluster
# member would fail to encode. pamqp still checks the length.
for _domain in ("queue-name", "exchange-name"):
    pamqp_constants.DOMAIN_REGEX[_domain] = re.compile(r"(?s).*")
_HEAD = struct.Struct(">BHI")
_INDEX = struct.Struct(">I")
_FIXED_SIZE = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}
_ARG_TYPES: dict[int, tuple[str, ...]] = {}  # method index -> argument types, filled on first use
#: class+method prefix (4 bytes) -> a hand-written decoder of a hot extension method
_FAST: Final[dict[bytes, Callable[[bytes], FastCommand | None]]] = {}


class FastCommand(Protocol):
    """What a fast decoder (``register_fast_decoder``) returns: a decoded method of its own class
    (not a pamqp command: the cluster's ``cluster.relay_wire.DecodedRelay``) that has pamqp's
    ``index`` ((class << 16) | method) and ``name`` for error reports."""

    @property
    def index(self) -> int:
        """(class-id << 16) | method-id."""
        ...

    @property
    def name(self) -> str:
        """"Class.Method", as in pamqp."""
        ...


def register_fast_decoder(index: int, decoder: Callable[[bytes], FastCommand | None]) -> None:
    """Decode method ``index`` ((class << 16) | method) with ``decoder(payload)`` instead of
    pamqp's generic unmarshal: for an extension method sent once per message (the cluster's
    Cluster.Relay). ``decoder`` returns the decoded method, or None for a payload it does not
    accept exactly; the generic path then decodes it and reports the error (502 / 540)."""
    _FAST[_INDEX.pack(index)] = decoder


def _arg_types(index: int, cls: type[base.Frame]) -> tuple[str, ...]:
    """Argument types of a method class, cached (works for extension classes registered later)."""
    types = _ARG_TYPES.get(index)
    if types is None:
        types = _ARG_TYPES[index] = tuple(cls.amqp_type(name) for name in cls.__slots__)
    return types


def _arguments_fit(types: tuple[str, ...], data: bytes) -> bool:
    """True when ``data`` holds exactly the argument fields ``types`` declare.

    pamqp silently shortens a truncated short/long string and ignores trailing bytes; RabbitMQ's
    decoder matches the whole argument list exactly, and so does the Basic.Publish fast path.
    """
    pos, n, bits = 0, len(data), 0
    for kind in types:
        if kind == "bit":
            if bits % 8 == 0:
                pos += 1
            bits += 1
            continue
        bits = 0
        if kind == "shortstr":
            if pos >= n:
                return False
            pos += 1 + data[pos]
        elif kind == "longstr" or kind == "table":
            if pos + 4 > n:
                return False
            pos += 4 + _INDEX.unpack_from(data, pos)[0]
        else:
            pos += _FIXED_SIZE[kind]
    return pos == n


class Publish:
    """Basic.Publish arguments (spec §1.8.3.7 / class basic, method publish).

    ``routing_raw`` is ``exchange`` and ``routing_key`` as the two short strings that came in, kept so
    Basic.Deliver can reuse them without re-encoding. A plain class, not a NamedTuple: compiled, it
    is made with a C call (a NamedTuple's ``__new__`` is Python code), one per published message.
    """

    __slots__ = ("exchange", "routing_key", "mandatory", "immediate", "routing_raw")

    def __init__(self, exchange: str, routing_key: str, mandatory: bool, immediate: bool,
                 routing_raw: bytes) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate
        self.routing_raw = routing_raw

    def _fields(self) -> tuple[str, str, bool, bool, bytes]:
        return self.exchange, self.routing_key, self.mandatory, self.immediate, self.routing_raw

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Publish):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, like a pamqp command

    def __repr__(self) -> str:
        names = ("exchange", "routing_key", "mandatory", "immediate", "routing_raw")
        args = ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields(), strict=True))
        return f"Publish({args})"

    @property
    def name(self) -> str:
        """"Basic.Publish", as pamqp's commands' ``name``, for error texts."""
        return "Basic.Publish"


def _syntax_error(what: str, index: int) -> ConnectionException:
    return ConnectionException(c.SYNTAX_ERROR, f"SYNTAX_ERROR - {what}", index >> 16,
                               index & 0xFFFF)


def _decode_publish(payload: bytes) -> Publish:
    # class u16, method u16, ticket u16, exchange shortstr, routing-key shortstr, bits octet
    try:
        elen = payload[6]
        rpos = 7 + elen
        rlen = payload[rpos]
        bits_at = rpos + 1 + rlen
        bits = payload[bits_at]
    except IndexError:
        raise _syntax_error("truncated basic.publish", PUBLISH_INDEX) from None
    if len(payload) != bits_at + 1:
        raise _syntax_error("basic.publish has trailing bytes", PUBLISH_INDEX)
    try:
        exchange = payload[7:rpos].decode() if elen else ""   # "": the default exchange
        routing_key = payload[rpos + 1:bits_at].decode()
    except UnicodeDecodeError:
        raise _syntax_error("basic.publish name is not UTF-8", PUBLISH_INDEX) from None
    return Publish(exchange, routing_key, bool(bits & 1), bool(bits & 2), payload[6:bits_at])


def decode_method(payload: bytes) -> Publish | base.Frame | FastCommand:
    """Decode a method frame payload.

    Returns a ``Publish`` for Basic.Publish, a registered fast decoder's object for its method
    (``register_fast_decoder``), else the pamqp command object. Raises
    ``ConnectionException`` 540 NOT_IMPLEMENTED (unknown class/method) or 502 SYNTAX_ERROR (malformed
    arguments, or a payload under 4 bytes). Source: AMQP 0-9-1 §2.3.5.2 and §4.2.4.
    """
    # Basic.Publish (60.40) read byte by byte: native compares when compiled, no slice
    if (len(payload) >= 4 and payload[1] == 60 and payload[3] == 40 and payload[0] == 0
            and payload[2] == 0):
        return _decode_publish(payload)
    prefix = payload[:4]
    fast = _FAST.get(prefix)
    if fast is not None:
        method = fast(payload)
        if method is not None:
            return method
    if len(payload) < 4:
        raise ConnectionException(c.SYNTAX_ERROR, "SYNTAX_ERROR - method frame shorter than 4 bytes")
    index = _INDEX.unpack_from(payload)[0]
    # pamqp annotates INDEX_MAPPING's values as bare ``type``; they are all Frame subclasses
    cls: type[base.Frame] | None = commands.INDEX_MAPPING.get(index)
    if cls is None:
        raise ConnectionException(
            c.NOT_IMPLEMENTED, f"NOT_IMPLEMENTED - unknown method {index >> 16}.{index & 0xFFFF}",
            index >> 16, index & 0xFFFF)
    if not _arguments_fit(_arg_types(index, cls), payload[4:]):
        raise _syntax_error(f"cannot decode {cls.name}: argument list truncated or too long", index)
    method = cls()
    try:
        method.unmarshal(payload[4:])
    except (UnmarshalingException, ValueError, struct.error, IndexError, TypeError,
            UnicodeDecodeError, RecursionError) as exc:
        raise _syntax_error(f"cannot decode {cls.name}: {exc}", index) from None
    return method


def method_ids(method: base.Frame | Publish | FastCommand) -> tuple[int, int]:
    """(class_id, method_id) of a decoded method, for error reports."""
    if isinstance(method, Publish):
        return c.CLASS_BASIC, 40
    return method.index >> 16, method.index & 0xFFFF


def encode_method(channel: int, method: base.Frame) -> bytes:
    """A whole method frame for a pamqp command (validated by pamqp; raises ``ValueError``)."""
    payload = _INDEX.pack(method.index) + method.marshal()
    return _HEAD.pack(c.FRAME_METHOD, channel, len(payload)) + payload + c.FRAME_END_BYTE
