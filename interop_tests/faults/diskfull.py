"""The ``disk-full`` nemesis: a broker's data dir runs out of space while publishers run.

Every broker's data dir is a small ext4 file system of its own (``DISK_BYTES``, on a loop
device: :mod:`interop_tests.faults.loopdisk`), and every broker runs with ``--disk-free-limit
DISK_FREE_LIMIT`` (RabbitMQ's ``disk_free_limit``; our broker checks it every second,
``amqp_broker.server.listener``). Each fault picks one broker (the quorum queue's Raft leader
when one is known, or any, 40 % each) or every broker at once (``ALL_SHARE``, 20 %: nothing can
be written anywhere, a quorum queue commits nothing) and fills its file system with a filler
file, in one of two ways, chosen at random:

- ``alarm``: until ``DISK_FREE_LIMIT // 2`` bytes are free: below the limit, so the broker's disk
  alarm trips at its next check and blocks its publishers (Connection.Blocked, "low on disk"), as
  RabbitMQ's does ("Free Disk Space Alarms"); its writes still have room meanwhile;
- ``enospc``: until nothing is free: the broker's next write fails with ENOSPC before the alarm
  is even checked (the filler is faster than the poll).

The filler is deleted after the fault (the space returns). What must hold: no broker exits, no
confirm for what was not written (the checker's lost count), and the broker serves again once
space is back: the nemesis waits (at most ``ALARM_WAIT`` s) for the alarm to be raised and then
cleared, as the management API (``GET /api/nodes/<name>``, ``disk_free_alarm``) reports it,
records both, and raises ``RuntimeError`` when the broker exited meanwhile or the alarm stayed
raised with the space back (a stuck broker): the run fails with that error.

A new pika connection to the filled broker then publishes one message and must hear
Connection.Blocked (:func:`client_blocked`; recorded, not a failure of the run: pinned
publishers may also have been blocked, the CI test checks it).

History events, one per filled broker: ``disk-full`` (target, mode, filler bytes, free bytes
after, kind ``queue-leader``/``random``/``all``), ``disk-alarm``
(target, raised: bool, after_s, client_blocked: bool or None), ``disk-freed``,
``disk-alarm-cleared`` (cleared: bool, after_s).
"""

from __future__ import annotations

import time
import urllib.parse

import pika
import pika.exceptions

from .kills import management_get, queue_leader
from .nemesis import NEMESES, Context, _await_rejoin
from .pika_clients import connection_parameters

__all__ = ["DISK_BYTES", "DISK_FREE_LIMIT", "MODES", "alarm_raised", "client_blocked",
           "disk_full"]

#: Size of each broker's file system, bytes (ext4 takes about 8 MiB of it for itself).
DISK_BYTES = 96 << 20
#: The brokers' ``--disk-free-limit`` in these runs, bytes.
DISK_FREE_LIMIT = 16 << 20
MODES = ("alarm", "enospc")
#: Share of faults that fill every broker's file system at once (the rest fill one).
ALL_SHARE = 0.2
#: Seconds the nemesis waits for the alarm to be raised, and to be cleared once space is back
#: (the broker checks every second; a loaded machine is slower).
ALARM_WAIT = 10.0


def alarm_raised(ctx: Context, index: int) -> bool | None:
    """Whether broker ``index``'s management API reports its disk alarm raised; None when it
    does not answer."""
    b = ctx.brokers[index]
    try:
        info = management_get(b.host, f"/nodes/{urllib.parse.quote(b.name)}")
    except (OSError, ValueError):
        return None
    return bool(info.get("disk_free_alarm")) if isinstance(info, dict) else None


