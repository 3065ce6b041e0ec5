"""What every Cluster class method shares: the class id, the field checks, ``ClusterMethod``.

The methods themselves are in ``codec`` (membership, relay, quorum) and ``codec_definitions``
(policies, users, permissions, vhosts); ``codec`` registers them all with pamqp. Source: AMQP
0-9-1 §4.2.4 (class-id, method-id, arguments); pamqp ``base.Frame``.
"""

from __future__ import annotations

import typing

from pamqp import base

__all__ = ["CLUSTER_CLASS_ID", "MAX_LONGLONG", "ClusterMethod", "check_long", "check_shortstr",
           "check_view"]

CLUSTER_CLASS_ID = 3200
MAX_LONGLONG = (1 << 63) - 1


def check_shortstr(name: str, value: object) -> None:
    """Raises ``ValueError`` unless ``value`` is a str of at most 255 bytes in UTF-8 (shortstr)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str")
    if len(value.encode()) > 255:
        raise ValueError(f"{name} longer than 255 bytes once encoded")


def check_view(name: str, value: object) -> None:
    """Raises ``ValueError`` unless ``value`` is an int in [0, 2**63) (longlong, never negative)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_LONGLONG:
        raise ValueError(f"{name} must be an int in [0, 2**63)")


def check_long(name: str, value: object) -> None:
    """Raises ``ValueError`` unless ``value`` is an int in [0, 2**32) (long, AMQP 0-9-1 §4.2.5.2)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
        raise ValueError(f"{name} must be an int in [0, 2**32)")


class ClusterMethod(base.Frame):
    """Base of the Cluster class methods: value equality and a readable repr (pamqp's has neither)."""

    __slots__: typing.ClassVar[list[str]] = []
    frame_id: typing.ClassVar[int] = 0
    index: typing.ClassVar[int] = CLUSTER_CLASS_ID << 16
    name: typing.ClassVar[str] = "Cluster"
    synchronous: typing.ClassVar[bool] = False
    valid_responses: typing.ClassVar[list[str]] = []

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable, like every pamqp frame

    def __repr__(self) -> str:
        args = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__)
        return f"{self.name}({args})"
