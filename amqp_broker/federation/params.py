"""The values of the ``federation-upstream`` and ``federation-upstream-set`` runtime parameters,
validated as RabbitMQ 3.10's ``rabbit_federation_parameters`` does, and the effective settings
of one upstream (``Upstream``). Pure (no I/O).

``federation-upstream`` (an object): ``uri`` (mandatory; a URI or a list of URIs tried in order,
``amqp://`` / ``amqps://``), ``exchange`` / ``queue`` (the upstream's exchange or queue name;
default: the downstream's), ``consumer-tag``, ``prefetch-count`` (default 1000 unacked
messages), ``reconnect-delay`` (seconds, default 5), ``max-hops`` (default 1; exchanges only),
``expires`` / ``message-ttl`` (ms, the upstream queue's ``x-expires`` / ``x-message-ttl``; default
none), ``trust-user-id`` (default false: the ``user_id`` property is removed), ``ack-mode``
(``on-confirm`` default, ``on-publish``, ``no-ack``), ``resource-cleanup-mode`` (``default``:
an exchange link that goes deletes its upstream queue and exchange; ``never``); RabbitMQ's
``ha-policy``, ``bind-nowait`` and ``channel-use-mode`` are accepted and have no effect here.
``federation-upstream-set`` (a list of objects): each ``upstream`` (mandatory, a
``federation-upstream`` name) with any of the keys above, which override that upstream's.
The set ``all`` is implicit: every upstream of the vhost.

Errors: ``FederationParamError`` with RabbitMQ's text (the API answers 400 ``bad_request`` with
``"Validation failed\\n\\n<text>\\n"``). Source: rabbitmq-server deps/rabbitmq_federation
rabbit_federation_parameters.erl, rabbit_federation_upstream.erl (3.10); RabbitMQ "Federation
Reference".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..shovel.erl import term
from ..shovel.params import binary, boolean, check_uri, enum, number, proplist

__all__ = ["FederationParamError", "Upstream", "validate", "upstream_of", "COMPONENTS",
           "UPSTREAM", "UPSTREAM_SET"]

UPSTREAM = "federation-upstream"
UPSTREAM_SET = "federation-upstream-set"
COMPONENTS = (UPSTREAM, UPSTREAM_SET)


class FederationParamError(ValueError):
    """A federation parameter value RabbitMQ refuses; ``str()`` is RabbitMQ's text."""


#: (key, check, mandatory) as rabbit_federation_parameters:shared_validation/0 (3.10)
_SHARED: list[tuple[str, Any, bool]] = [
    ("exchange", binary, False), ("queue", binary, False), ("consumer-tag", binary, False),
    ("prefetch-count", number, False), ("reconnect-delay", number, False),
    ("max-hops", number, False), ("expires", number, False), ("message-ttl", number, False),
    ("trust-user-id", boolean, False),
    ("ack-mode", enum("no-ack", "on-publish", "on-confirm"), False),
    ("resource-cleanup-mode", enum("default", "never"), False),
    ("ha-policy", binary, False), ("bind-nowait", boolean, False),
    ("channel-use-mode", enum("multiple", "single"), False)]


def validate(component: str, name: str, value: Any) -> Any:
    """``value`` of parameter ``name`` of ``component`` (``federation-upstream`` or
    ``federation-upstream-set``) as given, once RabbitMQ would accept it. Raises
    ``FederationParamError`` with RabbitMQ's text (every error, one a line)."""
    if component == UPSTREAM:
        if not isinstance(value, dict):
            raise FederationParamError(f"{name} not a list {term(value)}")
        errors = proplist(name, [("uri", check_uri, True), *_SHARED], value)
    elif component == UPSTREAM_SET:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise FederationParamError(f"{name} should be list, actually was {term(value)}")
        errors = [e for v in value
                  for e in proplist(name, [("upstream", binary, True), *_SHARED], v)]
    else:
        raise FederationParamError(f"name not recognised: {term(name)}")
    if errors:
        raise FederationParamError("\n".join(errors))
    return value


@dataclass(frozen=True)
class Upstream:
    """The effective settings of one upstream for one federated exchange or queue (an upstream
    parameter with its set entry's overrides). ``uris``: tried in order; ``exchange`` /
    ``queue``: the upstream's names (None: the downstream's); ``reconnect_delay``: seconds;
    ``expires`` / ``message_ttl``: ms or None; ``cleanup``: delete the upstream queue and
    exchange of an exchange link that goes (``resource-cleanup-mode`` not ``never``)."""

    name: str
    uris: tuple[str, ...]
    exchange: str | None = None
    queue: str | None = None
    consumer_tag: str | None = None
    prefetch: int = 1000
    reconnect_delay: float = 5.0
    max_hops: int = 1
    expires: int | None = None
    message_ttl: int | None = None
    trust_user_id: bool = False
    ack_mode: str = "on-confirm"
    cleanup: bool = True


def upstream_of(name: str, value: Mapping[str, Any],
                overrides: Mapping[str, Any] | None = None) -> Upstream:
    """The ``Upstream`` of a validated ``federation-upstream`` value; ``overrides``: its entry
    in an upstream set (its keys win, as rabbit_federation_upstream:bget/4)."""
    merged = {**value, **(overrides or {})}
    uri = merged["uri"]

    def opt_int(key: str) -> int | None:
        v = merged.get(key)
        return None if v is None else int(v)

    return Upstream(
        name=name, uris=tuple(uri) if isinstance(uri, list) else (uri,),
        exchange=merged.get("exchange"), queue=merged.get("queue"),
        consumer_tag=merged.get("consumer-tag"),
        prefetch=int(merged.get("prefetch-count", 1000)),
        reconnect_delay=float(merged.get("reconnect-delay", 5)),
        max_hops=int(merged.get("max-hops", 1)), expires=opt_int("expires"),
        message_ttl=opt_int("message-ttl"),
        trust_user_id=bool(merged.get("trust-user-id", False)),
        ack_mode=str(merged.get("ack-mode", "on-confirm")),
        cleanup=merged.get("resource-cleanup-mode", "default") != "never")
