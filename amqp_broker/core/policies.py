"""Policies (issue 12): named, per-vhost rules that add queue arguments to the queues whose names
match a regular expression, including classic mirroring (``ha-mode``), served here by the quorum
engine. Pure: no I/O (the store, the HTTP API and the cluster call this module).

A policy is (vhost, name, pattern, apply-to, priority, definition). ``pattern`` is matched with
``re.search`` on the queue name; ``apply-to`` is ``queues`` (every queue), ``classic_queues``,
``quorum_queues``, ``exchanges`` (stored, applied to no queue) or ``all``. Of the policies that
match a queue, the one with the highest priority applies (ties: the smallest name), as RabbitMQ
applies one policy per object.

Applying (``apply_policy``): each definition key becomes its queue argument where the client did
not set that argument (``message-ttl`` -> ``x-message-ttl``, ``expires`` -> ``x-expires``,
``max-length``, ``max-length-bytes``, ``overflow``, ``dead-letter-exchange``,
``dead-letter-routing-key``, and ``delivery-limit`` -- any integer, negative for none as in
RabbitMQ 4.0 -- and ``dead-letter-strategy`` for quorum queues only). ``ha-mode`` on a
durable, non-exclusive, non-auto-delete classic queue of a clustered broker makes it a *mirrored*
queue (unless the client gave an argument quorum queues refuse, ``QUORUM_REFUSES``, e.g.
``x-max-priority``: then it stays classic rather than get a 406): we add
``x-queue-type: quorum`` and the group size (``all``: every member of the view; ``exactly``:
``ha-params`` replicas; ``nodes``: the named members of the view, carried as the hidden
``x-quorum-members`` argument of ``cluster.quorum.config``). Mirrored queues thus keep the quorum
engine's guarantees (Raft), not RabbitMQ's classic mirroring's. ``ha-sync-mode`` is accepted and
has nothing to do (a new Raft replica always catches up). The added keys are listed in the hidden
argument ``x-policy-added`` (and the policy's name in ``x-policy``) so that the equivalence check
of a redeclaration compares only what the client declared (``declared_arguments``).

Re-applying (``reapplied_arguments``): as RabbitMQ, when a policy is set or cleared the common
keys are re-applied to existing classic queues (what their client declared still wins; a key of
a cleared or no longer matching policy goes away). Deviations: an existing queue never changes
type (``ha-mode`` does not mirror a classic queue already declared; RabbitMQ 3.x would start
mirrors), and existing quorum queues keep the configuration of their declaration (it is part of
their replicated state). Sources: RabbitMQ "Policies", "Classic Queue Mirroring" (ha-mode, ha-params,
ha-sync-mode), ``rabbit_policy`` / ``rabbit_mirror_queue_misc`` validation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Policy", "Policies", "PolicyError", "APPLY_TO", "POLICY_ARG", "ADDED_ARG",
           "QUORUM_REFUSES",
           "MEMBERS_ARG", "make_policy", "validate_definition", "apply_policy",
           "declared_arguments", "effective_definition", "queue_kind", "reapplied_arguments"]

APPLY_TO = ("queues", "classic_queues", "quorum_queues", "exchanges", "all")
POLICY_ARG = "x-policy"
ADDED_ARG = "x-policy-added"
MEMBERS_ARG = "x-quorum-members"   # cluster.quorum.config.MEMBERS_ARG (core does not import it)
_GROUP_SIZE_ARG = "x-quorum-initial-group-size"

#: Definition keys that map to a queue argument (the argument is "x-" + the key).
_QUEUE_KEYS = ("message-ttl", "expires", "max-length", "max-length-bytes", "overflow",
               "dead-letter-exchange", "dead-letter-routing-key", "delivery-limit",
               "dead-letter-strategy")
#: Keys of quorum queues only (RabbitMQ 4.0: delivery-limit, dead-letter-strategy).
_QUORUM_KEYS = ("delivery-limit", "dead-letter-strategy")
_INT_KEYS = ("message-ttl", "expires", "max-length", "max-length-bytes", "delivery-limit",
             "ha-sync-batch-size")
_STR_KEYS = ("overflow", "dead-letter-exchange", "dead-letter-routing-key", "ha-mode",
             "ha-sync-mode", "ha-promote-on-shutdown", "ha-promote-on-failure",
             "alternate-exchange", "queue-mode", "queue-master-locator",
             "dead-letter-strategy")
#: The federation plugin's keys (``amqp_broker.federation``: which upstreams federate the
#: matching exchanges and queues; they add no queue argument). One of them per policy.
_FEDERATION_KEYS = ("federation-upstream", "federation-upstream-set")
_KNOWN = frozenset(_INT_KEYS + _STR_KEYS + _FEDERATION_KEYS + ("ha-params",))
#: Client arguments a quorum queue refuses (``cluster.quorum.config.UNSUPPORTED``): a queue
#: declared with one of them is not mirrored (it stays classic rather than get a 406).
QUORUM_REFUSES = ("x-max-priority", "x-queue-mode", "x-max-age", "x-max-segment-size",
                  "x-initial-cluster-size", "x-stream-max-segment-size-bytes",
                  "x-queue-master-locator", "x-max-in-memory-length", "x-max-in-memory-bytes")


class PolicyError(ValueError):
    """A policy that cannot be stored: the reason is the text of the management API's 400
    (``{"error": "bad_request", "reason": ...}``)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """One policy. ``definition``: the JSON object of keys (see the module docstring);
    ``priority``: an integer, higher wins."""

    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    apply_to: str = "queues"

    def to_json(self) -> dict[str, Any]:
        """The management API's shape (RabbitMQ 3.x ``/api/policies``)."""
        return {"vhost": self.vhost, "name": self.name, "pattern": self.pattern,
                "apply-to": self.apply_to, "definition": dict(self.definition),
                "priority": self.priority}

    def encode(self) -> str:
        """One JSON text (the cluster's Policy method and the store carry it)."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Policy:
        """The inverse of ``encode``; ``PolicyError`` for a text that is not a valid policy."""
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise PolicyError(f"not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise PolicyError("a policy is a JSON object")
        return make_policy(str(body.get("vhost", "/")), str(body.get("name", "")), body)


def validate_definition(definition: Any) -> dict[str, Any]:
    """Check a policy definition as RabbitMQ does; returns it as a dict. Raises ``PolicyError``:
    not an object, empty, an unknown key, a value of the wrong type, ``ha-mode`` not
    all/exactly/nodes, ``ha-params`` missing for exactly/nodes, given for all, not a positive
    integer (exactly) or not a non-empty list of names (nodes), ``ha-params`` without
    ``ha-mode``, both federation keys or a federation key that is not a string,
    ``ha-sync-mode`` not automatic/manual, ``overflow`` not drop-head /
    reject-publish / reject-publish-dlx, ``dead-letter-strategy`` not at-most-once /
    at-least-once. ``delivery-limit`` may be negative (RabbitMQ 4.0: no limit)."""
    if not isinstance(definition, dict) or not definition:
        raise PolicyError("Validation failed\n\ndefinition must be a non-empty JSON object")
    unknown = sorted(k for k in definition if k not in _KNOWN)
    if unknown:
        raise PolicyError(f"Validation failed\n\n{unknown} are not recognised policy settings")
    for key in _INT_KEYS:
        value = definition.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or (value < 0 and key != "delivery-limit")):
            raise PolicyError(f"Validation failed\n\n{key} must be a non-negative integer, got "
                              f"{value!r}")
    for key in _STR_KEYS:
        if key in definition and not isinstance(definition[key], str):
            raise PolicyError(f"Validation failed\n\n{key} must be a string")
    federation = [k for k in _FEDERATION_KEYS if k in definition]
    if len(federation) > 1:   # RabbitMQ's rabbit_federation_parameters:validate_policy/1
        raise PolicyError("Validation failed\n\ncannot specify federation-upstream, "
                          "federation-upstream-set or federation-upstream-pattern together")
    for key in federation:
        if not isinstance(definition[key], str):
            what = "upstream set name" if key.endswith("set") else "upstream name"
            raise PolicyError(f"Validation failed\n\n{definition[key]!r} is not a valid "
                              f"federation {what}")
    if definition.get("overflow") not in (None, "drop-head", "reject-publish",
                                          "reject-publish-dlx"):
        raise PolicyError(f"Validation failed\n\n{definition['overflow']!r} is not a valid "
                          f"overflow value")
    if definition.get("dead-letter-strategy") not in (None, "at-most-once", "at-least-once"):
        raise PolicyError(f"Validation failed\n\n{definition['dead-letter-strategy']!r} is not "
                          f"a valid dead letter strategy")
    if definition.get("ha-sync-mode") not in (None, "automatic", "manual"):
        raise PolicyError(f"Validation failed\n\nha-sync-mode {definition['ha-sync-mode']!r} is "
                          f"not a valid sync mode")
    mode, params = definition.get("ha-mode"), definition.get("ha-params")
    if mode is None:
        if "ha-params" in definition:
            raise PolicyError("Validation failed\n\nha-params are set but ha-mode is not")
        return dict(definition)
    if mode not in ("all", "exactly", "nodes"):
        raise PolicyError(f"Validation failed\n\n{mode!r} is not a valid ha-mode value")
    if mode == "all" and "ha-params" in definition:
        raise PolicyError("Validation failed\n\nha-mode all does not take ha-params")
    if mode == "exactly" and (not isinstance(params, int) or isinstance(params, bool)
                              or params < 1):
        raise PolicyError(f"Validation failed\n\nha-mode exactly needs ha-params, a positive "
                          f"integer, got {params!r}")
    if mode == "nodes" and (not isinstance(params, list) or not params
                            or not all(isinstance(p, str) and p for p in params)):
        raise PolicyError(f"Validation failed\n\nha-mode nodes needs ha-params, a non-empty list "
                          f"of node names, got {params!r}")
    return dict(definition)


def make_policy(vhost: str, name: str, body: Mapping[str, Any]) -> Policy:
    """A validated policy from the management API's PUT body (``pattern``, ``definition``,
    optional ``priority`` (default 0), ``apply-to`` (default ``all``, as rabbit_policy's: queues
    and exchanges)). Raises
    ``PolicyError`` (400) for a missing key, a pattern that is not a regular expression, a bad
    priority or apply-to, or a bad definition (``validate_definition``)."""
    if not name:
        raise PolicyError("a policy needs a name")
    for key in ("pattern", "definition"):
        if key not in body:
            raise PolicyError(f"key_missing: {key}")
    pattern = body["pattern"]
    if not isinstance(pattern, str):
        raise PolicyError("pattern must be a string")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise PolicyError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
    priority = body.get("priority", 0)
    if isinstance(priority, str) and priority.lstrip("-").isdigit():
        priority = int(priority)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise PolicyError(f"priority must be an integer, got {priority!r}")
    apply_to = body.get("apply-to", "all")
    if apply_to not in APPLY_TO:
        raise PolicyError(f"apply-to {apply_to!r} is not one of {', '.join(APPLY_TO)}")
    return Policy(vhost, name, pattern, validate_definition(body["definition"]), priority,
                  apply_to)


def queue_kind(arguments: Mapping[str, Any] | None) -> str:
    """``classic``, ``quorum`` or ``stream``: the type the client declared."""
    return str((arguments or {}).get("x-queue-type") or "classic")


class Policies:
    """The policies of every vhost, by (vhost, name). Not thread-safe (the broker's loop)."""

    def __init__(self, policies: Iterable[Policy] = ()) -> None:
        self.by_key: dict[tuple[str, str], Policy] = {}
        for p in policies:
            self.put(p)

    def put(self, policy: Policy) -> bool:
        """Add or replace ``policy``; True when it replaced one of the same name."""
        key = (policy.vhost, policy.name)
        existed = key in self.by_key
        self.by_key[key] = policy
        return existed

    def delete(self, vhost: str, name: str) -> bool:
        """Remove a policy; False when there was none."""
        return self.by_key.pop((vhost, name), None) is not None

    def get(self, vhost: str, name: str) -> Policy | None:
        """The policy ``name`` of ``vhost``, or None."""
        return self.by_key.get((vhost, name))

    def list(self, vhost: str | None = None) -> list[Policy]:
        """The policies (of ``vhost`` when given), sorted by vhost and name."""
        return [p for k, p in sorted(self.by_key.items()) if vhost is None or k[0] == vhost]

    def match(self, vhost: str, queue: str, kind: str = "classic") -> Policy | None:
        """The policy that applies to queue ``queue`` of type ``kind`` in ``vhost``: the
        highest-priority one whose pattern ``re.search``-matches the name and whose apply-to
        takes queues of that type; None when none does."""
        best: Policy | None = None
        for p in self.list(vhost):
            if p.apply_to == "exchanges" or (p.apply_to == "classic_queues" and kind != "classic") \
                    or (p.apply_to == "quorum_queues" and kind != "quorum"):
                continue
            if re.search(p.pattern, queue) is None:
                continue
            if best is None or p.priority > best.priority:
                best = p
        return best


def _mirror_arguments(definition: Mapping[str, Any], view: Iterable[str] | None
                      ) -> dict[str, Any]:
    """What ``ha-mode`` adds: the quorum type, the group size and (``nodes``) the members.
    Empty when there is no cluster engine (``view`` None): a single RabbitMQ node with an ha
    policy also keeps a plain classic queue."""
    if view is None:
        return {}
    members = sorted(set(view))
    mode, params = definition.get("ha-mode"), definition.get("ha-params")
    if mode == "all":
        return {"x-queue-type": "quorum", _GROUP_SIZE_ARG: max(1, len(members))}
    if mode == "exactly":
        return {"x-queue-type": "quorum", _GROUP_SIZE_ARG: int(params)}  # type: ignore[arg-type]
    chosen = sorted(n for n in params or () if n in members)  # nodes: those in the view
    if not chosen:
        # RabbitMQ: none of the nodes is up -> the queue lives where it was declared
        return {"x-queue-type": "quorum", _GROUP_SIZE_ARG: 1}
    return {"x-queue-type": "quorum", _GROUP_SIZE_ARG: len(chosen),
            MEMBERS_ARG: ",".join(chosen)}


def apply_policy(policies: Policies | None, vhost: str, queue: str,
                 arguments: Mapping[str, Any] | None, *, durable: bool, exclusive: bool,
                 auto_delete: bool, view: Iterable[str] | None = None) -> dict[str, Any] | None:
    """The arguments queue ``queue`` is made with: the client's ``arguments`` plus those of the
    matching policy (see the module docstring), with ``x-policy`` and ``x-policy-added``; the
    client's own ``arguments`` (possibly None) unchanged when no policy applies or the
    arguments already carry a policy's marks (a declaration from another member). ``view``: the
    cluster members' names (None: no quorum engine, ``ha-mode`` is ignored)."""
    args = dict(arguments or {})
    if policies is None or POLICY_ARG in args:
        return None if arguments is None else args
    kind = queue_kind(args)
    policy = policies.match(vhost, queue, kind)
    if policy is None:
        return None if arguments is None else args
    wanted: dict[str, Any] = {}
    d = policy.definition
    for key in _QUEUE_KEYS:
        if key in d and (key not in _QUORUM_KEYS or kind == "quorum"):
            wanted["x-" + key] = d[key]
    if "ha-mode" in d and kind == "classic" and durable and not exclusive and not auto_delete \
            and not any(k in args for k in QUORUM_REFUSES) \
            and args.get("x-overflow") != "reject-publish-dlx":
        mirror = _mirror_arguments(d, view)
        if mirror and args.get("x-queue-type") == "classic":
            del args["x-queue-type"]   # an explicit classic is mirrored too (equivalent to none)
        if mirror and wanted.get("x-overflow") == "reject-publish-dlx":
            del wanted["x-overflow"]   # quorum queues refuse it (406): keep the mirroring
        wanted.update(mirror)
        if "x-delivery-limit" not in wanted and "delivery-limit" in d and mirror:
            wanted["x-delivery-limit"] = d["delivery-limit"]
    added = [k for k in wanted if k not in args]
    for k in added:
        args[k] = wanted[k]
    args[POLICY_ARG] = policy.name
    args[ADDED_ARG] = ",".join(added)
    return args


def reapplied_arguments(policies: Policies | None, vhost: str, queue: str,
                        arguments: Mapping[str, Any] | None, *, durable: bool, exclusive: bool,
                        auto_delete: bool) -> dict[str, Any]:
    """The arguments of existing queue ``queue`` (made with ``arguments``) once the policies
    changed: what its client declared plus the keys of the policy that matches now (see
    ``apply_policy``; no ``ha-mode``: an existing queue keeps its type), marks included."""
    declared = declared_arguments(arguments)
    return apply_policy(policies, vhost, queue, declared, durable=durable, exclusive=exclusive,
                        auto_delete=auto_delete) or {}


def declared_arguments(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the client declared: ``arguments`` without the keys a policy added and without the
    policy marks (the equivalence check of a redeclaration compares these)."""
    args = dict(arguments or {})
    added = str(args.pop(ADDED_ARG, "") or "")
    if args.pop(POLICY_ARG, None) is None:
        return args
    for key in filter(None, added.split(",")):
        args.pop(key, None)
    if args.get(MEMBERS_ARG) is not None and "x-queue-type" not in args:
        args.pop(MEMBERS_ARG, None)
        args.pop("x-quorum-group", None)
    return args


def effective_definition(arguments: Mapping[str, Any] | None, policies: Policies | None,
                         vhost: str) -> tuple[str | None, dict[str, Any]]:
    """The name of the policy applied to a queue made with ``arguments`` and that policy's
    definition as it is now (empty when it was cleared since): the management API's
    ``policy`` and ``effective_policy_definition``."""
    name = (arguments or {}).get(POLICY_ARG)
    if not name:
        return None, {}
    policy = policies.get(vhost, str(name)) if policies is not None else None
    return str(name), dict(policy.definition) if policy is not None else {}
