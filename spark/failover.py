"""Failover of the ``amqp`` source's offset probes over its ``uri`` list, within Spark's limits.

Owns retrying a ``spark.consume.StreamProbe`` (the driver-side calls: ``latestOffset``,
``initialOffset``, planning a batch read) when the broker it talks to is lost or refuses, and
how long a streaming query rides out a list that does not answer (``Outage``). Nothing here
imports pyspark.

Why: a probe is a connection of its own, opened for each call. When the member it is connected to
dies (SIGKILL, a lost host) the probe fails with ``ConnectionClosed``, and a member of a cluster
that is changing its view may refuse a new connection for a moment (320 CONNECTION_FORCED). Before,
that error went up through ``latestOffset`` and Spark stopped the query
(``PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR``). Now ``probe`` tries again through the list,
each retry starting one member further on (``spark.common.uris_for_attempt``: a frozen member
costs one attempt, not all), with a backoff of 0.1 s doubling to 1 s, for at most
``call_budget`` seconds: 6 s, below the ~10 s Spark's Python data source worker is given for a
callback on a loaded machine, or half of the ``failover_timeout`` option when that is shorter.
When the budget runs out, ``latestOffset`` plans no new batch (it answers its start offset) for
as long as the list has been unreachable for less than ``failover_timeout`` seconds (default 60)
and fails the query after that (``SourceUnavailable``), as Kafka's source fails after
``fetchOffset.numRetries``.

Exactly once is not at stake here: offsets are positions in the replicated log, the same on
every member (issue 25), so an end learnt through another member names the same messages.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from clients.errors import ConnectionClosed
from clients.uri import parse_uri

from .common import uris_for_attempt
from .consume import SourceError, SourceOptions, StreamProbe

__all__ = ["SourceUnavailable", "Outage", "probe", "call_budget", "CALL_BUDGET"]

log = logging.getLogger("spark.amqp.source")

T = TypeVar("T")

#: Longest one driver-side call retries, seconds (Spark's Python worker callback: ~10 s).
CALL_BUDGET = 6.0
#: First and longest pause between two attempts, seconds.
FIRST_DELAY = 0.1
MAX_DELAY = 1.0
#: Most attempts of one call (the budget ends it sooner on a slow list).
MAX_ATTEMPTS = 20
#: Least time an attempt is given to connect and probe, seconds, even at the end of the budget.
MIN_ATTEMPT = 1.0
#: What a lost or refusing broker raises (``NoBrokerAvailable`` is a ``ConnectionClosed``).
TRANSIENT = (ConnectionClosed, TimeoutError, OSError)


class SourceUnavailable(SourceError):
    """No broker of the ``uri`` list answered a probe within its budget (``probe``), or none for
    ``failover_timeout`` seconds (``Outage``). The message names the addresses (not the URIs:
    they hold passwords) and the last error."""


def call_budget(opts: SourceOptions) -> float:
    """Seconds one driver-side call retries: ``CALL_BUDGET``, or half of ``failover_timeout``
    when that is shorter (so a query can ride out at least one failed call)."""
    return min(CALL_BUDGET, opts.failover_timeout / 2)


def _addresses(opts: SourceOptions) -> str:
    return ", ".join(parse_uri(u).address for u in opts.uris)


def probe(opts: SourceOptions, client_name: str, what: Callable[[StreamProbe], T],
          budget: float | None = None) -> T:
    """``what(probe)`` on a ``StreamProbe`` of the first answering broker, tried again through
    the list (see the module doc) while the broker is lost or refuses, for at most ``budget``
    seconds (default ``call_budget(opts)``; at least one attempt, at most ``MAX_ATTEMPTS``).
    Raises ``SourceError`` at once (missing queue, not a stream), ``SourceUnavailable`` when the
    budget ran out."""
    budget = call_budget(opts) if budget is None else budget
    deadline = time.monotonic() + budget
    delay = FIRST_DELAY
    last: BaseException | None = None
    attempts = 0
    while attempts < MAX_ATTEMPTS:
        left = deadline - time.monotonic()
        turned = dataclasses.replace(opts, uris=uris_for_attempt(opts.uris, attempts))
        attempts += 1
        try:
            with StreamProbe(turned, client_name, timeout=max(left, MIN_ATTEMPT)) as found:
                return what(found)
        except TRANSIENT as exc:
            last = exc
            log.info("queue %r: probe attempt %d failed (%r); trying the next broker",
                     opts.queue, attempts, exc)
        if time.monotonic() + delay > deadline:
            break
        time.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)
    raise SourceUnavailable(
        f"queue {opts.queue!r}: no broker of {_addresses(opts)} answered within {budget:g} s "
        f"({attempts} attempts); last error: {last!r}") from last


class Outage:
    """When the brokers of a streaming query stopped answering its probes: ``ok()`` after a
    probe that worked, ``failed(error, since)`` after one that ran out of its budget (``since``:
    ``time.monotonic()`` when that call began); ``failed`` raises ``SourceUnavailable`` once
    the list has been unreachable for ``failover_timeout`` seconds and at least two calls (one
    slow call on a loaded machine does not end the query), else returns (the caller then plans
    no new batch). Lives in the stream reader, which Spark keeps for the query."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.since: float | None = None
        self.calls = 0

    def ok(self) -> None:
        if self.since is not None:
            log.warning("queue %r: the brokers answer again after %.1f s", self.opts.queue,
                        time.monotonic() - self.since)
        self.since = None
        self.calls = 0

    def failed(self, error: SourceUnavailable, since: float) -> None:
        if self.since is None:
            self.since = since
        self.calls += 1
        down = time.monotonic() - self.since
        if down >= self.opts.failover_timeout and self.calls >= 2:
            raise SourceUnavailable(
                f"queue {self.opts.queue!r}: no broker of {_addresses(self.opts)} answered for "
                f"{down:.0f} s (failover_timeout {self.opts.failover_timeout:g} s): {error}"
            ) from error
        log.warning("%s; no new batch until a broker answers (failover_timeout %g s, %.1f s "
                    "so far)", error, self.opts.failover_timeout, down)
