"""HTTP plumbing shared by the management routes: RabbitMQ's error bodies and status codes, JSON
responses, request bodies, path parameters, and list queries (``columns=``, ``sort=``,
``page=``/``page_size=``, ``name=``/``use_regex=``). Source: "Management HTTP API" (pagination
and column selection), rabbit_mgmt_util (error shapes: ``{"error": ..., "reason": ...}``).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..protocol import constants as c
from .direct import AMQPError

__all__ = ["HTTPError", "json_response", "no_content", "created", "read_json", "path_vhost",
           "list_response", "from_amqp", "not_found", "flag", "require_keys"]


_CHALLENGE = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'}


class HTTPError(Exception):
    """An API error: ``status``, RabbitMQ's ``error`` word and ``reason`` text. ``challenge``:
    a failed login (no credentials, or wrong ones), answered with RabbitMQ's ``WWW-Authenticate``
    challenge; ``empty``: without a body (RabbitMQ's answer to a request without credentials)."""

    def __init__(self, status: int, error: str, reason: str, challenge: bool = False,
                 empty: bool = False) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason
        self.challenge = challenge
        self.empty = empty

    def response(self) -> Response:
        """The JSON error response; a ``challenge`` carries ``WWW-Authenticate: Basic
        realm="RabbitMQ Management"`` as RabbitMQ 3.10's 401s to a missing or wrong password
        do (its 401s refusing a user's tags or permissions do not)."""
        headers = _CHALLENGE if self.challenge else None
        if self.empty:
            return Response(b"", self.status, headers=headers)
        return JSONResponse({"error": self.error, "reason": self.reason}, self.status,
                            headers=headers)


def not_found() -> HTTPError:
    """RabbitMQ's 404 body."""
    return HTTPError(404, "Object Not Found", "Not Found")


def from_amqp(exc: AMQPError) -> HTTPError:
    """A broker refusal as RabbitMQ's API reports it: 404 -> 404, 403 -> 401 "not_authorised"
    (RabbitMQ answers a permission refusal with 401), 406/405/other -> 400 "bad_request" with
    the reply text without its "CODE - " prefix."""
    reason = exc.text.split(" - ", 1)[1] if " - " in exc.text else exc.text
    # (checked against RabbitMQ 3.10: a refused declare or delete says only "Access refused.")
    if exc.code == c.NOT_FOUND:
        return HTTPError(404, "Object Not Found", reason)
    if exc.code == c.ACCESS_REFUSED:
        return HTTPError(401, "not_authorised", "Access refused.")
    return HTTPError(400, "bad_request", reason)


def json_response(data: Any, status: int = 200) -> Response:
    """A JSON response (UTF-8, compact)."""
    return Response(json.dumps(data, separators=(",", ":"), default=str), status,
                    media_type="application/json")


def no_content() -> Response:
    """204, RabbitMQ's answer to an update or a delete."""
    return Response(status_code=204)


def created(location: str | None = None) -> Response:
    """201, RabbitMQ's answer to a create (with ``Location`` for a new binding)."""
    return Response(status_code=201, headers={"Location": location} if location else None)


async def read_json(request: Request) -> dict[str, Any]:
    """The request body as a JSON object ({} when empty); 400 for anything else."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise HTTPError(400, "bad_request", "not_json") from exc
    if not isinstance(data, dict):
        raise HTTPError(400, "bad_request", "not_a_json_object")
    return data


def require_keys(body: dict, keys: tuple[str, ...]) -> None:
    """400 unless ``body`` has every key; the reason lists the missing ones as RabbitMQ 3.10's
    ``rabbit_mgmt_util`` prints them with Erlang's ``~p`` (``[{key_missing,a},{key_missing,b}]``,
    one element a line once the list no longer fits: checked against its answers)."""
    missing = [f"{{key_missing,{k}}}" for k in keys if k not in body]
    if missing:
        line = "[" + ",".join(missing) + "]"
        raise HTTPError(400, "bad_request", line if len(line) < 79 else
                        "[" + ",\n ".join(missing) + "]")


def flag(body: dict, key: str, default: bool) -> bool:
    """A boolean field of a request body; RabbitMQ's clients also send "true"/"false"."""
    value = body.get(key)
    if value is None:
        return default
    return value.lower() == "true" if isinstance(value, str) else bool(value)


def path_vhost(request: Request, key: str = "vhost") -> str:
    """A path parameter, percent-decoded (``%2F`` is vhost "/")."""
    return unquote(request.path_params[key])


def _get(item: dict, dotted: str) -> Any:
    value: Any = item
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _select(item: dict, columns: list[str]) -> dict:
    out: dict[str, Any] = {}
    for col in columns:
        value = _get(item, col)
        parts = col.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def list_response(request: Request, items: list[dict]) -> Response:
    """A list answer with RabbitMQ's query parameters: ``name`` filter (``use_regex``),
    ``sort``/``sort_reverse`` (dotted keys), ``columns`` (comma-separated, dotted), and
    pagination: with ``page`` the answer is ``{"items", "page", "page_size", "page_count",
    "item_count", "filtered_count", "total_count"}``; 400 for a bad page or page_size > 500."""
    q = request.query_params
    total = len(items)
    name = q.get("name")
    if name:
        if q.get("use_regex", "false").lower() == "true":
            try:
                pattern = re.compile(name)
            except re.error:
                raise HTTPError(400, "bad_request", "invalid regex") from None
            items = [i for i in items if pattern.search(str(i.get("name", "")))]
        else:
            items = [i for i in items if name in str(i.get("name", ""))]
    sort = q.get("sort")
    if sort:
        items = sorted(items, key=lambda i: (_get(i, sort) is None, str(_get(i, sort))
                                             if not isinstance(_get(i, sort), int | float)
                                             else _get(i, sort)))
    if q.get("sort_reverse", "false").lower() == "true":
        items = list(reversed(items))
    columns = [c for c in q.get("columns", "").split(",") if c]
    if columns:
        items = [_select(i, columns) for i in items]
    if "page" not in q:
        return json_response(items)
    try:
        page = int(q.get("page", "1"))
        size = int(q.get("page_size", "100"))
    except ValueError:
        raise HTTPError(400, "bad_request", "page and page_size must be integers") from None
    if page < 1 or size < 1:
        raise HTTPError(400, "bad_request", "page and page_size must be positive")
    if size > 500:
        raise HTTPError(400, "bad_request", "Page size is too large (500 max)")
    filtered = len(items)
    page_count = max(1, -(-filtered // size))
    if page > page_count:
        raise HTTPError(400, "bad_request", "Page out of range")
    chunk = items[(page - 1) * size: page * size]
    return json_response({"filtered_count": filtered, "item_count": len(chunk), "items": chunk,
                          "page": page, "page_count": page_count, "page_size": size,
                          "total_count": total})
