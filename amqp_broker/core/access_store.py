"""Changing users, permissions and vhosts (issue 13): ``broker.access`` (``core.access``),
``broker.vhosts``, the definitions store (definitions.db) and the cluster, in one place (as
``policy_store`` does for policies).

A change made here (management API, ``amqp-broker ctl``, a definitions import) is applied to this
broker, stored, and sent to every other member through
``broker.cluster_hooks.definition_changed(kind, vhost, user, body)`` when the cluster driver offers
it (Cluster.Definition; an empty body deletes). A member applies a peer's change with
``apply_remote`` (stored, not sent on); a joiner gets every vhost, user and permission first in
the leader's replay (``replay_items``). Users travel with their salted password hash
(``rabbit_password_hashing_sha256``), never a password.

Rules (RabbitMQ "Access Control" / "Virtual Hosts"; users, vhosts and permissions are cluster-wide
there): a new vhost gets full permissions for the user who created it (as the management UI
does); deleting a vhost closes its connections (320), deletes its queues (their stored messages
go too) and its permissions; deleting a user deletes its permissions (its open connections stay).
Errors: ``KeyError`` for an unknown user or vhost.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from .access import FULL, Account, Grant
from .vhost import VirtualHost

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["save_user", "delete_user", "save_permission", "delete_permission", "add_vhost",
           "delete_vhost", "apply_remote", "replay_items", "USER", "PERMISSION", "VHOST"]

log = logging.getLogger(__name__)

#: Cluster.Definition kinds.
USER, PERMISSION, VHOST = "user", "permission", "vhost"


def _send(broker: Broker, kind: str, vhost: str, user: str, body: str) -> None:
    send = getattr(broker.cluster_hooks, "definition_changed", None)
    if send is not None:
        send(kind, vhost, user, body)


def _user_body(account: Account) -> str:
    return json.dumps({"password_hash": account.password_hash,
                       "hashing_algorithm": account.hashing_algorithm,
                       "tags": list(account.tags)}, separators=(",", ":"))


def _grant_body(grant: Grant) -> str:
    return json.dumps({"configure": grant.configure, "write": grant.write, "read": grant.read},
                      separators=(",", ":"))


def _vhost_body(description: str, tags: tuple[str, ...]) -> str:
    return json.dumps({"description": description, "tags": list(tags)}, separators=(",", ":"))


def save_user(broker: Broker, account: Account, *, propagate: bool = True) -> None:
    """Create or replace a user (its permissions stay)."""
    broker.access.put_user(account)
    store = broker.durability.definitions
    if store is not None:
        store.save_user(account.name, account.password_hash, account.hashing_algorithm,
                        account.tags)
    if propagate:
        _send(broker, USER, "", account.name, _user_body(account))


def delete_user(broker: Broker, name: str, *, propagate: bool = True) -> bool:
    """Delete a user and its permissions (its open connections stay, as RabbitMQ); False when
    there was none here (still sent on, so a member that had it drops it too)."""
    gone = broker.access.delete_user(name)
    store = broker.durability.definitions
    if store is not None:
        store.delete_user(name)
    if propagate:
        _send(broker, USER, "", name, "")
    return gone


def save_permission(broker: Broker, user: str, vhost: str, grant: Grant, *,
                    propagate: bool = True) -> None:
    """Set ``user``'s permissions in ``vhost``; KeyError for an unknown user or vhost."""
    if user not in broker.access.users:
        raise KeyError(user)
    if vhost not in broker.vhosts:
        raise KeyError(vhost)
    broker.access.set_permission(user, vhost, grant)
    store = broker.durability.definitions
    if store is not None:
        store.save_permission(user, vhost, grant.configure, grant.write, grant.read)
    if propagate:
        _send(broker, PERMISSION, vhost, user, _grant_body(grant))


def delete_permission(broker: Broker, user: str, vhost: str, *, propagate: bool = True) -> bool:
    """Clear ``user``'s permissions in ``vhost``; False when there were none here."""
    gone = broker.access.clear_permission(user, vhost)
    store = broker.durability.definitions
    if store is not None:
        store.delete_permission(user, vhost)
    if propagate:
        _send(broker, PERMISSION, vhost, user, "")
    return gone


