"""``/api/users``, ``/api/vhosts``, ``/api/permissions``, ``/api/whoami`` and the operator
policy / parameter lists (empty: this broker has none, so they answer ``[]`` as a fresh
RabbitMQ does; policies are ``routes_policies``). Every change needs the ``administrator`` tag and is kept in definitions.db
(``changes``: in a cluster through the metadata log, decided alike on every member; 503
``timeout`` on a minority member). Bodies as RabbitMQ's: user ``{"password" | "password_hash" [+
"hashing_algorithm"], "tags": "a,b" | ["a", "b"]}`` (tags required; without a password an
existing user's is cleared and a new user gets a random one, as RabbitMQ 3.10), vhost ``{"description", "tags"}``,
permission ``{"configure", "write", "read"}``. Answers: 201 created, 204 updated or deleted,
404 unknown, 400 missing keys. Source: "Management HTTP API".
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import SHA256, Account, Grant, hash_password
from . import auth, changes
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
    require_keys,
)
from .routes_shared import object_routes
from .shapes import permission_json, user_json

__all__ = ["ROUTES", "parse_tags", "vhost_json", "vhost_items"]


def parse_tags(value: Any) -> tuple[str, ...]:
    """RabbitMQ accepts tags as "a,b" (also space-separated) or as a list."""
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(str(t).strip() for t in value if str(t).strip())
    return tuple(t for t in str(value).replace(" ", ",").split(",") if t)


# ------------------------------------------------------------------------------------ users
@endpoint("administrator")
async def list_users(request: Request, mgmt: Management, user: Account) -> Response:
    return list_response(request, [user_json(a) for a in mgmt.broker.access.users.values()])


def _user(request: Request, mgmt: Management) -> Account:
    account = mgmt.broker.access.users.get(path_vhost(request, "name"))
    if account is None:
        raise not_found()
    return account


@endpoint("administrator")
async def show_user(request: Request, mgmt: Management, user: Account) -> Response:
    return json_response(user_json(_user(request, mgmt)))


@endpoint("administrator")
async def put_user(request: Request, mgmt: Management, user: Account) -> Response:
    name = path_vhost(request, "name")
    body = await read_json(request)
    access = mgmt.broker.access
    old = access.users.get(name)
    if "tags" not in body:
        raise HTTPError(400, "bad_request", "tags_not_present")
    if "password" in body:
        pw_hash, algorithm = hash_password(str(body["password"])), SHA256
    elif "password_hash" in body:
        pw_hash = str(body["password_hash"])
        algorithm = str(body.get("hashing_algorithm") or SHA256)
    elif old is not None:  # RabbitMQ 3.10: an update without a password clears it
        pw_hash, algorithm = "", old.hashing_algorithm
    else:  # a new user without a password: none anyone knows
        pw_hash, algorithm = hash_password(secrets.token_urlsafe(24)), SHA256
    tags = parse_tags(body["tags"])
    new = await changes.put_user(mgmt.broker, Account(name, pw_hash, algorithm, tags,
                                                      old.loopback_only if old else False))
    return created() if new else no_content()


@endpoint("administrator")
async def delete_user(request: Request, mgmt: Management, user: Account) -> Response:
    await changes.delete_user(mgmt.broker, _user(request, mgmt).name)
    return no_content()


@endpoint("administrator")
async def user_permissions(request: Request, mgmt: Management, user: Account) -> Response:
    name = _user(request, mgmt).name
    return list_response(request, [permission_json(u, v, g) for (u, v), g in
                                   sorted(mgmt.broker.access.permissions.items()) if u == name])


@endpoint()
async def whoami(request: Request, mgmt: Management, user: Account) -> Response:
    return json_response({"name": user.name, "tags": list(user.tags)})


# ----------------------------------------------------------------------------------- vhosts
def vhost_json(mgmt: Management, name: str) -> dict[str, Any]:
    """A vhost as in ``GET /api/vhosts`` (message totals of its queues included)."""
    desc, tags = mgmt.vhost_meta.get(name, ("", ()))
    vhost = mgmt.broker.vhosts[name]
    ready = sum(q.message_count for q in vhost.queues.values())
    unacked = sum(q.unacked_count for q in vhost.queues.values())
    return {"name": name, "description": desc, "tags": list(tags), "tracing": False,
            "metadata": {"description": desc, "tags": list(tags)},
            "default_queue_type": "undefined", "messages": ready + unacked,
            "messages_ready": ready, "messages_unacknowledged": unacked,
            "cluster_state": {mgmt.broker.settings.node_name: "running"}}


def vhost_items(mgmt: Management, user: Account) -> list[dict]:
    """The vhosts ``user`` may see."""
    names = auth.visible_vhosts(user, mgmt.broker.access, sorted(mgmt.broker.vhosts))
    return [vhost_json(mgmt, n) for n in names]


@endpoint()
async def list_vhosts(request: Request, mgmt: Management, user: Account) -> Response:
    return list_response(request, vhost_items(mgmt, user))


@endpoint()
async def show_vhost(request: Request, mgmt: Management, user: Account) -> Response:
    name = path_vhost(request)
    if name not in auth.visible_vhosts(user, mgmt.broker.access, list(mgmt.broker.vhosts)):
        raise not_found()
    return json_response(vhost_json(mgmt, name))


@endpoint("administrator")
async def put_vhost(request: Request, mgmt: Management, user: Account) -> Response:
    name = path_vhost(request)
    body = await read_json(request)
    desc = str(body.get("description", ""))
    tags = parse_tags(body.get("tags"))
    new = await changes.put_vhost(mgmt.broker, name, desc, tags, creator=user.name)
    return created() if new else no_content()


@endpoint("administrator")
async def delete_vhost(request: Request, mgmt: Management, user: Account) -> Response:
    name = path_vhost(request)
    if not await changes.delete_vhost(mgmt.broker, name):
        raise not_found()
    return no_content()


@endpoint("administrator")
async def vhost_permissions(request: Request, mgmt: Management, user: Account) -> Response:
    name = path_vhost(request)
    if name not in mgmt.broker.vhosts:
        raise not_found()
    return list_response(request, [permission_json(u, v, g) for (u, v), g in
                                   sorted(mgmt.broker.access.permissions.items()) if v == name])


# ------------------------------------------------------------------------------ permissions
@endpoint("administrator")
async def list_permissions(request: Request, mgmt: Management, user: Account) -> Response:
    return list_response(request, [permission_json(u, v, g) for (u, v), g in
                                   sorted(mgmt.broker.access.permissions.items())])


def _perm_key(request: Request, mgmt: Management) -> tuple[str, str]:
    vhost, name = path_vhost(request), path_vhost(request, "user")
    if vhost not in mgmt.broker.vhosts or name not in mgmt.broker.access.users:
        raise not_found()
    return name, vhost


@endpoint("administrator")
async def show_permission(request: Request, mgmt: Management, user: Account) -> Response:
    key = _perm_key(request, mgmt)
    grant = mgmt.broker.access.permissions.get(key)
    if grant is None:
        raise not_found()
    return json_response(permission_json(key[0], key[1], grant))


@endpoint("administrator")
async def put_permission(request: Request, mgmt: Management, user: Account) -> Response:
    """RabbitMQ 3.10's answers: 400 for missing keys, 400 ``vhost_or_user_not_found``."""
    body = await read_json(request)
    require_keys(body, ("configure", "write", "read"))
    vhost, name = path_vhost(request), path_vhost(request, "user")
    if vhost not in mgmt.broker.vhosts or name not in mgmt.broker.access.users:
        raise HTTPError(400, "bad_request", "vhost_or_user_not_found")
    grant = Grant(str(body["configure"]), str(body["write"]), str(body["read"]))
    try:
        new = await changes.set_permission(mgmt.broker, name, vhost, grant)
    except KeyError:   # deleted meanwhile (the cluster's metadata log decided so)
        raise HTTPError(400, "bad_request", "vhost_or_user_not_found") from None
    return created() if new else no_content()


