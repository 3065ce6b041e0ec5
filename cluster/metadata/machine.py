"""``MetadataMachine``: the cluster's metadata state machine. Every member applies the committed
commands of the metadata log in log order and so decides every outcome alike.

Owns dispatching a command to its rule, the vhost / user / permission / policy commands (the
rules of ``amqp_broker.core.access_store`` and ``policy_store``, without their I/O; runtime
parameters are ``parameters``'), turning a
refusal into ``Refused``, and the Raft state machine interface: ``apply``, ``snapshot``,
``restore``, plus ``configure`` for the configuration in force (Raft CONFIG entries are not
commands; the driver tells the machine each one it applies). Exchanges, queues and bindings are
``topology``'s. Pure and deterministic: no I/O, no clock, no randomness; the same commands from
the same state give the same outcomes and byte-identical snapshots on every member.
Must not know: Raft's internals, sockets, the broker's objects.

Sources: RabbitMQ "Metadata store" (Khepri: one Raft-replicated store decides every
definition), "Access Control", "Virtual Hosts", "Policies"; Raft paper §5.3 ("apply to state
machine"), §7 (snapshots).
"""

from __future__ import annotations

from amqp_broker.core.access import FULL, Account, Grant
from amqp_broker.core.policies import PolicyError, make_policy, reapplied_arguments
from amqp_broker.protocol import constants as c
from amqp_broker.protocol.errors import AMQPException, ConnectionException
from queues.arguments import parse_arguments
from queues.errors import InvalidArgument

from . import commands as m
from . import parameters as params
from . import snapshot as snap
from . import topology as topo
from . import views
from .codec import decode
from .outcomes import INTERNAL_ERROR, Deleted, Outcome, Refused, Stored
from .state import MetadataState, VhostState
from .wire import MalformedMetadata

__all__ = ["MetadataMachine", "BAD_REQUEST"]

#: ``Refused.code`` for a policy the management API refuses as 400 bad_request.
BAD_REQUEST = 400


