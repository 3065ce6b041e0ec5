"""Python garbage-collector settings for a broker process that allocates per frame.

Owns one call at start-up (``tune_gc``). CPython runs a generation-0 collection when its
allocations of container objects outnumber its deallocations by the threshold (700 by
default). The frame splitter returns a read's frames as one list of tuples: a 256 KiB read of
16 B messages is ~11,000 frames alive together, so ~15 collections ran during every such read,
each walking the young objects alive at that moment (that read's frames so far, the entries
queued). callgrind on the broker (``python -m benchmarks.socketpath``, 16 B no-ack) put them at
~930 instructions a message, 6% of the path. With a threshold of ``GEN0_THRESHOLD`` a read's
frames never reach it before they are dropped; a backlog that grows (queued messages) still
brings collection rounds, and the older generations keep CPython's ratios. ``gc.freeze()``
first moves everything start-up made (modules, classes, the configuration) out of the
collector's sight, so a full collection walks only what the broker made since. Reference
cycles the broker drops (a closed connection and its channels) are still collected, later.
Source: CPython documentation, "gc — Garbage Collector interface" (set_threshold, freeze);
Instagram Engineering, "Dismissing Python Garbage Collection at Instagram" (2017).
"""

from __future__ import annotations

import gc

__all__ = ["GEN0_THRESHOLD", "tune_gc"]

#: Allocations of container objects (net of deallocations) between generation-0 collections.
GEN0_THRESHOLD = 50_000


def tune_gc() -> tuple[int, int, int]:
    """Freeze what exists now and raise the generation-0 threshold to ``GEN0_THRESHOLD``;
    returns the thresholds now in force (gen0, gen1, gen2). Call once, after start-up imports."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
    return gc.get_threshold()
