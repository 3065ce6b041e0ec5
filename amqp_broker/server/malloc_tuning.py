"""glibc malloc settings for a broker process that moves large message bodies.

Owns one call at start-up (``tune_malloc``). With glibc's defaults, a 64 KiB body's bytes come
from the top of the heap and, once freed, the top is trimmed back to the OS (free top above
``M_TRIM_THRESHOLD``, 128 KiB by default, or adjusted upwards by the dynamic mmap threshold),
so under a steady flow of large messages the heap grows and shrinks all the time: a ``brk`` call
and a page fault (with the kernel zeroing the page) for every 4 KiB touched again. perf on the
broker with 64 KiB messages (amqbench, no-ack) put page faults, ``brk`` and ``munmap`` at about 12%
of its CPU; with the settings below, under 1% (benchmarks/RESULTS.md, "Large bodies").

The settings keep up to ``TRIM_THRESHOLD`` bytes of freed heap mapped (given back to the OS
above that), grow the heap ``TOP_PAD`` bytes at a time, and serve only blocks of
``MMAP_THRESHOLD`` bytes or more with their own mapping (fixed: glibc's dynamic threshold moves
it anyway). Nothing happens on another C library or when ``mallopt`` is not there.
Source: glibc manual, "Malloc Tunable Parameters"; mallopt(3).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

__all__ = ["MMAP_THRESHOLD", "TOP_PAD", "TRIM_THRESHOLD", "tune_malloc"]

log = logging.getLogger(__name__)

#: Bytes: freed memory at the heap's top kept mapped up to this much.
TRIM_THRESHOLD = 32 * 1024 * 1024
#: Bytes: extra heap requested from the OS each time the heap grows.
TOP_PAD = 16 * 1024 * 1024
#: Bytes: blocks at least this large get their own mapping (returned at once when freed).
MMAP_THRESHOLD = 4 * 1024 * 1024

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3


def tune_malloc() -> bool:
    """Apply the settings above to this process's glibc malloc; True when applied, False when
    the C library is not glibc or refused one of them (then the defaults stay, no error)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = all(mallopt(param, value) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (_M_TOP_PAD, TOP_PAD)))
    if not applied:
        log.warning("mallopt refused a setting: glibc malloc defaults stay")
    return applied
