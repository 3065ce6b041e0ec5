"""The declare rules of exchanges and queues as pure functions: RabbitMQ's equivalence checks,
reserved names, argument validation, and the reply codes and texts of each refusal.

Owns the decisions that do not need a broker object, only the names and attributes involved, so
that ``VirtualHost`` (one broker) and ``cluster.metadata`` (the cluster's metadata state machine,
applying the same rules in log order on every member) answer alike. Every check raises
``ChannelException`` (403, 404, 405, 406) or ``ConnectionException`` (503) with RabbitMQ's reply
text, or returns. Must not know: connections, channels, queue objects, the routing table, I/O.

Sources: AMQP 0-9-1 §1.7.2.1 (exchange.declare), §1.7.2.3 (exchange.delete), §1.7.2.5
(queue.declare); RabbitMQ "Queues", "Exchanges", "Streams" and ``rabbit_amqqueue`` /
``rabbit_exchange`` / ``rabbit_channel`` (3.10: ``assert_equivalence``, ``check_arguments``,
``check_not_default_exchange``), whose reply texts these reproduce.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from queues.arguments import QueueSettings, parse_arguments
from queues.errors import InvalidArgument
from queues.stream.queue import stream_settings

from ..protocol import constants as c
from ..protocol.errors import ChannelException, ConnectionException

__all__ = ["EQUIV_ARGS", "not_found", "locked", "inequivalent", "erlang_reason",
           "default_exchange_refused", "unknown_exchange_type", "check_exchange_equivalent",
           "check_new_exchange_name", "check_exchange_deletable", "exchange_in_use",
           "check_queue_redeclare", "check_new_queue_name", "check_equivalent_args",
           "parse_queue_arguments", "not_served", "check_permanent_shared",
           "check_stream_declare", "check_type_arguments"]

#: The queue arguments a redeclaration must repeat (RabbitMQ's ``rabbit_amqqueue``
#: ``declare_args`` equivalence list, plus the deduplication plugin's and stream arguments).
EQUIV_ARGS = ("x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
              "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority",
              "x-single-active-consumer", "x-queue-type", "x-message-deduplication",
              "x-cache-size", "x-cache-ttl", "x-max-age", "x-stream-max-segment-size-bytes")

_AMQP_TYPE_NAMES = {"str": "longstr", "bytes": "longstr", "bool": "bool", "float": "double",
                    "dict": "table", "list": "array", "NoneType": "void", "void": "void",
                    "Decimal": "decimal", "datetime": "timestamp"}


def erlang_reason(reason: str) -> str:
    """A ``queues.arguments`` refusal as RabbitMQ prints its Erlang term in the 406 text
    (``rabbit_amqqueue:check_arguments``, ``~p``): ``value_negative -1`` -> ``{value_negative,-1}``,
    a sentence -> the sentence in double quotes with AMQP type names (str -> longstr)."""
    match = re.fullmatch(r"([a-z_]+) (-?\d+|[A-Za-z_]+)", reason)
    if match:
        term = _AMQP_TYPE_NAMES.get(match.group(2), match.group(2))
        return f"{{{match.group(1)},{term}}}"
    reason = re.sub(r"got (\w+)", lambda m: f"got {_AMQP_TYPE_NAMES.get(m.group(1), m.group(1))}",
                    reason)
    return f'"{reason}"'


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if not isinstance(value, str) else value


def not_found(vhost: str, kind: str, name: str) -> ChannelException:
    """404 with RabbitMQ's text: "NOT_FOUND - no queue 'q' in vhost '/'" (``kind``: queue or
    exchange)."""
    return ChannelException(c.NOT_FOUND, f"NOT_FOUND - no {kind} '{name}' in vhost '{vhost}'")


def locked(vhost: str, name: str) -> ChannelException:
    """405 RESOURCE_LOCKED: queue ``name`` is exclusive to another connection (or the exclusive
    flag of a redeclaration differs), RabbitMQ's text."""
    return ChannelException(
        c.RESOURCE_LOCKED,
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in vhost "
        f"'{vhost}'. It could be originally declared on another connection or the "
        f"exclusive property value does not match that of the original declaration.")


