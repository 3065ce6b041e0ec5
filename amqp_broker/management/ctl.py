"""``amqp-broker ctl``: rabbitmqctl's most used commands, over the management HTTP API.

    amqp-broker ctl [--url URL[,URL...]]... [--timeout S] [-u guest] [--password guest]
                    [-p VHOST] COMMAND [ARGS]

Members: ``--url`` is repeatable and takes comma-separated URLs (without it
``$AMQP_BROKER_CTL_URL``, same syntax, else http://127.0.0.1:15672). They are tried in order,
then the members learnt from an earlier answer for the same URL list (kept in
``$XDG_CACHE_HOME/amqp-broker/ctl-members.json``); the first that answers serves the whole
command (``ctl_client``: a member that cannot be reached within ``--timeout`` seconds is
skipped, an HTTP error is an answer). When earlier ones did not answer, one line on stderr
names them and the member that did.

Commands: list_queues [columns...], list_exchanges [columns...], list_bindings [columns...],
list_consumers [columns...] (each of one vhost: ``-p VHOST``, default "/", as rabbitmqctl's),
list_connections [columns...] (every vhost's), list_users, list_vhosts,
list_permissions, add_user NAME PASSWORD, delete_user NAME, change_password NAME PASSWORD,
set_user_tags NAME [TAG...], set_permissions [-p VHOST] USER CONF WRITE READ,
clear_permissions [-p VHOST] USER, add_vhost NAME, delete_vhost NAME, export_definitions FILE
("-" for stdout), import_definitions FILE, close_connection NAME [REASON], purge_queue [-p
VHOST] NAME, delete_queue [-p VHOST] NAME, set_policy [-p VHOST] [--priority N] [--apply-to
queues|classic_queues|quorum_queues|exchanges|all] NAME PATTERN DEFINITION (JSON), clear_policy
[-p VHOST] NAME, list_policies [-p VHOST], cluster_status, and rabbitmq-queues' replica commands:
add_member [-p VHOST] QUEUE NODE, delete_member [-p VHOST] QUEUE NODE, grow NODE all|even
[--vhost-pattern RE] [--queue-pattern RE], shrink NODE (grow and shrink print vhost, name,
size and result per queue, as rabbitmq-queues does), rabbitmq-streams' add_replica [-p VHOST]
STREAM NODE and delete_replica [-p VHOST] STREAM NODE (a replicated stream's replica added or
deleted, ``amqp_broker.clustering.stream_members``), rebalance [quorum|all] (rabbitmq-queues
rebalance: spread the quorum queue leaders evenly over the members not in maintenance; prints
the leaders per member), and rabbitmq-upgrade's drain and revive (maintenance mode of the
member at the first ``--url`` only, never another one: stop serving clients, close their
connections with 320, hand its quorum queue leaderships to other members and take no new
ones; revive undoes it), check_if_node_is_quorum_critical (rabbitmq-queues': exit 1 and the
queues when stopping the member at the first ``--url`` would leave a quorum queue without its
quorum) and await_online_quorum_plus_one [--wait S] (rabbitmq-upgrade's: waits, default 120 s,
until no queue of that member is quorum-critical; exit 1 when the time is up), set_parameter
[-p VHOST] COMPONENT NAME JSON, clear_parameter [-p VHOST] COMPONENT NAME, list_parameters
[-p VHOST], shovel_status, federation_status [--only-down] and
restart_federation_link ID (``ctl_params``), and force_boot --data-dir DIR (rabbitmqctl's:
on a stopped member, its next start serves alone, ``cluster.force_boot``). Lists print tab-separated columns
with a header line, as rabbitmqctl does (default columns: ``COLUMNS``, e.g. name and type for
list_exchanges); any field of the API's objects is a column (e.g. ``list_exchanges vhost name
type``, ``list_queues name type leader members online members_in_sync`` for replicated queues).
``cluster_status`` adds ``replicated_queues``: each replicated queue's vhost, name, type,
leader, members, online and in-sync members (as the node asked knows them). (``--formatter
json`` prints the JSON). Exit codes: 0 ok, 1 the API refused (its reason on stderr, as
rabbitmqctl's "Error:" lines), 2 usage, 69 no member could be reached (rabbitmqctl's
EX_UNAVAILABLE), 70 ``add_user`` of a user that exists (rabbitmqctl's; the user is left as it
was). A client only: the standard library, nothing of the broker imported but ``data_lock`` (itself
the standard library only).
Source: rabbitmqctl(8).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cluster import force_boot

from .. import data_lock
from . import ctl_params
from .ctl_client import DEFAULT_URL, Api, ApiError, MemberCache, learn, parse_urls

__all__ = ["main", "Api", "ApiError", "COLUMNS", "VHOST_LISTS", "URL_ENV"]

#: rabbitmqctl's default columns per list command
COLUMNS = {
    "list_queues": ["name", "messages"],
    "list_exchanges": ["name", "type"],
    "list_bindings": ["source", "destination", "destination_type", "routing_key"],
    "list_connections": ["user", "peer_host", "peer_port", "state"],
    "list_consumers": ["queue.name", "channel_details.name", "consumer_tag", "ack_required",
                       "prefetch_count"],
    "list_users": ["name", "tags"],
    "list_vhosts": ["name"],
    "list_permissions": ["user", "configure", "write", "read"],
    "list_policies": ["vhost", "name", "pattern", "apply-to", "definition", "priority"],
}
#: the fields of each replicated queue ``cluster_status`` shows
_REPLICA_FIELDS = ("vhost", "name", "type", "leader", "members", "online", "members_in_sync")
_PATHS = {"list_queues": "queues", "list_exchanges": "exchanges", "list_bindings": "bindings",
          "list_connections": "connections", "list_consumers": "consumers"}
#: the lists of one vhost (``-p``, default "/"), as rabbitmqctl's; list_connections is not
VHOST_LISTS = ("list_queues", "list_exchanges", "list_bindings", "list_consumers")
#: the environment variable with the management URL(s), as ``--url`` (comma-separated)
URL_ENV = "AMQP_BROKER_CTL_URL"


def _q(value: str) -> str:
    return quote(value, safe="")


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _get(item: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        item = item.get(part) if isinstance(item, dict) else None  # type: ignore[assignment]
    return item


def _print_table(items: list[dict], columns: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps([{c: _get(i, c) for c in columns} for i in items]))
        return
    print("\t".join(columns))
    for item in items:
        print("\t".join(_cell(_get(item, c)) for c in columns))


def build_parser() -> argparse.ArgumentParser:
    """The ``amqp-broker ctl`` parser."""
    p = argparse.ArgumentParser(prog="amqp-broker ctl", description="rabbitmqctl's common "
                                "commands over the management HTTP API")
    p.add_argument("--url", action="append", default=[], metavar="URL",
                   help="a member's management API base URL; repeatable or comma-separated, "
                   f"tried in order, then the members learnt from an earlier answer (default "
                   f"${URL_ENV}, else {DEFAULT_URL})")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a member "
                   "before trying the next (default 10)")
    p.add_argument("-u", "--username", default="guest")
    p.add_argument("--password", default="guest")
    p.add_argument("-p", "--vhost", default=None, help="virtual host (default /); "
                   "list_connections lists every vhost's")
    p.add_argument("--formatter", choices=["table", "json"], default="table")
    p.add_argument("--priority", type=int, default=0, help="set_policy: the policy's priority")
    p.add_argument("--apply-to", default="all", help="set_policy: queues, classic_queues, "
                   "quorum_queues, exchanges or all (default, as rabbitmqctl's)")
    p.add_argument("--vhost-pattern", default=".*", help="grow: the vhosts (regex)")
    p.add_argument("--queue-pattern", default=".*", help="grow: the queues (regex)")
    p.add_argument("--wait", type=float, default=120.0, help="await_online_quorum_plus_one: "
                   "seconds to wait (default 120, as rabbitmq-upgrade)")
    p.add_argument("--data-dir", default=None, help="force_boot: the stopped broker's data "
                   "directory")
    p.add_argument("--only-down", action="store_true", help="federation_status: only the "
                   "links that are not running")
    p.add_argument("command")
    p.add_argument("args", nargs="*")
    return p


def _force_boot(data_dir: str | None) -> int:
    """``force_boot`` (rabbitmqctl's, on a stopped member): its next start founds a cluster of
    one from its own data (``cluster.force_boot``). Exit 0, 2 without ``--data-dir``, 1 when
    the directory cannot be written or a broker runs on it (its ``data_lock``)."""
    if not data_dir:
        print("amqp-broker ctl: force_boot needs --data-dir DIR (the stopped broker's)",
              file=sys.stderr)
        return 2
    if Path(data_dir).is_dir():   # rabbitmqctl's force_boot needs the node stopped, too
        try:
            data_lock.unlock(data_lock.lock(data_dir))
        except data_lock.DataDirInUse as exc:
            print(f"Error: {exc.strerror}: force_boot is for a stopped broker", file=sys.stderr)
            return 1
        except OSError:
            pass   # force_boot.request below says what is wrong with the directory
    try:
        path = force_boot.request(data_dir)
    except OSError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(f"Forcing boot for the broker of {data_dir} ({path}): at its next start it serves "
          "alone; reset the other members before they come back")
    return 0


def _quorum_critical(api: Api) -> list[dict]:
    """The queues the member's health check says would lose their quorum ([] when none)."""
    try:
        api.request("GET", "/health/checks/node-is-quorum-critical")
    except ApiError as exc:
        if exc.status != 503:
            raise
        return list(exc.body.get("queues") or []) if isinstance(exc.body, dict) else [{}]
    return []


def run(api: Api, cmd: str, args: list[str], vhost: str | None, as_json: bool,
        priority: int = 0, apply_to: str = "all",
        patterns: tuple[str, str] = (".*", ".*"), wait: float = 120.0) -> None:
    """Run one command (see module docstring); raises ``ApiError`` or ``ValueError`` (usage).
    ``priority`` and ``apply_to``: set_policy's ``--priority`` and ``--apply-to``;
    ``patterns``: grow's ``--vhost-pattern`` and ``--queue-pattern``; ``wait``:
    await_online_quorum_plus_one's ``--wait`` (seconds)."""
    v = vhost or "/"

    def need(n: int) -> None:
        if len(args) < n:
            raise ValueError(f"{cmd} needs {n} argument(s)")

    if cmd in VHOST_LISTS:
        path = f"/{_PATHS[cmd]}/{_q(v)}"
        _print_table(api.request("GET", path), args or COLUMNS[cmd], as_json)
    elif cmd in _PATHS:
        path = "/" + _PATHS[cmd] + (f"/{_q(vhost)}" if vhost else "")
        _print_table(api.request("GET", path), args or COLUMNS[cmd], as_json)
    elif cmd == "list_users":
        _print_table(api.request("GET", "/users"), args or COLUMNS[cmd], as_json)
    elif cmd == "list_vhosts":
        _print_table(api.request("GET", "/vhosts"), args or COLUMNS[cmd], as_json)
    elif cmd == "list_permissions":
        _print_table(api.request("GET", f"/vhosts/{_q(v)}/permissions"), COLUMNS[cmd], as_json)
    elif cmd == "add_user":
        need(2)
        if _user_exists(api, args[0]):   # rabbitmqctl's add_user never replaces a user
            raise UserExists(args[0])
        api.request("PUT", f"/users/{_q(args[0])}", {"password": args[1], "tags": ""})
    elif cmd == "delete_user":
        need(1)
        api.request("DELETE", f"/users/{_q(args[0])}")
    elif cmd == "change_password":
        need(2)
        user = api.request("GET", f"/users/{_q(args[0])}")
        api.request("PUT", f"/users/{_q(args[0])}", {"password": args[1],
                                                     "tags": user.get("tags", [])})
        print(f"Changing password for user \"{args[0]}\" ...")
    elif cmd == "set_user_tags":
        need(1)
        # the API (as RabbitMQ's) clears the password of a PUT without one: keep the hash
        user = api.request("GET", f"/users/{_q(args[0])}")
        api.request("PUT", f"/users/{_q(args[0])}", {
            "password_hash": user.get("password_hash", ""),
            "hashing_algorithm": user.get("hashing_algorithm", ""), "tags": args[1:]})
    elif cmd == "set_permissions":
        need(4)
        api.request("PUT", f"/permissions/{_q(v)}/{_q(args[0])}",
                    {"configure": args[1], "write": args[2], "read": args[3]})
    elif cmd == "clear_permissions":
        need(1)
        api.request("DELETE", f"/permissions/{_q(v)}/{_q(args[0])}")
    elif cmd == "add_vhost":
        need(1)
        api.request("PUT", f"/vhosts/{_q(args[0])}", {})
    elif cmd == "delete_vhost":
        need(1)
        api.request("DELETE", f"/vhosts/{_q(args[0])}")
    elif cmd == "export_definitions":
        need(1)
        text = json.dumps(api.request("GET", "/definitions"), indent=2)
        if args[0] == "-":
            print(text)
        else:
            with open(args[0], "w", encoding="utf-8") as f:
                f.write(text + "\n")
    elif cmd == "import_definitions":
        need(1)
        with open(args[0], encoding="utf-8") as f:
            api.request("POST", "/definitions", json.load(f))
    elif cmd == "close_connection":
        need(1)
        reason = args[1] if len(args) > 1 else "Closed via amqp-broker ctl"
        api.request("DELETE", f"/connections/{_q(args[0])}", headers={"X-Reason": reason})
    elif cmd == "purge_queue":
        need(1)
        api.request("DELETE", f"/queues/{_q(v)}/{_q(args[0])}/contents")
    elif cmd == "delete_queue":
        need(1)
        api.request("DELETE", f"/queues/{_q(v)}/{_q(args[0])}")
    elif cmd == "set_policy":
        need(3)
        try:
            definition = json.loads(args[2])
        except ValueError as exc:
            raise ValueError(f"set_policy: the definition is not JSON: {exc}") from None
        api.request("PUT", f"/policies/{_q(v)}/{_q(args[0])}",
                    {"pattern": args[1], "definition": definition, "priority": priority,
                     "apply-to": apply_to})
        print(f"Setting policy \"{args[0]}\" for pattern \"{args[1]}\" to \"{args[2]}\" with "
              f"priority \"{priority}\" for vhost \"{v}\" ...")
    elif cmd == "clear_policy":
        need(1)
        api.request("DELETE", f"/policies/{_q(v)}/{_q(args[0])}")
        print(f"Clearing policy \"{args[0]}\" on vhost \"{v}\" ...")
    elif cmd == "list_policies":
        _print_table(api.request("GET", f"/policies/{_q(v)}"), args or COLUMNS[cmd], as_json)
    elif cmd in ctl_params.COMMANDS:
        ctl_params.run(api, cmd, args, v, lambda items, cols: _print_table(items, cols, as_json))
    elif cmd in ("add_member", "delete_member", "add_replica", "delete_replica"):
        need(2)   # rabbitmq-queues add_member / rabbitmq-streams add_replica (and delete_)
        adding = cmd.startswith("add_")
        kind = "quorum" if cmd.endswith("_member") else "stream"
        print(f"{'Adding' if adding else 'Removing'} a replica for queue {args[0]} in vhost {v} "
              f"{'on' if adding else 'from'} node {args[1]}...")
        api.request("POST" if adding else "DELETE", f"/queues/{kind}/{_q(v)}/{_q(args[0])}"
                    f"/replicas/{'add' if adding else 'delete'}", {"node": args[1]})
    elif cmd == "grow":
        need(2)
        print(f"Growing quorum queues matching {patterns[1]!r} in vhosts matching "
              f"{patterns[0]!r} to {args[0]}...")
        _print_table(api.request("POST", f"/queues/quorum/replicas/on/{_q(args[0])}/grow",
                                 {"strategy": args[1], "vhost_pattern": patterns[0],
                                  "queue_pattern": patterns[1]}),
                     ["vhost", "name", "size", "result"], as_json)
    elif cmd == "shrink":
        need(1)
        print(f"Shrinking quorum queues on {args[0]}...")
        _print_table(api.request("DELETE", f"/queues/quorum/replicas/on/{_q(args[0])}/shrink"),
                     ["vhost", "name", "size", "result"], as_json)
    elif cmd in ("drain", "revive"):
        if cmd == "drain":
            print("Will put the node at the given URL into maintenance mode. The node will no "
                  "longer serve any client traffic!")
        else:
            print("Will put the node at the given URL back into service. The node will accept "
                  "client connections again")
        done = api.request("POST", f"/maintenance/{cmd}")
        if as_json:
            print(json.dumps(done))
        elif cmd == "drain":
            print(f"Node {done['node']}: {done['connections_closed']} client connections closed, "
                  f"{done['leaders_transferred']} quorum queue leaders handed over, "
                  f"{done['leaders_remaining']} still here")
        else:
            print(f"Node {done['node']} is back in service")
    elif cmd == "rebalance":
        if args and args[0] not in ("quorum", "all"):
            raise ValueError("rebalance takes 'quorum' or 'all' (quorum queues are the only "
                             "replicated ones)")
        print("Re-balancing leaders of quorum queues...")
        _print_table(api.request("POST", "/rebalance/queues"),
                     ["Node name", "Number of quorum queues"], as_json)
    elif cmd == "check_if_node_is_quorum_critical":
        critical = _quorum_critical(api)
        if critical:
            _print_table(critical, ["virtual_host", "name", "readable_name"], as_json)
            raise ApiError(503, "There are quorum queues that would lose their quorum if the "
                           "target node is shut down")
        print("Node is not quorum-critical: stopping it leaves every quorum queue its quorum")
    elif cmd == "await_online_quorum_plus_one":
        deadline = time.monotonic() + wait
        while _quorum_critical(api):
            if time.monotonic() >= deadline:
                raise ApiError(503, "time is up, no quorum + 1 online replicas came online for "
                               "at least some quorum queues")
            time.sleep(0.2)   # RabbitMQ's sampling interval
        print("Every quorum queue with a replica on the node has quorum + 1 replicas online")
    elif cmd == "cluster_status":
        status = api.request("GET", "/cluster-status")
        nodes = api.request("GET", "/nodes")
        status["running_nodes"] = [n["name"] for n in nodes if n.get("running")]
        status["alarms"] = [{"node": n["name"], "memory": n.get("mem_alarm"),
                             "disk": n.get("disk_free_alarm")} for n in nodes]
        status["replicated_queues"] = [
            {k: q.get(k) for k in _REPLICA_FIELDS}
            for q in api.request("GET", "/queues") if "members" in q]
        print(json.dumps(status, indent=None if as_json else 2))
    else:
        raise ValueError(f"unknown command {cmd!r}")


def _remember(api: Api, cache: MemberCache) -> None:
    """Learn the cluster's members from the member that answered (``ctl_client.learn``) and
    keep them for this URL list; nothing changes when it cannot say."""
    if api.url is None:
        return
    key = ",".join(api.given)
    try:
        members = learn(api)
    except (ApiError, ValueError, AttributeError):
        return
    if members != cache.get(key):
        cache.put(key, members)


class UserExists(Exception):
    """``add_user`` of a user that exists: rabbitmqctl's "User ... already exists", exit 70
    (EX_SOFTWARE); the user keeps its password and tags."""


def _user_exists(api: Api, name: str) -> bool:
    """Whether ``GET /api/users/{name}`` finds the user (404: no). Raises ``ApiError`` else."""
    try:
        api.request("GET", f"/users/{_q(name)}")
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _quiet_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone, so that the interpreter's last flush
    at exit does not print "Exception ignored ... BrokenPipeError" (Python's "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (see module docstring; 1 without a word when stdout's
    reader went away, as in ``ctl list_queues | head -1``)."""
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)  # "-p VHOST" may follow the command
    if args.command == "force_boot":   # on the stopped member's files, no API
        return _force_boot(args.data_dir)
    try:
        urls = parse_urls(args.url or [os.environ.get(URL_ENV) or DEFAULT_URL])
    except ValueError as exc:
        parser.error(str(exc))
    cache = MemberCache()
    # replica changes wait for the committed configuration (the API gives up after 30 s)
    # these act on (or ask about) the first member named, never another that answers instead
    single = args.command in ("drain", "revive", "check_if_node_is_quorum_critical",
                              "await_online_quorum_plus_one")
    api = Api(urls[:1] if single else urls, args.username, args.password, timeout=90.0,
              connect_timeout=args.timeout, fallback=None if single else cache.get(",".join(urls)))
    code = 0
    try:
        run(api, args.command, args.args + (["--only-down"] if args.only_down else []),
            args.vhost, args.formatter == "json", args.priority,
            args.apply_to, (args.vhost_pattern, args.queue_pattern), args.wait)
    except ValueError as exc:
        print(f"amqp-broker ctl: {exc}", file=sys.stderr)
        code = 2
    except UserExists as exc:
        print(f"Error:\nUser \"{exc}\" already exists", file=sys.stderr)
        code = 70
    except ApiError as exc:
        print(f"Error: {exc.reason}", file=sys.stderr)
        code = 69 if exc.status == 0 else 1
    except BrokenPipeError:   # stdout's reader left (`ctl list_queues | head -1`): no "Error:"
        _quiet_stdout()
        code = 1
    except OSError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        code = 1
    if api.url is not None and api.skipped:
        print("amqp-broker ctl: " + "; ".join(f"{u} did not answer ({why})"
                                              for u, why in api.skipped)
              + f"; answered by {api.url}", file=sys.stderr)
    _remember(api, cache)
    return code
