"""The cluster view in the metadata log: the rule of the ``InstallView`` command.

A round of the membership (``cluster.membership``, ``cluster.committed_views``) that decided a new
view proposes it here; the view is in force once this command committed, on every member in log
order. The rule is a compare-and-set on the view it replaces: ``base`` must be the last committed
view (any, while none was committed yet: a cluster that predates this command, or a new one whose
first view its founder installed alone), else the command is refused and changes nothing -- of two
rounds from the same view (a partition, two proposers), only the one committed first counts.
Must not know: Raft, bytes (``codec``), the broker.
Sources: Raft paper §5.3 (one order of committed entries), Qpid ClusteringHA "Cluster Management"
(view numbers, the first member leads); issue 23.
"""

from __future__ import annotations

from .commands import InstallView
from .outcomes import INTERNAL_ERROR, Refused, Stored
from .state import MetadataState

__all__ = ["InstallView", "install_view", "STALE_VIEW"]

#: The text of the refusal of a view whose ``base`` is no longer the last committed one.
STALE_VIEW = "INTERNAL_ERROR - cluster view {base:#x} was replaced by view {current:#x}"


def install_view(state: MetadataState, cmd: InstallView) -> Stored | Refused:
    """Apply ``cmd`` to ``state`` (module docstring): ``Stored(created=True)`` when the view is
    now the committed one; ``Refused(541, STALE_VIEW...)`` when ``base`` is not the last
    committed view, or the member lists are malformed (lengths differ, a name twice, none)."""
    if len(cmd.names) != len(cmd.addresses) or not cmd.names \
            or len(set(cmd.names)) != len(cmd.names):
        return Refused(INTERNAL_ERROR, "INTERNAL_ERROR - malformed cluster view", True)
    if state.view and cmd.base != state.view:
        return Refused(INTERNAL_ERROR, STALE_VIEW.format(base=cmd.base, current=state.view), True)
    state.view = cmd.view
    state.view_members = cmd.members
    return Stored(True)