def inequivalent(vhost: str, kind: str, name: str, arg: str, got: Any, have: Any
                 ) -> ChannelException:
    """406 "inequivalent arg 'x' for queue 'q' in vhost '/': received 'a' but current is 'b'"
    (``rabbit_misc:assert_field_equivalence``; booleans as true/false)."""
    return ChannelException(
        c.PRECONDITION_FAILED,
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for {kind} '{name}' in vhost "
        f"'{vhost}': received '{_fmt(got)}' but current is '{_fmt(have)}'")


def default_exchange_refused() -> ChannelException:
    """403 for any declare, delete or bind of the default exchange (``check_not_default_exchange``)."""
    return ChannelException(c.ACCESS_REFUSED,
                            "ACCESS_REFUSED - operation not permitted on the default exchange")


def unknown_exchange_type(type_: str) -> ConnectionException:
    """503 COMMAND_INVALID, a connection error, as ``rabbit_exchange:check_type``."""
    return ConnectionException(c.COMMAND_INVALID,
                               f"COMMAND_INVALID - unknown exchange type '{type_}'")


def check_exchange_equivalent(vhost: str, name: str, have: Any, type_: str, durable: bool,
                              auto_delete: bool, internal: bool,
                              arguments: Mapping[str, Any] | None) -> None:
    """406 unless a redeclaration of exchange ``have`` (a ``routing.exchange.Exchange``) repeats
    its type, durable, auto_delete, internal and alternate-exchange, in that order
    (``rabbit_exchange:assert_equivalence``)."""
    for arg, got, held in (("type", type_, have.type), ("durable", durable, have.durable),
                           ("auto_delete", auto_delete, have.auto_delete),
                           ("internal", internal, have.internal)):
        if got != held:
            raise inequivalent(vhost, "exchange", name, arg, got, held)
    ae = (arguments or {}).get("alternate-exchange")
    if ae != have.arguments.get("alternate-exchange"):
        raise inequivalent(vhost, "exchange", name, "alternate-exchange", ae,
                           have.arguments.get("alternate-exchange"))


def check_new_exchange_name(name: str) -> None:
    """403 for a new exchange named "amq.*" (AMQP 0-9-1 §1.7.2.1: reserved prefix)."""
    if name.startswith("amq."):
        raise ChannelException(c.ACCESS_REFUSED, f"ACCESS_REFUSED - exchange name '{name}' "
                               f"contains reserved prefix 'amq.*'")


def check_exchange_deletable(vhost: str, name: str) -> None:
    """403 for deleting the default exchange or an "amq.*" one (RabbitMQ 3.10's texts)."""
    if not name:
        raise default_exchange_refused()
    if name.startswith("amq."):
        raise ChannelException(c.ACCESS_REFUSED, f"ACCESS_REFUSED - deletion of system exchange "
                               f"'{name}' in vhost '{vhost}' not allowed")


def exchange_in_use(vhost: str, name: str) -> ChannelException:
    """406 for Exchange.Delete ``if_unused`` of an exchange that is the source of bindings."""
    return ChannelException(c.PRECONDITION_FAILED,
                            f"PRECONDITION_FAILED - exchange '{name}' in vhost '{vhost}' in use")


def check_queue_redeclare(vhost: str, name: str, *, durable: bool, exclusive: bool,
                          auto_delete: bool, arguments: Mapping[str, Any],
                          have_durable: bool, have_exclusive: bool, have_auto_delete: bool,
                          have_arguments: Mapping[str, Any]) -> None:
    """The equivalence of a redeclaration of an existing queue, in RabbitMQ's order: 406 durable,
    405 exclusive (RabbitMQ's strict exclusive-access check, not a 406), 406 auto_delete, 406 an
    argument of ``EQUIV_ARGS``. ``arguments`` / ``have_arguments``: what the clients declared
    (``core.policies.declared_arguments``: without what a policy added). The ownership check
    (405 for another connection's exclusive queue) comes before, by the caller."""
    if have_durable != durable:
        raise inequivalent(vhost, "queue", name, "durable", durable, have_durable)
    if have_exclusive != exclusive:
        raise locked(vhost, name)
    if have_auto_delete != auto_delete:
        raise inequivalent(vhost, "queue", name, "auto_delete", auto_delete, have_auto_delete)
    check_equivalent_args(vhost, name, have_arguments, arguments)


