"""The definitions checker (issue 23): every member's definitions in, counts out. Pure (no I/O).

Two questions after a run of the ``definitions`` workload (:mod:`interop_tests.faults.defs_workload`)
has healed:

- **divergent**: names whose definition differs between members. Each member's definitions are
  its ``GET /api/definitions`` export (RabbitMQ's format: users, vhosts, permissions, policies,
  durable queues, exchanges and bindings; "Definitions" guide, "Management HTTP API"), flattened
  by :func:`keyed` into ``{name: value}``, e.g. ``queue:/:q1 -> {"x-max-length": 10}``,
  ``user:u0 -> "<password hash>"``, ``binding:/:x0>queue:q1:a -> {}``. A name counts once when
  one member lacks it or holds another value (:func:`divergent`).
- **lost_changes**: acknowledged changes that the final definitions do not show, although no
  later change could have undone them (:func:`lost_changes`, over the history's ``define``
  events). Jepsen's "every acknowledged write is visible unless overwritten", per name.
- **misattributed** answers: a refusal whose text is about another name than the change's
  (:func:`misattributed`; seen on the broadcast design: an ``exchange.declare`` answered with a
  queue's 406). A run with any is not valid; they are listed in the run's line.

A ``define`` event (``interop_tests.faults.history``): ``{"t", "op": "define", "type":
"invoke"|"ok"|"fail"|"info", "n": int (one per operation), "client", "broker", "action":
"put"|"delete", "key": name, "value"?: JSON value (puts)}``. ``fail`` is a refusal (the change
did not happen: a 404, 406, 405...); ``info`` an unknown outcome (connection lost, timeout).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ABSENT", "DefinitionsResult", "check_definitions", "divergent", "keyed",
           "lost_changes", "misattributed", "removes"]

SAMPLE = 20   # how many names of each kind a result keeps for the report
ABSENT = None  # the "value" of a name a member does not hold


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def keyed(defs: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A ``GET /api/definitions`` document flattened to ``{name: value}`` (see the module
    docstring); only names whose entity name starts with ``prefix`` (users, queues, exchanges,
    policies, vhosts; a permission by its user, a binding by its source or destination).
    Missing sections count as empty. Raises ``KeyError`` for an entry without its name fields."""
    out: dict[str, Any] = {}

    def mine(*names: str) -> bool:
        return any(n.startswith(prefix) for n in names)

    for u in defs.get("users") or []:
        if mine(u["name"]):
            out[f"user:{u['name']}"] = [u.get("password_hash"), sorted(_tags(u.get("tags")))]
    for v in defs.get("vhosts") or []:
        if mine(v["name"]):
            out[f"vhost:{v['name']}"] = {}
    for p in defs.get("permissions") or []:
        if mine(p["user"], p["vhost"]):
            out[f"permission:{p['vhost']}:{p['user']}"] = [p.get("configure"), p.get("write"),
                                                           p.get("read")]
    for p in defs.get("policies") or []:
        if mine(p["name"], p["vhost"]):
            out[f"policy:{p['vhost']}:{p['name']}"] = {
                "pattern": p.get("pattern"), "definition": p.get("definition"),
                "priority": p.get("priority"), "apply-to": p.get("apply-to")}
    for q in defs.get("queues") or []:
        if mine(q["name"], q["vhost"]):
            out[f"queue:{q['vhost']}:{q['name']}"] = q.get("arguments") or {}
    for x in defs.get("exchanges") or []:
        if mine(x["name"], x["vhost"]):
            out[f"exchange:{x['vhost']}:{x['name']}"] = {"type": x.get("type"),
                                                         "arguments": x.get("arguments") or {}}
    for b in defs.get("bindings") or []:
        if mine(b["source"], b["destination"], b["vhost"]):
            out[binding_key(b["vhost"], b["source"], b["destination_type"], b["destination"],
                            b.get("routing_key", ""))] = b.get("arguments") or {}
    return out


def binding_key(vhost: str, source: str, kind: str, destination: str, routing_key: str) -> str:
    """The name of a binding: ``binding:<vhost>:<source>><kind>:<destination>:<routing key>``."""
    return f"binding:{vhost}:{source}>{kind}:{destination}:{routing_key}"


def _tags(tags: Any) -> list[str]:
    if isinstance(tags, str):
        return [t for t in tags.replace(" ", ",").split(",") if t]
    return [str(t) for t in tags or []]


