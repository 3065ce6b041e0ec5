"""AMQP 0-9-1 constants: frame types, reply codes, class and method ids we refer to by number.

Source: AMQP 0-9-1 specification §4.2.3 (frames) and the "Constants" table (reply codes); RabbitMQ's
errata (amqp0-9-1.extended.xml). Owns numbers only; knows nothing of connections.
"""

from typing import Final

PROTOCOL_HEADER: Final[bytes] = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD: Final[int] = 1
FRAME_HEADER: Final[int] = 2
FRAME_BODY: Final[int] = 3
FRAME_HEARTBEAT: Final[int] = 8
FRAME_END: Final[int] = 0xCE
FRAME_END_BYTE: Final[bytes] = b"\xce"
FRAME_HEADER_SIZE: Final[int] = 7  # type u8 + channel u16 + size u32
FRAME_OVERHEAD: Final[int] = 8  # header + frame-end octet
FRAME_MIN_SIZE: Final[int] = 4096  # smallest frame_max a peer may negotiate (spec §4.2.3)

HEARTBEAT_FRAME: Final[bytes] = b"\x08\x00\x00\x00\x00\x00\x00\xce"

# Reply codes (spec "Constants").
REPLY_SUCCESS: Final[int] = 200
CONTENT_TOO_LARGE: Final[int] = 311  # channel
NO_ROUTE: Final[int] = 312  # Basic.Return (RabbitMQ extension of the spec's list)
NO_CONSUMERS: Final[int] = 313
CONNECTION_FORCED: Final[int] = 320  # connection
INVALID_PATH: Final[int] = 402  # connection
ACCESS_REFUSED: Final[int] = 403  # channel
NOT_FOUND: Final[int] = 404  # channel
RESOURCE_LOCKED: Final[int] = 405  # channel
PRECONDITION_FAILED: Final[int] = 406  # channel
FRAME_ERROR: Final[int] = 501  # connection
SYNTAX_ERROR: Final[int] = 502  # connection
COMMAND_INVALID: Final[int] = 503  # connection
CHANNEL_ERROR: Final[int] = 504  # connection
UNEXPECTED_FRAME: Final[int] = 505  # connection
RESOURCE_ERROR: Final[int] = 506  # connection
NOT_ALLOWED: Final[int] = 530  # connection
NOT_IMPLEMENTED: Final[int] = 540  # connection
INTERNAL_ERROR: Final[int] = 541  # connection

# Class ids.
CLASS_CONNECTION: Final[int] = 10
CLASS_CHANNEL: Final[int] = 20
CLASS_EXCHANGE: Final[int] = 40
CLASS_QUEUE: Final[int] = 50
CLASS_BASIC: Final[int] = 60
CLASS_CONFIRM: Final[int] = 85
CLASS_TX: Final[int] = 90