def check_equivalent_args(vhost: str, name: str, have: Mapping[str, Any],
                          got: Mapping[str, Any]) -> None:
    """406 for the first argument of ``EQUIV_ARGS`` whose value (or integer-ness) differs;
    x-queue-type absent equals "classic"."""
    for key in EQUIV_ARGS:
        h, g = have.get(key), got.get(key)
        if key == "x-queue-type" and (h or "classic") == (g or "classic"):
            continue
        if h != g or type(h) is not type(g) and not (
                isinstance(h, int) and isinstance(g, int)):
            raise inequivalent(vhost, "queue", name, key, g, h)


def check_new_queue_name(name: str) -> None:
    """403 for a new queue named "amq.*" other than a server-generated "amq.gen-*"."""
    if name.startswith("amq.") and not name.startswith("amq.gen-"):
        raise ChannelException(c.ACCESS_REFUSED, f"ACCESS_REFUSED - queue name '{name}' contains "
                               f"reserved prefix 'amq.*'")


def parse_queue_arguments(vhost: str, name: str, arguments: Mapping[str, Any] | None
                          ) -> QueueSettings:
    """``queues.arguments.parse_arguments``, its refusal as RabbitMQ's 406 "invalid arg 'x' for
    queue 'q' in vhost '/': {value_negative,-1}"."""
    try:
        return parse_arguments(arguments)
    except InvalidArgument as exc:
        raise ChannelException(
            c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - invalid arg '{exc.argument}' for "
            f"queue '{name}' in vhost '{vhost}': {erlang_reason(exc.reason)}") from None


def not_served(vhost: str, name: str, queue_type: str) -> ChannelException:
    """406 for an x-queue-type this broker does not serve (our text: RabbitMQ serves all three)."""
    return ChannelException(
        c.PRECONDITION_FAILED,
        f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue '{name}' in vhost "
        f"'{vhost}': queue type '{queue_type}' is not served by this broker")


def check_permanent_shared(vhost: str, name: str, durable: bool, exclusive: bool,
                           auto_delete: bool) -> None:
    """406 "invalid property" for a non-durable, exclusive or auto-delete declaration of a
    queue type that is durable and shared only (streams, quorum queues; RabbitMQ 3.10)."""
    where = f"for queue '{name}' in vhost '{vhost}'"
    for bad, prop in ((not durable, "non-durable"), (exclusive, "exclusive-owner"),
                      (auto_delete, "auto-delete")):
        if bad:
            raise ChannelException(c.PRECONDITION_FAILED,
                                   f"PRECONDITION_FAILED - invalid property '{prop}' {where}")


def check_stream_declare(vhost: str, name: str, durable: bool, exclusive: bool,
                         auto_delete: bool, arguments: Mapping[str, Any] | None) -> None:
    """RabbitMQ's refusals of a stream declaration, all 406 ("RabbitMQ: Streams", checked
    against 3.10): non-durable, exclusive, auto-delete; an argument of another queue type;
    a malformed x-max-age / x-stream-max-segment-size-bytes."""
    check_permanent_shared(vhost, name, durable, exclusive, auto_delete)
    try:
        stream_settings(arguments)
    except InvalidArgument as exc:
        tail = (" of queue type rabbit_stream_queue" if exc.reason == "not allowed"
                else f": {exc.reason}")
        raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - invalid arg "
                               f"'{exc.argument}' for queue '{name}' in vhost '{vhost}'{tail}"
                               ) from None


def check_type_arguments(vhost: str, name: str, queue_type: str,
                         check: Callable[[dict[str, Any]], None],
                         arguments: Mapping[str, Any] | None) -> None:
    """``check(arguments)`` of a replicated queue type (``QueueTypeFactory.check_arguments``,
    e.g. ``cluster.quorum.config.check_arguments``), its ``InvalidArgument`` as RabbitMQ's 406:
    "... of queue type rabbit_quorum_queue" for an argument of another type, else the reason."""
    try:
        check(dict(arguments or {}))
    except InvalidArgument as exc:
        tail = (f" of queue type rabbit_{queue_type}_queue" if exc.reason.startswith("not allowed")
                else f": {erlang_reason(exc.reason)}")
        raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - invalid arg "
                               f"'{exc.argument}' for queue '{name}' in vhost '{vhost}'{tail}"
                               ) from None