class MetadataMachine:
    """The state (``state``: a ``state.MetadataState``) and the rules that change it.

    ``apply(index, command) -> Outcome`` never raises for a command (a malformed entry, given as
    bytes to ``apply_entry``, is refused too); ``snapshot() -> bytes``; ``restore(bytes)``
    raises ``wire.MalformedMetadata`` for bytes that are no snapshot (the state is then
    unchanged)."""

    def __init__(self) -> None:
        self.state = MetadataState()

    # ------------------------------------------------------------------ Raft's interface
    def configure(self, members: tuple[str, ...] | list[str]) -> None:
        """The configuration in force is now ``members`` (a committed Raft CONFIG entry, or a
        snapshot's members): new quorum queues choose their replicas among them."""
        self.state.members = tuple(sorted(set(members)))

    def apply_entry(self, index: int, data: bytes) -> Outcome:
        """Decode and apply the committed entry ``data`` at log ``index``; an entry that is no
        command changes nothing and is ``Refused(541, ...)`` (on every member alike)."""
        try:
            command = decode(data)
        except MalformedMetadata as exc:
            return Refused(INTERNAL_ERROR, f"INTERNAL_ERROR - malformed metadata command: {exc}",
                           True)
        return self.apply(index, command)

    def apply(self, index: int, command: m.Command) -> Outcome:
        """Apply ``command``, committed at log ``index``; returns what its client is answered.
        A refusal changes nothing."""
        try:
            return self._dispatch(index, command)
        except AMQPException as exc:
            return Refused(exc.reply_code, exc.reply_text, isinstance(exc, ConnectionException))

    def snapshot(self) -> bytes:
        """The canonical bytes of the whole state (``snapshot`` module)."""
        return snap.encode(self.state)

    def restore(self, data: bytes) -> None:
        """Replace the state with a ``snapshot()``'s (``b""``: the empty state). Raises
        ``MalformedMetadata`` for other bytes, leaving the state as it was."""
        self.state = snap.decode(data)

    # ------------------------------------------------------------------ queries
    def vhost(self, name: str) -> VhostState | None:
        """Vhost ``name``'s state, or None."""
        return self.state.vhosts.get(name)

    # ------------------------------------------------------------------ dispatch
    def _dispatch(self, index: int, cmd: m.Command) -> Outcome:
        state = self.state
        if isinstance(cmd, m.MemberGone):
            return topo.member_gone(state, cmd)
        if isinstance(cmd, m.DeclareExchange | m.DeleteExchange | m.DeclareQueue
                      | m.DeleteQueue | m.Bind | m.Unbind):
            vh = state.vhosts.get(cmd.vhost)
            if vh is None:   # Connection.Open's answer (RabbitMQ closes the connection)
                raise ConnectionException(c.NOT_ALLOWED,
                                          f"NOT_ALLOWED - vhost {cmd.vhost} not found")
            if isinstance(cmd, m.DeclareExchange):
                return topo.declare_exchange(vh, cmd)
            if isinstance(cmd, m.DeleteExchange):
                return topo.delete_exchange(vh, cmd)
            if isinstance(cmd, m.DeclareQueue):
                return topo.declare_queue(state, vh, cmd, index)
            if isinstance(cmd, m.DeleteQueue):
                return topo.delete_queue(vh, cmd)
            if isinstance(cmd, m.Bind):
                return topo.bind(vh, cmd)
            return topo.unbind(vh, cmd)
        if isinstance(cmd, m.SetPolicy | m.ClearPolicy):
            return self._policy(cmd)
        if isinstance(cmd, m.SetParameter):
            return params.set_parameter(state, cmd)
        if isinstance(cmd, m.ClearParameter):
            return params.clear_parameter(state, cmd)
        if isinstance(cmd, m.InstallView):
            return views.install_view(state, cmd)
        if isinstance(cmd, m.AddVhost | m.DeleteVhost):
            return self._vhost(cmd)
        return self._access(cmd)

    # ------------------------------------------------------------------ policies
    def _policy(self, cmd: m.SetPolicy | m.ClearPolicy) -> Outcome:
        """Set or clear a policy (``policy_store``): 404 for a missing vhost, 400 for a policy
        ``core.policies.make_policy`` refuses; re-applied to the vhost's classic queues."""
        state = self.state
        vh = state.vhosts.get(cmd.vhost)
        if isinstance(cmd, m.ClearPolicy):
            gone = state.policies.delete(cmd.vhost, cmd.name)
            if gone and vh is not None:
                self._reapply(vh)
            return Deleted(gone)
        if vh is None:
            return Refused(c.NOT_FOUND, f"NOT_FOUND - no vhost '{cmd.vhost}'")
        try:
            policy = make_policy(cmd.vhost, cmd.name, {
                "pattern": cmd.pattern, "definition": dict(cmd.definition),
                "priority": cmd.priority, "apply-to": cmd.apply_to})
        except (PolicyError, OverflowError, RecursionError) as exc:   # re: "a{4294967296}"
            return Refused(BAD_REQUEST, str(exc))
        existed = state.policies.put(policy)
        self._reapply(vh)
        return Stored(not existed)

    def _reapply(self, vh: VhostState) -> None:
        """Re-apply the policies to ``vh``'s classic queues (``policy_store.reapply``): what
        their client declared wins; arguments that no longer validate are kept as they were."""
        for name in sorted(vh.queues):
            q = vh.queues[name]
            if q.queue_type != "classic":   # quorum config is part of the queue's own state
                continue
            new = reapplied_arguments(self.state.policies, vh.name, name, q.arguments,
                                      durable=q.durable, exclusive=q.exclusive,
                                      auto_delete=q.auto_delete)
            if new == q.arguments:
                continue
            try:
                parse_arguments(new)
            except InvalidArgument:
                continue
            q.arguments = new

    # ------------------------------------------------------------------ vhosts
    def _vhost(self, cmd: m.AddVhost | m.DeleteVhost) -> Outcome:
        """``access_store.add_vhost`` / ``delete_vhost``: a new vhost has the predeclared
        exchanges and gives its creator full permissions; deleting one deletes everything in it,
        its permissions and policies (missing: ``Deleted(False)``)."""
        state = self.state
        if isinstance(cmd, m.DeleteVhost):
            if state.vhosts.pop(cmd.name, None) is None:
                return Deleted(False)
            for key in [k for k in state.permissions if k[1] == cmd.name]:
                del state.permissions[key]
            for policy in state.policies.list(cmd.name):
                state.policies.delete(cmd.name, policy.name)
            params.forget_vhost(state, cmd.name)
            return Deleted(True)
        vh = state.vhosts.get(cmd.name)
        new = vh is None
        if vh is None:
            vh = state.vhosts[cmd.name] = VhostState(cmd.name)
        vh.description, vh.tags = cmd.description, tuple(cmd.tags)
        if new and cmd.creator in state.users:
            state.permissions[(cmd.creator, cmd.name)] = FULL
        return Stored(new)

    # ------------------------------------------------------------------ users, permissions
    def _access(self, cmd: m.Command) -> Outcome:
        """Users and permissions (``access_store``): the last committed change wins; a
        permission of a missing user or vhost is 404 (the management API's 400
        ``vhost_or_user_not_found``)."""
        state = self.state
        if isinstance(cmd, m.PutUser):
            new = cmd.name not in state.users
            state.users[cmd.name] = Account(cmd.name, cmd.password_hash, cmd.hashing_algorithm,
                                            tuple(cmd.tags))
            return Stored(new)
        if isinstance(cmd, m.DeleteUser):
            if state.users.pop(cmd.name, None) is None:
                return Deleted(False)
            for key in [k for k in state.permissions if k[0] == cmd.name]:
                del state.permissions[key]
            return Deleted(True)
        if isinstance(cmd, m.SetPermission):
            if cmd.user not in state.users:
                return Refused(c.NOT_FOUND, f"NOT_FOUND - no user '{cmd.user}'")
            if cmd.vhost not in state.vhosts:
                return Refused(c.NOT_FOUND, f"NOT_FOUND - no vhost '{cmd.vhost}'")
            key = (cmd.user, cmd.vhost)
            new = key not in state.permissions
            state.permissions[key] = Grant(cmd.configure, cmd.write, cmd.read)
            return Stored(new)
        assert isinstance(cmd, m.ClearPermission), cmd
        return Deleted(state.permissions.pop((cmd.user, cmd.vhost), None) is not None)
