"""The byte encoding of metadata commands: what a Raft log entry of the metadata group carries.

Owns ``encode(command) -> bytes`` and ``decode(bytes) -> command``. Must not know: what a command
means (``machine``), Raft (entries are opaque bytes to it).

Format: ``VERSION`` (u8, 1), the command's kind (u8, below), then its fields in declaration order,
each in the ``wire`` encoding its type takes (str, bool, int, a tuple of str, a field table).
Kinds (never renumber; a new command takes the next number)::

    1 DeclareExchange   2 DeleteExchange   3 DeclareQueue    4 DeleteQueue    5 Bind
    6 Unbind            7 SetPolicy        8 ClearPolicy     9 AddVhost      10 DeleteVhost
   11 PutUser          12 DeleteUser      13 SetPermission  14 ClearPermission
   15 MemberGone       16 SetParameter    17 ClearParameter   18 InstallView

``decode`` raises ``wire.MalformedMetadata`` (a ``ValueError``) for any bytes that are not an
encoding of a command, and nothing else; ``encode`` raises ``ValueError`` / ``TypeError`` for a
value it cannot carry (an integer over 255 bytes, a table value of another type).
"""

from __future__ import annotations

import dataclasses
import typing
from collections import abc
from collections.abc import Callable
from typing import Any

from . import commands as m
from .wire import MalformedMetadata, Reader, Writer

__all__ = ["VERSION", "KINDS", "encode", "decode", "MalformedMetadata"]

VERSION = 1
#: Command classes by kind - 1.
KINDS: tuple[type, ...] = (
    m.DeclareExchange, m.DeleteExchange, m.DeclareQueue, m.DeleteQueue, m.Bind, m.Unbind,
    m.SetPolicy, m.ClearPolicy, m.AddVhost, m.DeleteVhost, m.PutUser, m.DeleteUser,
    m.SetPermission, m.ClearPermission, m.MemberGone, m.SetParameter, m.ClearParameter, m.InstallView,
)
_KIND_OF = {cls: i + 1 for i, cls in enumerate(KINDS)}

_Put = Callable[[Writer, Any], None]
_Get = Callable[[Reader], Any]
_SCALARS: dict[object, tuple[_Put, _Get]] = {
    str: (Writer.str_, Reader.str_),
    bool: (Writer.bool_, Reader.bool_),
    int: (Writer.int_, Reader.int_),
}


def _field_codec(hint: object) -> tuple[_Put, _Get]:
    """The wire encoding of a field annotated ``hint`` (str, bool, int, tuple[str, ...],
    Mapping[str, Any])."""
    if hint in _SCALARS:
        return _SCALARS[hint]
    origin = typing.get_origin(hint)
    if origin is tuple:
        return Writer.strs, Reader.strs
    if origin is abc.Mapping:
        return Writer.table, Reader.table
    raise TypeError(f"no encoding for a field of type {hint!r}")


def _schema(cls: type) -> tuple[tuple[str, _Put, _Get], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, *_field_codec(hints[f.name])) for f in dataclasses.fields(cls))


_SCHEMAS = {cls: _schema(cls) for cls in KINDS}


def encode(command: m.Command) -> bytes:
    """The entry bytes of ``command``. Raises ``ValueError`` / ``TypeError`` for a value the
    format cannot carry, ``KeyError`` for an object that is not a command."""
    w = Writer()
    w.raw(bytes((VERSION, _KIND_OF[type(command)])))
    for name, put, _ in _SCHEMAS[type(command)]:
        put(w, getattr(command, name))
    return w.bytes()


def decode(data: bytes) -> m.Command:
    """The command encoded in ``data``. Raises ``MalformedMetadata`` for anything else."""
    r = Reader(data)
    version = r.u8()
    if version != VERSION:
        raise MalformedMetadata(f"unknown command version {version}")
    kind = r.u8()
    if not 1 <= kind <= len(KINDS):
        raise MalformedMetadata(f"unknown command kind {kind}")
    cls = KINDS[kind - 1]
    values = {name: get(r) for name, _, get in _SCHEMAS[cls]}
    r.end()
    command: m.Command = cls(**values)
    return command
