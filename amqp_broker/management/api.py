"""The decorator every management route goes through: authenticate (HTTP basic, tags), hand the
route the ``Management`` context and the user, and turn errors into RabbitMQ's answers
(``HTTPError`` as is, a broker refusal via ``http.from_amqp``, an unknown vhost as 404, a broker
that does not answer in time as 503).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import wraps

from starlette.requests import Request
from starlette.responses import Response

from ..core.access import Account
from . import auth
from .context import Management
from .direct import AMQPError, direct_channel
from .http import HTTPError, from_amqp, not_found, path_vhost

__all__ = ["endpoint", "Handler", "amqp", "vhost_of"]

log = logging.getLogger(__name__)

Handler = Callable[[Request, Management, Account], Awaitable[Response]]


def endpoint(tag: str = "management") -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    """Wrap a route ``fn(request, mgmt, user)`` needing at least ``tag``."""

    def wrap(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
        @wraps(fn)
        async def route(request: Request) -> Response:
            mgmt: Management = request.app.state.mgmt
            try:
                user = auth.authenticate(request, mgmt.broker.access)
                auth.require(user, tag)
                return await fn(request, mgmt, user)
            except HTTPError as exc:
                return exc.response()
            except AMQPError as exc:
                return from_amqp(exc).response()
            except TimeoutError:
                return HTTPError(503, "timeout", "the broker did not answer in time").response()
        return route

    return wrap


def vhost_of(request: Request, mgmt: Management, user: Account) -> str:
    """The request's ``{vhost}``: 404 when it does not exist, 401 when ``user`` (below
    monitoring) has no permissions there."""
    vhost = path_vhost(request)
    if vhost not in mgmt.broker.vhosts:
        raise not_found()
    if not auth.sees_all(user) and (user.name, vhost) not in mgmt.broker.access.permissions:
        raise HTTPError(401, "not_authorised", "Access refused.")
    return vhost


def amqp(request: Request, mgmt: Management, user: Account, vhost: str):  # type: ignore[no-untyped-def]
    """An in-process AMQP channel on ``vhost`` as ``user`` (``with amqp(...) as ch``)."""
    peer = request.client.host if request.client else "127.0.0.1"
    return direct_channel(mgmt.broker, user, vhost, peer)
