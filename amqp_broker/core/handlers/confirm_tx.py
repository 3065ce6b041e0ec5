"""Confirm and Tx classes: Confirm.Select (RabbitMQ's publisher confirms), Tx.Select/Commit/Rollback.

A channel is in at most one of the two modes (406 otherwise, as RabbitMQ). In tx mode publishes and
acks/nacks/rejects are held until Commit applies them in order; Rollback drops them (the messages a
rolled-back ack named stay unacked). Source: RabbitMQ "Publisher Confirms"; AMQP 0-9-1 class tx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands as cmd

from ...protocol import constants as c
from ...protocol.errors import ChannelException
from ..confirms import ConfirmTracker
from .basic import apply_tx_operation

if TYPE_CHECKING:
    from ..channel import Channel


def confirm_select(ch: Channel, m: cmd.Confirm.Select) -> None:
    """Confirm.Select -> Select-Ok (unless nowait); 406 on a transactional channel."""
    if ch.tx is not None:
        raise ChannelException(c.PRECONDITION_FAILED,
                               "PRECONDITION_FAILED - cannot switch from tx to confirm mode")
    if ch.confirms is None:
        ch.confirms = ConfirmTracker()
    if not m.nowait:
        ch.connection.send_method(ch.id, cmd.Confirm.SelectOk())


def tx_select(ch: Channel, m: cmd.Tx.Select) -> None:
    """Tx.Select -> Select-Ok; 406 on a confirm-mode channel."""
    if ch.confirms is not None:
        raise ChannelException(c.PRECONDITION_FAILED,
                               "PRECONDITION_FAILED - cannot switch from confirm to tx mode")
    if ch.tx is None:
        ch.tx = []
    ch.connection.send_method(ch.id, cmd.Tx.SelectOk())


def _require_tx(ch: Channel) -> list:
    if ch.tx is None:
        raise ChannelException(c.PRECONDITION_FAILED,
                               "PRECONDITION_FAILED - channel is not transactional")
    return ch.tx


def tx_commit(ch: Channel, m: cmd.Tx.Commit) -> None:
    """Tx.Commit: apply held publishes and acks in order -> Commit-Ok."""
    ops = _require_tx(ch)
    ch.tx = []
    for op in ops:
        apply_tx_operation(ch, op)
    ch.connection.send_method(ch.id, cmd.Tx.CommitOk())


def tx_rollback(ch: Channel, m: cmd.Tx.Rollback) -> None:
    """Tx.Rollback: drop held publishes and acks -> Rollback-Ok."""
    _require_tx(ch)
    ch.tx = []
    ch.connection.send_method(ch.id, cmd.Tx.RollbackOk())


HANDLERS = {cmd.Confirm.Select: confirm_select, cmd.Tx.Select: tx_select,
            cmd.Tx.Commit: tx_commit, cmd.Tx.Rollback: tx_rollback}
