"""Building a queues.queue.Queue for the behaviour tests, and reading its ready bodies back.

Shared by test_queue_dispatch.py, test_queue_settlement.py and test_queue_limits.py (moved here
from test_queue.py when it was split): ``make`` builds a queue from RabbitMQ-style ``x-``
arguments with a FakeClock, a fixed wall clock, and optional dead-letter and discard callbacks;
``bodies`` lists the bodies of queue entries.
"""

from __future__ import annotations

from queues import Queue, parse_arguments
from queues.tests.fakes import FakeClock


def make(args=None, *, name="q", clock=None, dead_letter=None, discards=None, **kw) -> Queue:
    on_discard = None if discards is None else (lambda e, r: discards.append((e.seq, r)))
    return Queue(name, parse_arguments(args), clock=clock or FakeClock(),
                 wall_clock=lambda: 1_700_000_000.0, dead_letter=dead_letter,
                 on_discard=on_discard, arguments=args, **kw)


def bodies(entries) -> list[bytes]:
    return [e.message.body for e in entries]