def add_vhost(broker: Broker, name: str, description: str = "", tags: tuple[str, ...] = (),
              creator: str | None = None, *, propagate: bool = True) -> bool:
    """Create vhost ``name`` (with the default exchanges) or update its description and tags;
    True when it is new. ``creator`` gets full permissions in a new one."""
    new = name not in broker.vhosts
    if new:
        broker.vhosts[name] = VirtualHost(broker, name)
    broker.vhost_meta[name] = (description, tuple(tags))
    store = broker.durability.definitions
    if store is not None:
        store.save_vhost(name, description, tags)
    if propagate:
        _send(broker, VHOST, name, "", _vhost_body(description, tuple(tags)))
    if new and creator is not None and creator in broker.access.users:
        save_permission(broker, creator, name, FULL, propagate=propagate)
    return new


def delete_vhost(broker: Broker, name: str, *, propagate: bool = True) -> bool:
    """Delete vhost ``name`` and everything in it here; False when there was none (not sent on
    then: a member that has it was told when it was deleted where it existed)."""
    vhost = broker.vhosts.get(name)
    if vhost is None:
        return False
    for conn in list(broker.connections.values()):
        if conn.vhost is vhost:
            conn.close_forced(f"CONNECTION_FORCED - vhost '{name}' is deleted")
    for q in list(vhost.queues.values()):
        vhost.delete_queue(q)
    del broker.vhosts[name]
    broker.vhost_meta.pop(name, None)
    broker.access.vhost_deleted(name)
    for policy in broker.policies.list(name):
        broker.policies.delete(name, policy.name)
    store = broker.durability.definitions
    if store is not None:
        store.delete_vhost(name)
    if propagate:
        _send(broker, VHOST, name, "", "")
    log.info("vhost %r deleted", name)
    return True


def apply_remote(broker: Broker, kind: str, vhost: str, user: str, body: str) -> None:
    """A member's change (Cluster.Definition, see ``cluster.codec``): applied and stored here,
    not sent on. A body that does not decode, or a permission of an unknown user or vhost, is
    logged and ignored."""
    try:
        data = json.loads(body) if body else None
        if data is not None and not isinstance(data, dict):
            raise ValueError("body is not a JSON object")
        if kind == USER:
            if data is None:
                delete_user(broker, user, propagate=False)
            else:
                old = broker.access.users.get(user)
                save_user(broker, Account(user, str(data["password_hash"]),
                                          str(data["hashing_algorithm"]),
                                          tuple(str(t) for t in data.get("tags") or ()),
                                          old.loopback_only if old else False), propagate=False)
        elif kind == PERMISSION:
            if data is None:
                delete_permission(broker, user, vhost, propagate=False)
            else:
                save_permission(broker, user, vhost, Grant(str(data["configure"]),
                                                           str(data["write"]),
                                                           str(data["read"])), propagate=False)
        elif kind == VHOST:
            if data is None:
                delete_vhost(broker, vhost, propagate=False)
            else:
                add_vhost(broker, vhost, str(data.get("description", "")),
                          tuple(str(t) for t in data.get("tags") or ()), propagate=False)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s definition (vhost %r, user %r) from a member ignored: %s", kind, vhost,
                    user, exc)


def replay_items(broker: Broker) -> list[tuple[str, str, str, str]]:
    """Every vhost, then every user, then every permission as ``(kind, vhost, user, body)``:
    what a joiner needs before any declaration (Cluster.Definition in the leader's replay)."""
    out = [(VHOST, name, "", _vhost_body(*broker.vhost_meta.get(name, ("", ()))))
           for name in broker.vhosts]
    out += [(USER, "", a.name, _user_body(a)) for a in broker.access.users.values()]
    out += [(PERMISSION, vhost, user, _grant_body(grant))
            for (user, vhost), grant in broker.access.permissions.items()]
    return out