@endpoint("administrator")
async def delete_permission(request: Request, mgmt: Management, user: Account) -> Response:
    name, vhost = _perm_key(request, mgmt)
    if not await changes.clear_permission(mgmt.broker, name, vhost):
        raise not_found()
    return no_content()


@endpoint()
async def empty_list(request: Request, mgmt: Management, user: Account) -> Response:
    """Operator policies, global parameters, topic permissions: none exist yet."""
    return list_response(request, [])


ROUTES = [
    Route("/api/users", list_users),
    *object_routes("/api/users/{name}", show_user, put_user, delete_user),
    Route("/api/users/{name}/permissions", user_permissions),
    Route("/api/whoami", whoami),
    Route("/api/vhosts", list_vhosts),
    *object_routes("/api/vhosts/{vhost}", show_vhost, put_vhost, delete_vhost),
    Route("/api/vhosts/{vhost}/permissions", vhost_permissions),
    Route("/api/permissions", list_permissions),
    *object_routes("/api/permissions/{vhost}/{user}", show_permission, put_permission,
                   delete_permission),
    *(Route(path, empty_list) for path in (
        "/api/operator-policies",
        "/api/operator-policies/{vhost}", "/api/global-parameters",
        "/api/topic-permissions", "/api/extensions", "/api/feature-flags")),
]
