"""The rules of runtime parameters in the metadata state machine: ``SetParameter`` and
``ClearParameter`` (components ``shovel``, ``federation-upstream``, ``federation-upstream-set``),
each applied to ``state.MetadataState.parameters`` and returning its outcome, having changed
nothing when refused.

Owns the order of the checks, as RabbitMQ's ``rabbit_runtime_parameters:set``: the component
must be known (404 here: the management API answers 404 for an unknown component), the vhost
must exist (404), the value must be JSON and pass the component's validation (400 with RabbitMQ's
text: ``amqp_broker.shovel.params.validate``, ``amqp_broker.federation.params.validate``, the
pure validators a single broker uses). The value is kept as the JSON text the command carries,
so every member holds the same bytes. Deterministic; must not know: Raft, bytes of commands,
the broker's objects, which member runs a shovel.
Sources: RabbitMQ "Parameters and Policies", "Dynamic Shovels", "Federation Reference"
(3.10: rabbit_runtime_parameters, rabbit_shovel_parameters, rabbit_federation_parameters).
"""

from __future__ import annotations

import json

from amqp_broker.federation.params import COMPONENTS as FEDERATION
from amqp_broker.federation.params import validate as validate_federation
from amqp_broker.protocol import constants as c
from amqp_broker.shovel.params import validate as validate_shovel

from . import commands as m
from .outcomes import Deleted, Refused, Stored
from .state import MetadataState

__all__ = ["COMPONENTS", "BAD_VALUE", "set_parameter", "clear_parameter", "forget_vhost"]

#: The runtime parameter components this broker knows (RabbitMQ's with its shovel and
#: federation plugins enabled).
COMPONENTS = ("shovel", *FEDERATION)
#: ``Refused.code`` for a value the component's validation refuses (the management API's 400
#: ``bad_request``, "Validation failed").
BAD_VALUE = 400


def _invalid(cmd: m.SetParameter) -> str | None:
    """RabbitMQ's validation text for ``cmd``'s value, or None when it is valid."""
    try:
        value = json.loads(cmd.value)
    except (ValueError, RecursionError) as exc:
        return f"the value of {cmd.name} is not JSON: {exc}"
    try:
        if cmd.component == "shovel":
            validate_shovel(cmd.vhost, cmd.name, value)
        else:
            validate_federation(cmd.component, cmd.name, value)
    except ValueError as exc:   # ShovelParamError, FederationParamError: RabbitMQ's text
        return str(exc)
    except (TypeError, KeyError, AttributeError, RecursionError) as exc:   # never a crash
        return f"{cmd.name}: {type(exc).__name__}: {exc}"
    return None


def set_parameter(state: MetadataState, cmd: m.SetParameter) -> Stored | Refused:
    """``cmd``'s parameter set (``Stored(created)``); refused: 404 unknown component or vhost,
    400 a value its component refuses (``text``: RabbitMQ's validation errors, one a line)."""
    if cmd.component not in COMPONENTS:
        return Refused(c.NOT_FOUND, f"NOT_FOUND - no component '{cmd.component}'")
    if cmd.vhost not in state.vhosts:
        return Refused(c.NOT_FOUND, f"NOT_FOUND - no vhost '{cmd.vhost}'")
    error = _invalid(cmd)
    if error is not None:
        return Refused(BAD_VALUE, error)
    key = (cmd.vhost, cmd.component, cmd.name)
    new = key not in state.parameters
    state.parameters[key] = cmd.value
    return Stored(new)


def clear_parameter(state: MetadataState, cmd: m.ClearParameter) -> Deleted:
    """``cmd``'s parameter cleared; ``Deleted(False)`` when there was none."""
    return Deleted(state.parameters.pop((cmd.vhost, cmd.component, cmd.name), None) is not None)


def forget_vhost(state: MetadataState, vhost: str) -> None:
    """Clear every parameter of ``vhost`` (deleted: RabbitMQ deletes a vhost's runtime
    parameters with it)."""
    for key in [k for k in state.parameters if k[0] == vhost]:
        del state.parameters[key]
