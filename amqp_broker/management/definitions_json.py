"""``GET /api/definitions`` (export) and ``POST /api/definitions`` (import), in RabbitMQ's
definitions format ("Definitions" guide; checked against files exported by RabbitMQ 3.10):
top-level ``rabbit_version``, ``users`` (``password_hash`` base64 salted SHA-256 with
``hashing_algorithm`` ``rabbit_password_hashing_sha256``; ``tags`` a list, or a comma-separated
string in older files), ``vhosts``, ``permissions``, ``topic_permissions``, ``parameters``,
``global_parameters``, ``policies``, ``queues``, ``exchanges``, ``bindings``.

Export: users, vhosts, permissions, durable exchanges (not the built-in ``amq.*`` and default
ones), durable non-exclusive queues, and the bindings between them (not the default exchange's).
Export and import include ``policies`` (``core.policies``; a queue's exported arguments are those
its client declared, without what a policy added) and the ``shovel`` runtime ``parameters``
(``routes_parameters``, imported last, once the queues they name exist).
Import order: users, vhosts, permissions, policies, exchanges, queues, bindings; entities are declared
through the broker's own handlers (``direct``) as an internal user (as RabbitMQ's import, not
subject to the importer's permissions), so they are stored and propagated like any declaration;
users, vhosts, permissions and policies through ``changes`` (in a cluster, the metadata log).
A user given ``password`` (not a hash) gets it hashed. Answers: export 200 (``?download=``
adds Content-Disposition), import 204; 400 with the broker's reason on the first refusal.
"""

from __future__ import annotations

from typing import Any

from pamqp import commands as cmd
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import SHA256, Account, Grant, hash_password
from ..core.policies import PolicyError, declared_arguments, make_policy
from . import changes
from .api import endpoint
from .context import Management
from .direct import direct_channel
from .http import HTTPError, flag, json_response, no_content, path_vhost, read_json
from .node import RABBITMQ_API_VERSION
from .routes_access import parse_tags
from .routes_parameters import all_parameters, import_parameters
from .shapes import jsonable, permission_json, user_json

__all__ = ["ROUTES", "export_definitions", "import_definitions"]


def export_definitions(mgmt: Management, only_vhost: str | None = None) -> dict[str, Any]:
    """The broker's definitions as RabbitMQ's JSON (one vhost's only, without users and vhosts
    lists, when ``only_vhost`` is given, as RabbitMQ's per-vhost export)."""
    broker = mgmt.broker
    vhosts = [only_vhost] if only_vhost else sorted(broker.vhosts)
    exchanges, queues, bindings = [], [], []
    durable_queues: dict[str, set[str]] = {}
    for v in vhosts:
        vh = broker.vhosts[v]
        for ex in vh.routing.exchanges():
            if ex.durable and ex.name and not ex.name.startswith("amq."):
                exchanges.append({"name": ex.name, "vhost": v, "type": ex.type,
                                  "durable": True, "auto_delete": ex.auto_delete,
                                  "internal": ex.internal,
                                  "arguments": jsonable(dict(ex.arguments or {}))})
        names = durable_queues.setdefault(v, set())
        for q in vh.queues.values():
            if q.durable and q.exclusive_owner is None:
                names.add(q.name)
                queues.append({"name": q.name, "vhost": v, "durable": True,
                               "auto_delete": q.auto_delete,
                               "arguments": jsonable(declared_arguments(q.arguments))})
        for b in vh.routing.bindings():
            src = vh.routing.get_exchange(b.source)
            dest_ok = (b.destination.name in names if b.destination.kind == "queue" else
                       getattr(vh.routing.get_exchange(b.destination.name), "durable", False))
            if src is not None and src.durable and dest_ok:
                bindings.append({"source": b.source, "vhost": v,
                                 "destination": b.destination.name,
                                 "destination_type": b.destination.kind,
                                 "routing_key": b.binding_key,
                                 "arguments": jsonable(dict(b.arguments or {}))})
    out: dict[str, Any] = {"rabbit_version": RABBITMQ_API_VERSION,
                           "rabbitmq_version": RABBITMQ_API_VERSION,
                           "product_name": "amqp-broker", "product_version": __import__(
                               "amqp_broker").__version__}
    if only_vhost is None:
        out["users"] = [{k: v for k, v in user_json(a).items()}
                        for a in broker.access.users.values()]
        out["vhosts"] = [{"name": v, "limits": [],
                          "metadata": {"description": mgmt.vhost_meta.get(v, ("", ()))[0],
                                       "tags": list(mgmt.vhost_meta.get(v, ("", ()))[1])}}
                         for v in vhosts]
        out["permissions"] = [permission_json(u, v, g) for (u, v), g in
                              sorted(broker.access.permissions.items())]
        out["topic_permissions"] = []
        out["global_parameters"] = []
    policies = [p.to_json() for v in vhosts for p in broker.policies.list(v)]
    parameters = [x for v in vhosts for x in all_parameters(mgmt, v)]
    out.update({"parameters": parameters, "policies": policies, "queues": queues,
                "exchanges": exchanges, "bindings": bindings})
    return out


