"""Stream queues (``x-queue-type: stream``): an append-only, segmented log per stream that consumers
read from offsets of their own choice, with retention by size and age.

Modules: ``format`` (segment file layout, the ``x-stream-offset`` header splice, age strings),
``log`` (``StreamLog``: segments, tail cache, retention, flush), ``segment`` (one segment file's
figures and sparse index, reading records at a position), ``queue``
(``StreamQueue``: the classic ``Queue`` surface the broker core uses, per-consumer positions;
argument and ``x-stream-offset`` parsing), ``manager`` (``StreamManager``: every stream of a broker
on disk and their shared group commit). Must not know: sockets, channels, event loops.
Source: "RabbitMQ: Streams"; Kafka's log segments (DESIGN.md section 3).
"""

from .format import StreamFormatError
from .log import Cursor, StreamLog
from .manager import StreamManager, StreamSync
from .queue import OffsetSpec, StreamQueue, StreamSettings, parse_offset_spec, stream_settings

__all__ = ["Cursor", "OffsetSpec", "StreamFormatError", "StreamLog", "StreamManager",
           "StreamQueue", "StreamSettings", "StreamSync", "parse_offset_spec", "stream_settings"]
