"""Read pacing: while the broker's event loop is busy (``SATURATED``: 70% of a core), an
open-loop publisher with a steady inflow is read in batches, not as each few bytes arrive.

Every read of a socket costs the broker a fixed amount (an event-loop turn, the receive and send
system calls, task wake-ups: about 45 µs on the AMD EPYC VM of benchmarks/RESULTS.md) however
little it carries, and costs its client the same on the other side. A broker that keeps up reads
a publisher's few kilobytes at a time; once it is saturated, those fixed costs take CPU from the
messages themselves, and on a machine shared with the clients, from the clients too (a no-ack
consumer fed 13 messages per write spent 9 µs of CPU per 1 KiB message, fed whole reads 4 µs).
So, only while the event loop's thread has used at least ``SATURATED`` of a core over the last
``WINDOW_S``, an open-loop publisher (``open_loop``: it publishes and waits for nothing from us,
neither confirms nor a transaction's commit, nor consumes) whose last read came within
``BUSY_GAP_S`` of the one before, and carried less than ``FULL_BYTES``, waits until ``BATCH_S``
after its last read before reading again: the kernel gathers its inflow meanwhile, as a NIC's
interrupt moderation does. An idle or lightly loaded broker never waits, so a single message's
latency is unchanged (the latency case of ``make bench`` runs at a few percent of a core).
Under saturation such a publisher's message waits at most ``BATCH_S`` more before it is read; a
read that fills a quarter of the read size is never held. A connection that waits for our
replies is never held: pacing it would slow its own loop (a publisher with confirms, 1 KiB
persistent: 46,000 -> 42,000 msg/s; a consumer's acks at prefetch 1 would wait ``BATCH_S``
each).
Source: DESIGN.md §5 (batching per read, one send per chunk); Linux NAPI / ethtool
``rx-usecs`` interrupt coalescing for the same trade.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..core.connection import Connection

__all__ = ["BATCH_S", "BUSY_GAP_S", "FULL_BYTES", "SATURATED", "WINDOW_S", "ReadPacer",
           "open_loop"]

#: Seconds a paced connection waits after its last read before reading again.
BATCH_S = 0.002
#: Seconds: two reads this close together make a steady inflow (a paced connection's reads
#: come ``BATCH_S`` apart, so it stays paced while its inflow lasts).
BUSY_GAP_S = 2 * BATCH_S
#: Bytes: a read at least this large is not held (the kernel has plenty already).
FULL_BYTES = 65536
#: Fraction of one core the process used over the last window for pacing to apply. 70%: with
#: the plain-socket writer (no writer task) a broker that keeps up with small reads at 60-80% of
#: a core spends its client's CPU on them too (16 B no-ack at 85%: 7,000 reads and writes a
#: second of ~5 messages each, 157,000 msg/s, against ~500 of ~600 each and 300,000 msg/s paced);
#: at 50% a 1 KiB publisher was held while the loop still had time for it (~4% fewer msg/s);
#: the latency case runs at ~10%.
SATURATED = 0.7
#: Seconds over which the process's CPU use is measured.
WINDOW_S = 0.05


class ReadPacer:
    """One per listener: knows whether the event loop is saturated and how long a connection's
    reader should wait before its next read. ``clock``/``cpu_clock``: wall time and the calling
    thread's CPU time, in s (injectable for tests); ``saturated_at``: a fraction of one core."""

    __slots__ = ("clock", "cpu_clock", "saturated_at", "saturated", "_t0", "_cpu0")

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.thread_time,
                 saturated_at: float | None = None) -> None:
        self.clock = clock
        self.cpu_clock = cpu_clock
        #: Fraction of a core (``SATURATED`` unless given) at which pacing applies.
        self.saturated_at = SATURATED if saturated_at is None else saturated_at
        #: Whether the loop's thread used at least ``SATURATED`` of a core over the last window.
        self.saturated = False
        self._t0 = clock()
        self._cpu0 = cpu_clock()

    def _sample(self, now: float) -> None:
        elapsed = now - self._t0
        if elapsed >= WINDOW_S:
            cpu = self.cpu_clock()
            self.saturated = (cpu - self._cpu0) >= self.saturated_at * elapsed
            self._t0, self._cpu0 = now, cpu

    def delay(self, conn: Connection, last: float, prev: float, size: int) -> float:
        """Seconds to wait before the next read of ``conn``, whose last read returned at ``last``
        (s, this pacer's clock) with ``size`` bytes, the one before at ``prev``; 0.0 when it
        should read at once. Call from the event loop's thread (its CPU time is measured)."""
        now = self.clock()
        self._sample(now)
        if (not self.saturated or size >= FULL_BYTES or last - prev >= BUSY_GAP_S
                or not open_loop(conn)):
            return 0.0
        return max(0.0, last + BATCH_S - now)


def open_loop(conn: Connection) -> bool:
    """``conn`` is a client that has published and waits for nothing from the broker: no channel
    in confirm or tx mode, no consumer, not a cluster peer link (AMQP 0-9-1 §1.8 confirm.select
    and tx.select; RabbitMQ "Publisher Confirms")."""
    if not conn.has_published or conn.is_peer:   # a peer link carries Raft and relay traffic
        return False
    for ch in conn.channels.values():
        if ch.confirms is not None or ch.tx is not None or ch.consumers:
            return False
    return True
