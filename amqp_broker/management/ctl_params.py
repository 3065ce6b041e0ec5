"""``amqp-broker ctl``'s runtime-parameter and shovel commands, as rabbitmqctl's:
``set_parameter [-p VHOST] COMPONENT NAME JSON``, ``clear_parameter [-p VHOST] COMPONENT NAME``,
``list_parameters [-p VHOST]`` (columns component, name, value), ``shovel_status``
(columns name, vhost, type, state, source, destination, termination_reason, as
``rabbitmqctl shovel_status``), ``federation_status [--only-down]`` (every link's keys as
``rabbitmqctl federation_status``: type, vhost, exchange or queue, upstream exchange or queue,
upstream, id, status, local_connection, error, uri, last_changed; ``--only-down``: those not
running) and ``restart_federation_link LINK_ID``. Over the management API (``ctl_client.Api``); raises
``ApiError`` (the API refused: exit 1) or ``ValueError`` (usage: exit 2). The standard library
only. Source: rabbitmqctl(8) "Parameters", rabbitmq_shovel's ctl command.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from .ctl_client import Api

__all__ = ["COMMANDS", "run"]

COMMANDS = ("set_parameter", "clear_parameter", "list_parameters", "shovel_status",
            "federation_status", "restart_federation_link")
#: rabbitmqctl federation_status's columns (its plugin's FederationStatusCommand)
FEDERATION_COLUMNS = ["type", "vhost", "exchange", "upstream_exchange", "queue",
                      "upstream_queue", "upstream", "id", "status", "local_connection", "error",
                      "uri", "last_changed"]


def _q(value: str) -> str:
    return quote(value, safe="")


def _shovel_row(s: dict[str, Any]) -> dict[str, Any]:
    src = s.get("src_queue") if "src_queue" in s else s.get("src_exchange")
    dest = s.get("dest_queue") if "dest_queue" in s else s.get("dest_exchange")
    return {**s, "source": f"{s.get('src_uri', '')} {src or ''}".strip(),
            "destination": f"{s.get('dest_uri', '')} {dest or ''}".strip(),
            "termination_reason": s.get("reason", "")}


def run(api: Api, cmd: str, args: list[str], vhost: str,
        table: Callable[[list[dict], list[str]], None]) -> None:
    """Run ``cmd`` (one of ``COMMANDS``) in ``vhost``; ``table(items, columns)`` prints."""
    def need(n: int) -> None:
        if len(args) < n:
            raise ValueError(f"{cmd} needs {n} argument(s)")

    if cmd == "set_parameter":
        need(3)
        try:
            value = json.loads(args[2])
        except ValueError as exc:
            raise ValueError(f"set_parameter: the value is not JSON: {exc}") from None
        print(f"Setting runtime parameter \"{args[1]}\" for component \"{args[0]}\" to "
              f"\"{args[2]}\" in vhost \"{vhost}\" ...")
        api.request("PUT", f"/parameters/{_q(args[0])}/{_q(vhost)}/{_q(args[1])}",
                    {"component": args[0], "vhost": vhost, "name": args[1], "value": value})
    elif cmd == "clear_parameter":
        need(2)
        print(f"Clearing runtime parameter \"{args[1]}\" for component \"{args[0]}\" on vhost "
              f"\"{vhost}\" ...")
        api.request("DELETE", f"/parameters/{_q(args[0])}/{_q(vhost)}/{_q(args[1])}")
    elif cmd == "list_parameters":
        items = [p for p in api.request("GET", "/parameters") if p.get("vhost") == vhost]
        table(items, args or ["component", "name", "value"])
    elif cmd == "federation_status":
        rows = [{**{k: "" for k in FEDERATION_COLUMNS}, **link,
                 "last_changed": link.get("timestamp", "")}
                for link in api.request("GET", "/federation-links")
                if "--only-down" not in args or link.get("status") != "running"]
        table(rows, [a for a in args if a != "--only-down"] or FEDERATION_COLUMNS)
    elif cmd == "restart_federation_link":
        need(1)
        links = [x for x in api.request("GET", "/federation-links") if x.get("id") == args[0]]
        if not links:
            raise ValueError(f"restart_federation_link: no link with id {args[0]}")
        print(f"Restarting federation link with ID {args[0]} ...")
        api.request("DELETE", f"/federation-links/vhost/{_q(links[0]['vhost'])}/{_q(args[0])}"
                              "/restart")
    else:
        table([_shovel_row(s) for s in api.request("GET", "/shovels")],
              args or ["name", "vhost", "type", "state", "source", "destination",
                       "termination_reason"])
