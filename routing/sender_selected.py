"""Sender-selected distribution: extra routing keys carried in the ``CC`` and ``BCC`` headers.

Owns: reading ``CC``/``BCC`` from decoded message headers into a tuple of routing keys.
Must not know: stripping ``BCC`` from the delivered message (the core does that), exchanges.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from routing.errors import InvalidArgument

__all__ = ["ROUTING_HEADERS", "sender_selected_keys"]

ROUTING_HEADERS: Final = ("CC", "BCC")


def sender_selected_keys(headers: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Return the extra routing keys in ``headers["CC"]`` then ``headers["BCC"]``.

    Shapes: each header, when present, must be an array (``list``/``tuple``); its ``str``
    elements are taken as is, ``bytes`` elements are decoded as UTF-8 (undecodable bytes are kept
    via ``surrogateescape`` and so match no valid name), other element types are skipped, as
    RabbitMQ keeps only long strings. Returns ``()`` when neither header is present.
    Raises ``InvalidArgument`` if ``CC`` or ``BCC`` is present but not an array (core: 406).

    Source: RabbitMQ: Sender-selected Distribution; rabbit_basic ``header_routes``.
    """
    if not headers:
        return ()
    keys: list[str] = []
    for name in ROUTING_HEADERS:
        if name not in headers:
            continue
        value = headers[name]
        if not isinstance(value, (list, tuple)):
            raise InvalidArgument(
                f"unacceptable type in header {name}: {type(value).__name__}; expected array"
            )
        for item in value:
            if isinstance(item, str):
                keys.append(item)
            elif isinstance(item, (bytes, bytearray)):
                keys.append(bytes(item).decode("utf-8", "surrogateescape"))
    return tuple(keys)