def client_blocked(ctx: Context, index: int, timeout: float = 5.0) -> bool | None:
    """Whether a new pika connection to broker ``index`` that publishes one message (to the
    default exchange, routed nowhere) hears Connection.Blocked within ``timeout`` s, as
    RabbitMQ's blocked publishers do; None when it cannot connect."""
    heard: list[str] = []
    try:
        conn = pika.BlockingConnection(connection_parameters(ctx.brokers[index].url, 10))
    except (pika.exceptions.AMQPError, OSError):
        return None
    try:
        conn.add_on_connection_blocked_callback(
            lambda _c, frame: heard.append(frame.method.reason))
        conn.channel().basic_publish("", "disk-full.nowhere", b"probe")
        deadline = time.monotonic() + timeout
        while not heard and time.monotonic() < deadline:
            conn.process_data_events(0.2)
        return bool(heard)
    except (pika.exceptions.AMQPError, OSError):
        return None
    finally:
        try:
            conn.close()
        except (pika.exceptions.AMQPError, OSError):
            pass


def _await_alarm(ctx: Context, index: int, want: bool) -> tuple[bool, float]:
    started = ctx.history.now()
    while ctx.history.now() - started < ALARM_WAIT and not ctx.abort.is_set():
        if not ctx.brokers[index].running:
            break
        if alarm_raised(ctx, index) is want:
            return True, round(ctx.history.now() - started, 2)
        ctx.sleep(0.2)
    return False, round(ctx.history.now() - started, 2)


def _check_alive(ctx: Context, index: int, when: str) -> None:
    b = ctx.brokers[index]
    if not b.running:
        code = b.proc.returncode if b.proc is not None else None
        ctx.record("died", target=b.name, when=when, code=code)
        raise RuntimeError(f"{b.name} exited (code {code}) {when}\n{b.log_tail(20)}")


def _targets(ctx: Context) -> tuple[list[int], str]:
    leader = queue_leader(ctx) if ctx.queue_type == "quorum" else None
    draw = ctx.rng.random()
    if draw < ALL_SHARE:
        return list(range(len(ctx.brokers))), "all"
    if leader is not None and draw < (1 + ALL_SHARE) / 2:
        return [leader], "queue-leader"
    return [ctx.rng.randrange(len(ctx.brokers))], "random"


def disk_full(ctx: Context, duration: float) -> None:
    """Fill the file system of one broker, or of every broker (see the module docstring), for
    ``duration`` s, then free it. Raises ``RuntimeError`` when a filled broker exits or its
    alarm stays raised with the space back."""
    disks = ctx.brokers.disks
    if not disks:
        raise RuntimeError("disk-full needs the brokers on loop disks (Brokers(disk=...))")
    targets, kind = _targets(ctx)
    mode = ctx.rng.choice(MODES)
    started = ctx.history.now()
    try:
        for t in targets:
            filler = disks[t].fill(DISK_FREE_LIMIT // 2 if mode == "alarm" else 0)
            ctx.record("disk-full", target=ctx.brokers[t].name, mode=mode, filler=filler,
                       free=disks[t].free_bytes(), kind=kind)
        for i, t in enumerate(targets):
            raised, after = _await_alarm(ctx, t, True)
            blocked = client_blocked(ctx, t) if raised and i == 0 else None
            ctx.record("disk-alarm", target=ctx.brokers[t].name, raised=raised, after_s=after,
                       client_blocked=blocked)
        ctx.sleep(max(0.0, duration - ctx.history.now() + started))
        for t in targets:
            _check_alive(ctx, t, f"while its disk was full ({mode})")
    finally:
        for t in targets:
            disks[t].free()
            ctx.record("disk-freed", target=ctx.brokers[t].name, free=disks[t].free_bytes())
    for t in targets:
        name = ctx.brokers[t].name
        cleared, after = _await_alarm(ctx, t, False)
        ctx.record("disk-alarm-cleared", target=name, cleared=cleared, after_s=after)
        _check_alive(ctx, t, "after its disk was freed")
        if not cleared and not ctx.abort.is_set():
            raise RuntimeError(f"{name}'s disk alarm still raised {after} s after the space "
                               f"came back\n{ctx.brokers[t].log_tail(20)}")
    _await_rejoin(ctx, ",".join(ctx.brokers[t].name for t in targets))


NEMESES["disk-full"] = disk_full
