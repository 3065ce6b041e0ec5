"""The value of a ``shovel`` parameter: validated as RabbitMQ 3.10's ``rabbit_shovel_parameters``
does for AMQP 0-9-1 on both ends, into a ``ShovelDef``. Pure (no I/O).

Keys (RabbitMQ "Dynamic Shovels"): ``src-uri`` / ``dest-uri`` (mandatory; a URI or a list of
URIs, tried in order: ``amqp://`` / ``amqps://`` with RabbitMQ's URI query parameters such as
``cacertfile``, ``certfile``, ``keyfile``, ``verify``, ``server_name_indication``,
``heartbeat``; see ``clients.uri``), ``src-queue`` or ``src-exchange`` (+ ``src-exchange-key``,
default ``#``), ``src-prefetch-count`` (``prefetch-count``; default 1000 unacked deliveries),
``src-delete-after`` (``delete-after``; ``never`` default, ``queue-length`` or a number of
messages), ``dest-queue`` or ``dest-exchange`` (+ ``dest-exchange-key``; neither: each message
keeps its exchange and routing key), ``dest-add-forward-headers`` / ``add-forward-headers``,
``dest-add-timestamp-header`` / ``add-timestamp-header``, ``dest-publish-properties`` /
``publish-properties`` (an object of basic properties to set), ``ack-mode`` (``on-confirm``
default, ``on-publish``, ``no-ack``), ``reconnect-delay`` (seconds, default 5),
``src-protocol`` / ``dest-protocol`` (only ``amqp091`` here).

Errors: ``ShovelParamError`` with RabbitMQ's text (the API answers 400 ``bad_request`` with
``"Validation failed\\n\\n<text>\\n"``, as RabbitMQ's). Source: rabbitmq-server
deps/rabbitmq_shovel/src/rabbit_shovel_parameters.erl, rabbit_parameter_validation.erl (3.10).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .erl import term

__all__ = ["ShovelDef", "ShovelParamError", "validate", "DEFAULT_PREFETCH",
           "DEFAULT_RECONNECT_DELAY", "ACK_MODES", "proplist", "check_uri", "binary", "number",
           "boolean", "enum"]

#: RabbitMQ's defaults (rabbit_shovel_parameters: ?DEFAULT_PREFETCH, ?DEFAULT_RECONNECT_DELAY s)
DEFAULT_PREFETCH = 1000
DEFAULT_RECONNECT_DELAY = 5.0
ACK_MODES = ("no-ack", "on-publish", "on-confirm")

#: the basic properties ``dest-publish-properties`` may set (AMQP 0-9-1 §4.2.6 names; not
#: headers, as RabbitMQ 3.10's validate_properties)
PROPERTY_KEYS = ("content_type", "content_encoding", "delivery_mode", "priority",
                 "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
                 "user_id", "app_id", "cluster_id")



class ShovelParamError(ValueError):
    """A ``shovel`` value RabbitMQ refuses; ``str()`` is RabbitMQ's text (400 ``bad_request``,
    the reason ``"Validation failed\\n\\n" + text + "\\n"``)."""


@dataclass(frozen=True)
class ShovelDef:
    """One validated dynamic shovel: where from, where to, how (see the module docstring).
    ``value``: the JSON object as given (what GET /api/parameters answers); ``delete_after``:
    "never", "queue-length" or a message count; ``reconnect_delay``: seconds."""

    vhost: str
    name: str
    value: dict[str, Any]
    src_uris: tuple[str, ...]
    dest_uris: tuple[str, ...]
    src_queue: str | None = None
    src_exchange: str | None = None
    src_exchange_key: str = "#"
    dest_queue: str | None = None
    dest_exchange: str | None = None
    dest_exchange_key: str | None = None
    prefetch: int = DEFAULT_PREFETCH
    delete_after: str | int = "never"
    ack_mode: str = "on-confirm"
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    add_forward_headers: bool = False
    add_timestamp_header: bool = False
    publish_properties: dict[str, Any] = field(default_factory=dict)


def _fail(text: str) -> ShovelParamError:
    return ShovelParamError(text)


def _check_uri(key: str, value: Any) -> str | None:
    items = value if isinstance(value, list) else [value] if isinstance(value, str) else None
    if items is None:
        return f"{key} should be list, actually was {term(value)}"
    for uri in items:
        if not isinstance(uri, str):
            return f"{key} should be list, actually was {term(value)}"
        scheme = uri.partition("://")[0] if "://" in uri else uri.partition(":")[0]
        if scheme.lower() not in ("amqp", "amqps"):
            return f"\"{uri}\" not a valid URI: {{{{unexpected_uri_scheme,\"{scheme}\"}},\"{uri}\"}}"
        try:
            port = urlsplit(uri).port
        except ValueError:
            port = -1
        if port is not None and not 0 < port < 65536:
            raw = uri.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[-1]
            return f"\"{uri}\" not a valid URI: {{{{port_out_of_range,{raw}}},\"{uri}\"}}"
    return None


def _check_delete_after(key: str, value: Any) -> str | None:
    if value in ("never", "queue-length"):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None
    return (f"{key} should be a number greater than or equal to 0, \"never\" or "
            f"\"queue-length\", actually was {term(value)}")


def _check_properties(key: str, value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"{key} not a list {term(value)}"
    errors = _proplist(key, [(k, _number if k in ("delivery_mode", "priority", "timestamp")
                              else _binary, False) for k in PROPERTY_KEYS], value)
    return "\n".join(errors) if errors else None


def _binary(key: str, value: Any) -> str | None:
    return None if isinstance(value, str) else f"{key} should be binary, actually was {term(value)}"


def _number(key: str, value: Any) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None
    return f"{key} should be a number, actually was {term(value)}"


def _boolean(key: str, value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    return f"{key} should be boolean, actually was {term(value)}"


def _enum(*allowed: str) -> Any:
    def check(key: str, value: Any) -> str | None:
        if value in allowed:
            return None
        return (f"{key} should be one of [{','.join(term(a) for a in allowed)}], actually was "
                f"{term(value)}")
    return check


#: (key, check, mandatory) in rabbit_shovel_parameters' order (shovel, source, destination)
_VALIDATION: list[tuple[str, Any, bool]] = [
    ("reconnect-delay", _number, False), ("ack-mode", _enum(*ACK_MODES), False),
    ("src-protocol", _enum("amqp091"), False), ("dest-protocol", _enum("amqp091"), False),
    ("src-uri", _check_uri, True), ("src-exchange", _binary, False),
    ("src-exchange-key", _binary, False), ("src-queue", _binary, False),
    ("prefetch-count", _number, False), ("src-prefetch-count", _number, False),
    ("delete-after", _check_delete_after, False), ("src-delete-after", _check_delete_after, False),
    ("dest-uri", _check_uri, True), ("dest-exchange", _binary, False),
    ("dest-exchange-key", _binary, False), ("dest-queue", _binary, False),
    ("add-forward-headers", _boolean, False), ("add-timestamp-header", _boolean, False),
    ("dest-add-forward-headers", _boolean, False), ("dest-add-timestamp-header", _boolean, False),
    ("publish-properties", _check_properties, False),
    ("dest-publish-properties", _check_properties, False)]


def _proplist(name: str, checks: list[tuple[str, Any, bool]], value: dict) -> list[str]:
    """rabbit_parameter_validation:proplist: every error, the last check's first, and
    "Unrecognised terms" (the keys no check took, sorted) before them all."""
    errors: list[str] = []
    for key, check, mandatory in checks:
        if key not in value:
            if mandatory:
                errors.append(f"Key \"{key}\" not found in {name}")
            continue
        error = check(key, value[key])
        if error:
            errors.append(error)
    errors.reverse()
    known = {c[0] for c in checks}
    rest = sorted(k for k in value if k not in known)
    if rest:
        pairs = ",".join("{" + term(k) + "," + term(value[k]) + "}" for k in rest)
        errors.insert(0, f"Unrecognised terms [{pairs}] in {name}")
    return errors


def _as_list(value: str | list[str]) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else (value,)


def validate(vhost: str, name: str, value: Any) -> ShovelDef:
    """``value`` (the parameter's JSON object) as a ``ShovelDef``; ``ShovelParamError`` with
    RabbitMQ's text when it refuses it (see the module docstring)."""
    if not isinstance(value, dict):
        raise _fail(f"{name} not a list {term(value)}")
    errors = _proplist(name, _VALIDATION, value)
    if errors:
        raise _fail("\n".join(errors))
    src_uris = _as_list(value["src-uri"])
    dest_uris = _as_list(value["dest-uri"])
    src_q, src_x = value.get("src-queue"), value.get("src-exchange")
    if src_q is None and src_x is None:
        raise _fail("Must specify 'src-exchange' or 'src-queue'")
    if src_q is not None and src_x is not None:
        raise _fail("Cannot specify 'src-exchange' and 'src-queue'")
    dest_q, dest_x = value.get("dest-queue"), value.get("dest-exchange")
    if dest_q is not None and dest_x is not None:
        raise _fail("Cannot specify 'dest-exchange' and 'dest-queue'")
    delete_after: Any = value.get("src-delete-after", value.get("delete-after", "never"))
    props: Any = value.get("dest-publish-properties", value.get("publish-properties", {}))
    prefetch: Any = value.get("src-prefetch-count", value.get("prefetch-count", DEFAULT_PREFETCH))
    return ShovelDef(
        vhost=vhost, name=name, value=dict(value), src_uris=src_uris, dest_uris=dest_uris,
        src_queue=src_q, src_exchange=src_x,
        src_exchange_key=value.get("src-exchange-key", "#"),
        dest_queue=dest_q, dest_exchange=dest_x,
        dest_exchange_key=value.get("dest-exchange-key"),
        prefetch=int(prefetch), delete_after=delete_after,
        ack_mode=value.get("ack-mode", "on-confirm"),
        reconnect_delay=float(value.get("reconnect-delay", DEFAULT_RECONNECT_DELAY)),
        add_forward_headers=bool(value.get("dest-add-forward-headers",
                                           value.get("add-forward-headers", False))),
        add_timestamp_header=bool(value.get("dest-add-timestamp-header",
                                            value.get("add-timestamp-header", False))),
        publish_properties=dict(props))


#: rabbit_parameter_validation's checks, shared with ``amqp_broker.federation.params`` (the
#: federation plugin validates its parameters with the same functions and texts)
proplist, check_uri, binary, number, boolean, enum = (
    _proplist, _check_uri, _binary, _number, _boolean, _enum)
