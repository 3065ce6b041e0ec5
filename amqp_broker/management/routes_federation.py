"""``GET /api/federation-links[/{vhost}]`` and ``DELETE /api/federation-links/vhost/{vhost}/{id}/
restart``: the federation links' status (``federation.manager.FederationManager.status``) in
RabbitMQ 3.10's shapes (its rabbitmq_federation_management plugin); restart answers 204, 404 for
an unknown link. Source: rabbitmq_federation_management (federation-links), RabbitMQ
"Federation Plugin" (monitoring).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import Account
from .api import endpoint
from .context import Management
from .http import list_response, no_content, not_found, path_vhost
from .routes_parameters import federation_of

__all__ = ["ROUTES"]


@endpoint()
async def list_links(request: Request, mgmt: Management, user: Account) -> Response:
    """Every link's status, or those of ``{vhost}`` (404 for an unknown vhost)."""
    vhost = path_vhost(request) if "vhost" in request.path_params else None
    if vhost is not None and vhost not in mgmt.broker.vhosts:
        raise not_found()
    return list_response(request, federation_of(mgmt).status(vhost))


@endpoint("policymaker")
async def restart_link(request: Request, mgmt: Management, user: Account) -> Response:
    """Restart link ``{id}``: 204, 404 when unknown."""
    if not federation_of(mgmt).restart(path_vhost(request, "id")):
        raise not_found()
    return no_content()


ROUTES = [
    Route("/api/federation-links", list_links, methods=["GET"]),
    Route("/api/federation-links/{vhost}", list_links, methods=["GET"]),
    Route("/api/federation-links/vhost/{vhost}/{id}/restart", restart_link, methods=["DELETE"]),
]
