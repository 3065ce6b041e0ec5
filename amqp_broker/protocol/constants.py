"""AMQP 0-9-1 constants: frame types, reply codes, class and method ids we refer to by number.

Source: AMQP 0-9-1 specification §4.2.3 (frames) and the "Constants" table (reply codes); RabbitMQ's
errata (amqp0-9-1.extended.xml). Owns numbers only; knows nothing of connections.
"""

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_HEADER_SIZE = 7  # type u8 + channel u16 + size u32
FRAME_OVERHEAD = 8  # header + frame-end octet
FRAME_MIN_SIZE = 4096  # smallest frame_max a peer may negotiate (spec §4.2.3)

HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

# Reply codes (spec "Constants").
REPLY_SUCCESS = 200
CONTENT_TOO_LARGE = 311  # channel
NO_ROUTE = 312  # Basic.Return (RabbitMQ extension of the spec's list)
NO_CONSUMERS = 313
CONNECTION_FORCED = 320  # connection
INVALID_PATH = 402  # connection
ACCESS_REFUSED = 403  # channel
NOT_FOUND = 404  # channel
RESOURCE_LOCKED = 405  # channel
PRECONDITION_FAILED = 406  # channel
FRAME_ERROR = 501  # connection
SYNTAX_ERROR = 502  # connection
COMMAND_INVALID = 503  # connection
CHANNEL_ERROR = 504  # connection
UNEXPECTED_FRAME = 505  # connection
RESOURCE_ERROR = 506  # connection
NOT_ALLOWED = 530  # connection
NOT_IMPLEMENTED = 540  # connection
INTERNAL_ERROR = 541  # connection

# Class ids.
CLASS_CONNECTION = 10
CLASS_CHANNEL = 20
CLASS_EXCHANGE = 40
CLASS_QUEUE = 50
CLASS_BASIC = 60
CLASS_CONFIRM = 85
CLASS_TX = 90
