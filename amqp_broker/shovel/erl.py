"""JSON values written as Erlang terms (``io_lib:format("~p")``), as RabbitMQ's validation texts
show them: strings as binaries ``<<"x">>``, ``true``/``false``/``null`` as atoms, lists as
``[...]``, objects as maps ``#{<<"k">> => v}``. Pure. Source: Erlang ``io_lib`` ``~p``; RabbitMQ
decodes JSON with ``rabbit_json`` (thoas: objects to maps, strings to binaries)."""

from __future__ import annotations

from typing import Any

__all__ = ["term"]


def term(value: Any) -> str:
    """``value`` (a decoded JSON value) as ``~p`` prints its Erlang term."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{escaped}">>'
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(term(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ",".join(f"{term(k)} => {term(v)}" for k, v in sorted(value.items()))
        return "#{" + inner + "}"
    return repr(value)