def divergent(per_member: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Sorted names (of :func:`keyed` maps, one per member) that some member lacks or holds with
    another value than the others. ``{}`` or one member: ``[]``."""
    names = set().union(*per_member.values()) if per_member else set()
    out = []
    for name in names:
        values = {_canon(m.get(name, ABSENT)) for m in per_member.values()}
        if len(values) > 1:
            out.append(name)
    return sorted(out)


def removes(key: str, other: str) -> bool:
    """True when deleting ``key`` also deletes ``other`` (RabbitMQ's cascades: a queue's or an
    exchange's bindings go with it, a user's permissions go with the user, everything in a vhost
    goes with the vhost) or ``key == other``."""
    if key == other:
        return True
    kind, _, rest = key.partition(":")
    okind, _, orest = other.partition(":")
    if kind == "vhost":
        return okind in ("queue", "exchange", "binding", "policy", "permission") and \
            orest.startswith(rest + ":")
    if kind == "user":
        return okind == "permission" and orest.split(":", 1)[1] == rest
    if okind != "binding" or kind not in ("queue", "exchange"):
        return False
    vhost, _, name = rest.partition(":")
    bvhost, _, brest = orest.partition(":")
    source, _, dest = brest.partition(">")
    dkind, _, dname_rk = dest.partition(":")
    dname = dname_rk.rsplit(":", 1)[0]
    if bvhost != vhost:
        return False
    if kind == "queue":
        return dkind == "queue" and dname == name
    return source == name or (dkind == "exchange" and dname == name)


@dataclass(frozen=True)
class _Op:
    action: str
    key: str
    value: Any
    invoke: float
    end: float         # ok time; inf for an unknown outcome
    acked: bool


def _ops(events: Iterable[Mapping[str, Any]]) -> list[_Op]:
    started: dict[Any, Mapping[str, Any]] = {}
    out = []
    for e in events:
        if e.get("op") != "define":
            continue
        if e["type"] == "invoke":
            started[e["n"]] = e
            continue
        inv = started.pop(e["n"], None)
        if inv is None or e["type"] == "fail":
            continue
        acked = e["type"] == "ok"
        out.append(_Op(inv["action"], inv["key"], inv.get("value"), inv["t"],
                       e["t"] if acked else float("inf"), acked))
    for inv in started.values():   # never answered: unknown
        out.append(_Op(inv["action"], inv["key"], inv.get("value"), inv["t"], float("inf"),
                       False))
    return out


def _explains(op: _Op, key: str, state: Any) -> bool:
    if op.action == "delete":
        return state is ABSENT and removes(op.key, key)
    return op.key == key and state is not ABSENT and _canon(state) == _canon(op.value)


def _touches(op: _Op, key: str) -> bool:
    return op.key == key if op.action == "put" else removes(op.key, key)


def lost_changes(events: Iterable[Mapping[str, Any]],
                 per_member: Mapping[str, Mapping[str, Any]],
                 initial: Mapping[str, Any] | None = None) -> list[str]:
    """Names (``member/name``) whose final state on a member no change can explain.

    The changes of a name are the ``define`` operations that touch it (a put of it, a delete of
    it or of what it goes with: :func:`removes`) and did not fail. One is *superseded* when an
    acknowledged change of the same name was invoked after it was acknowledged (it was certainly
    earlier). The final state (present with a value, or absent) must be what some change that
    is not superseded leaves; with no change at all, the ``initial`` state (``{}``: absent).
    So an acknowledged declare is lost when the name is absent at the end and no delete could
    have come after it; an acknowledged delete is lost when the name is back and no put could
    have come after it. Unknown outcomes (``info``) count as possibly applied at any time after
    their invoke; a name no change was acknowledged for may also keep its ``initial`` state."""
    ops = _ops(events)
    initial = initial or {}
    names: set[str] = {op.key for op in ops if op.action == "put"}
    for m in per_member.values():
        names |= set(m)
    by_name: dict[str, list[_Op]] = defaultdict(list)
    for name in names:
        by_name[name] = [op for op in ops if _touches(op, name)]
    lost = []
    for member, state in sorted(per_member.items()):
        for name in sorted(names):
            touching = by_name[name]
            if not touching:   # not the workload's: nothing to explain
                continue
            live = [op for op in touching if not _before(op, touching)]
            final = state.get(name, ABSENT)
            if not any(_explains(op, name, final) for op in live) and \
                    not (not any(op.acked for op in touching)
                         and _canon(final) == _canon(initial.get(name, ABSENT))):
                lost.append(f"{member}/{name}")
    return lost


def _before(op: _Op, others: list[_Op]) -> bool:
    """True when an acknowledged change in ``others`` was invoked after ``op`` was acked."""
    return any(o.acked and o.invoke > op.end for o in others)


@dataclass(frozen=True)
class DefinitionsResult:
    """The counts of a definitions run: ``changes`` attempted, ``acked`` (Ok), ``refused``
    (an AMQP or HTTP error answer), ``unknown`` (no answer), ``divergent`` names and
    ``lost_changes`` (:func:`lost_changes`), with samples of at most ``SAMPLE`` of each;
    ``members`` whose definitions were read, ``unread`` those that did not answer."""

    changes: int
    acked: int
    refused: int
    unknown: int
    divergent: int
    lost_changes: int
    members: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()
    divergent_names: tuple[str, ...] = field(default=())
    lost_names: tuple[str, ...] = field(default=())
    misattributed: tuple[str, ...] = field(default=())

    @property
    def valid(self) -> bool:
        """True when every member answered, none differs, nothing acknowledged is lost and no
        refusal was about another name than the change's."""
        return (self.divergent == 0 and self.lost_changes == 0 and not self.unread
                and not self.misattributed)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready counts."""
        return {"changes": self.changes, "acked": self.acked, "refused": self.refused,
                "unknown": self.unknown, "divergent": self.divergent,
                "lost_changes": self.lost_changes, "members": list(self.members),
                "unread": list(self.unread),
                "divergent_names": list(self.divergent_names),
                "lost_names": list(self.lost_names),
                "misattributed": list(self.misattributed), "valid": self.valid}


def check_definitions(events: Iterable[Mapping[str, Any]],
                      per_member: Mapping[str, Mapping[str, Any]],
                      unread: Iterable[str] = ()) -> DefinitionsResult:
    """Count a definitions run: ``events`` (its history), ``per_member`` (each member's
    :func:`keyed` definitions, read after the heal), ``unread`` (members that did not answer)."""
    events = list(events)
    kinds: dict[Any, str] = {}
    for e in events:
        if e.get("op") == "define":
            kinds[e["n"]] = e["type"] if e["type"] != "invoke" else kinds.get(e["n"], "info")
    diff = divergent(per_member)
    lost = lost_changes(events, per_member)
    wrong = misattributed(events)
    return DefinitionsResult(
        changes=len(kinds), acked=sum(1 for k in kinds.values() if k == "ok"),
        refused=sum(1 for k in kinds.values() if k == "fail"),
        unknown=sum(1 for k in kinds.values() if k == "info"),
        divergent=len(diff), lost_changes=len(lost), members=tuple(sorted(per_member)),
        unread=tuple(sorted(unread)),
        divergent_names=tuple(diff[:SAMPLE]), lost_names=tuple(lost[:SAMPLE]),
        misattributed=tuple(wrong[:SAMPLE]))


_NAMED = re.compile(r"for (queue|exchange) '([^']*)' in vhost '([^']*)'")


def misattributed(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Refusals whose reply text names another queue or exchange than the change's own
    (``"<key>: <reply>"``): an answer that belongs to another client's change (RabbitMQ's 406
    and 404 texts name the entity: "inequivalent arg 'x' for queue 'q' in vhost '/'"). A
    binding's refusal may name its exchange or its queue."""
    keys: dict[Any, str] = {}
    out = []
    for e in events:
        if e.get("op") != "define":
            continue
        if e["type"] == "invoke":
            keys[e["n"]] = e["key"]
        elif e["type"] == "fail" and e["n"] in keys:
            found = _NAMED.search(str(e.get("error", "")))
            key = keys[e["n"]]
            if found is None:
                continue
            kind, name, vhost = found.groups()
            if f"{kind}:{vhost}:{name}" != key and not (
                    key.startswith("binding:") and _in_binding(key, kind, vhost, name)):
                out.append(f"{key}: {e['error']}")
    return out


def _in_binding(key: str, kind: str, vhost: str, name: str) -> bool:
    bvhost, _, rest = key[len("binding:"):].partition(":")
    source, _, dest = rest.partition(">")
    dkind, _, dname_rk = dest.partition(":")
    dname = dname_rk.rsplit(":", 1)[0]
    return bvhost == vhost and ((kind == "exchange" and source == name)
                                or (kind == dkind and dname == name))
