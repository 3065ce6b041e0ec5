"""The ``Binding`` value: one edge from a source exchange to a destination.

Owns: binding identity. As in RabbitMQ a binding is identified by (source, destination, binding key,
arguments): the same key with different arguments is a different binding.
Must not know: how any exchange type indexes its bindings, or how bindings are persisted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from routing.destination import Destination
from routing.values import freeze_table

__all__ = ["Binding"]


@dataclass(frozen=True, slots=True)
class Binding:
    """One binding: messages published to exchange ``source`` may go to ``destination``.

    Shapes: ``source`` is an exchange name (``""`` is the default exchange); ``binding_key`` a
    string of up to 255 bytes (not checked here); ``arguments`` the binding's field table, copied on
    construction and not to be mutated. Equality and hash use a type-aware frozen form of
    ``arguments`` (``identity``), so ``{"a": 1}`` and ``{"a": True}`` are different bindings.
    Raises ``TypeError`` if an argument value is unhashable and not a list/dict.

    Source: AMQP 0-9-1 §3.1.3; RabbitMQ: Exchanges guide (bindings), Exchange-to-Exchange Bindings.
    """

    source: str
    destination: Destination
    binding_key: str
    arguments: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    identity: tuple[tuple[str, Any], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        args = dict(self.arguments) if self.arguments else {}
        object.__setattr__(self, "arguments", args)
        object.__setattr__(self, "identity", freeze_table(args))
