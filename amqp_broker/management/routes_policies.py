"""``/api/policies[/{vhost}[/{name}]]`` (issue 12): RabbitMQ 3.x shapes.

GET answers a list of ``{"vhost", "name", "pattern", "apply-to", "definition", "priority"}``
(one object for ``/{vhost}/{name}``, 404 when unknown); PUT takes ``{"pattern", "definition",
"priority"?, "apply-to"?}`` and answers 201 created or 204 replaced, 400 ``{"error":
"bad_request", "reason": ...}`` for a bad policy (unknown key, ha-mode not all/exactly/nodes,
ha-params missing or of the wrong type, a pattern that is not a regular expression), 404 for an
unknown vhost; DELETE answers 204, 404 when unknown. Changes need the ``policymaker`` tag (or
higher), are stored in definitions.db and, in a cluster, go through the metadata log to every
member (``changes``; 503 ``timeout`` on a minority member).
Source: RabbitMQ "Management HTTP API", "Policies".
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..core.access import Account
from ..core.policies import PolicyError, make_policy
from . import changes
from .api import endpoint
from .context import Management
from .http import (
    HTTPError,
    created,
    json_response,
    list_response,
    no_content,
    not_found,
    path_vhost,
    read_json,
)
from .routes_shared import listed_vhost, listing_routes, object_routes, vhost_and_name

__all__ = ["ROUTES"]


@endpoint()
async def list_policies(request: Request, mgmt: Management, user: Account) -> Response:
    """Every policy, or those of ``{vhost}`` (404 for an unknown vhost)."""
    vhost = listed_vhost(request, mgmt)
    return list_response(request, [p.to_json() for p in mgmt.broker.policies.list(vhost)])


@endpoint()
async def show_policy(request: Request, mgmt: Management, user: Account) -> Response:
    """One policy; 404 when unknown."""
    policy = mgmt.broker.policies.get(path_vhost(request), path_vhost(request, "name"))
    if policy is None:
        raise not_found()
    return json_response(policy.to_json())


@endpoint("policymaker")
async def put_policy(request: Request, mgmt: Management, user: Account) -> Response:
    """Set a policy: 201 / 204, 400 with the reason, 404 unknown vhost."""
    vhost, name = vhost_and_name(request, mgmt)
    body = await read_json(request)
    try:
        policy = make_policy(vhost, name, body)
    except PolicyError as exc:
        raise HTTPError(400, "bad_request", str(exc)) from None
    try:
        existed = await changes.set_policy(mgmt.broker, policy)
    except KeyError:   # the vhost went meanwhile
        raise not_found() from None
    except PolicyError as exc:
        raise HTTPError(400, "bad_request", str(exc)) from None
    return no_content() if existed else created()


@endpoint("policymaker")
async def delete_policy(request: Request, mgmt: Management, user: Account) -> Response:
    """Clear a policy: 204, 404 when unknown."""
    if not await changes.clear_policy(mgmt.broker, path_vhost(request),
                                      path_vhost(request, "name")):
        raise not_found()
    return no_content()


ROUTES = [
    *listing_routes("/api/policies", list_policies),
    *object_routes("/api/policies/{vhost}/{name}", show_policy, put_policy, delete_policy),
]