def _list(defs: dict, key: str) -> list[dict]:
    value = defs.get(key) or []
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise HTTPError(400, "bad_request", f"{key} must be a list of objects")
    return value


async def import_definitions(mgmt: Management, defs: dict[str, Any],
                             only_vhost: str | None = None) -> None:
    """Apply RabbitMQ definitions (see module docstring). ``only_vhost``: every entity goes to
    that vhost (RabbitMQ's per-vhost import). Raises ``HTTPError`` 400 / ``AMQPError``."""
    broker = mgmt.broker
    if only_vhost is None:
        for u in _list(defs, "users"):
            name = str(u["name"])
            if "password_hash" in u:
                pw, algo = str(u["password_hash"]), str(u.get("hashing_algorithm") or SHA256)
            else:
                pw, algo = hash_password(str(u.get("password", ""))), SHA256
            old = broker.access.users.get(name)
            await changes.put_user(broker, Account(name, pw, algo, parse_tags(u.get("tags")),
                                                   old.loopback_only if old else False))
        for v in _list(defs, "vhosts"):
            meta = v.get("metadata") or {}
            desc = str(meta.get("description", v.get("description", "")))
            tags = parse_tags(meta.get("tags", v.get("tags")))
            await changes.put_vhost(broker, str(v["name"]), desc, tags)
        for p in _list(defs, "permissions"):
            try:
                await changes.set_permission(broker, str(p["user"]), str(p["vhost"]),
                                             Grant(str(p["configure"]), str(p["write"]),
                                                   str(p["read"])))
            except KeyError as exc:
                raise HTTPError(400, "bad_request", f"unknown user or vhost {exc}") from None
    for p in _list(defs, "policies"):   # before the queues, which they apply to
        vhost = only_vhost or str(p.get("vhost", "/"))
        try:
            await changes.set_policy(broker, make_policy(vhost, str(p.get("name", "")), p))
        except PolicyError as exc:
            raise HTTPError(400, "bad_request", f"policy {p.get('name')!r}: {exc}") from None
        except KeyError:
            raise HTTPError(400, "bad_request", f"vhost '{vhost}' does not exist") from None
    methods: dict[str, list[tuple[Any, type]]] = {}

    def add(item: dict, method: Any, reply: type) -> None:
        vhost = only_vhost or str(item.get("vhost", "/"))
        if vhost not in broker.vhosts:
            raise HTTPError(400, "bad_request", f"vhost '{vhost}' does not exist")
        methods.setdefault(vhost, []).append((method, reply))

    for x in _list(defs, "exchanges"):
        add(x, cmd.Exchange.Declare(exchange=str(x["name"]), exchange_type=str(x["type"]),
                                    durable=flag(x, "durable", True),
                                    auto_delete=flag(x, "auto_delete", False),
                                    internal=flag(x, "internal", False),
                                    arguments=x.get("arguments") or {}), cmd.Exchange.DeclareOk)
    for q in _list(defs, "queues"):
        add(q, cmd.Queue.Declare(queue=str(q["name"]), durable=flag(q, "durable", True),
                                 auto_delete=flag(q, "auto_delete", False),
                                 arguments=q.get("arguments") or {}), cmd.Queue.DeclareOk)
    for b in _list(defs, "bindings"):
        if b.get("destination_type") == "exchange":
            add(b, cmd.Exchange.Bind(destination=str(b["destination"]), source=str(b["source"]),
                                     routing_key=str(b.get("routing_key", "")),
                                     arguments=b.get("arguments") or {}), cmd.Exchange.BindOk)
        else:
            add(b, cmd.Queue.Bind(queue=str(b["destination"]), exchange=str(b["source"]),
                                  routing_key=str(b.get("routing_key", "")),
                                  arguments=b.get("arguments") or {}), cmd.Queue.BindOk)
    for vhost, calls in methods.items():
        with direct_channel(broker, None, vhost) as ch:
            await ch.open()
            for method, reply in calls:
                await ch.call(method, reply)
    await import_parameters(mgmt, _list(defs, "parameters"), only_vhost)


@endpoint("administrator")
async def get_definitions(request: Request, mgmt: Management, user: Account) -> Response:
    vhost = path_vhost(request) if "vhost" in request.path_params else None
    if vhost is not None and vhost not in mgmt.broker.vhosts:
        raise HTTPError(404, "Object Not Found", "Not Found")
    response = json_response(export_definitions(mgmt, vhost))
    download = request.query_params.get("download")
    if download:
        response.headers["Content-Disposition"] = f'attachment; filename="{download}"'
    return response


@endpoint("administrator")
async def post_definitions(request: Request, mgmt: Management, user: Account) -> Response:
    vhost = path_vhost(request) if "vhost" in request.path_params else None
    if vhost is not None and vhost not in mgmt.broker.vhosts:
        raise HTTPError(404, "Object Not Found", "Not Found")
    await import_definitions(mgmt, await read_json(request), vhost)
    return no_content()


ROUTES = [
    Route("/api/definitions", get_definitions, methods=["GET"]),
    Route("/api/definitions", post_definitions, methods=["POST"]),
    Route("/api/definitions/{vhost}", get_definitions, methods=["GET"]),
    Route("/api/definitions/{vhost}", post_definitions, methods=["POST"]),
]
