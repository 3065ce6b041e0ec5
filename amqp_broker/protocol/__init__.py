"""Sans-IO AMQP 0-9-1 protocol: bytes in, frames and methods out; no sockets, no clocks.

Modules: ``constants`` (frame types, reply codes), ``errors`` (channel/connection exceptions),
``framing`` (splitting a byte stream into frames, encoding frames), ``methods`` (method codec on pamqp
plus a fast path for Basic.Publish), ``delivery`` (fast Basic.Deliver/GetOk encoding),
``assembler`` (method -> content header -> body assembly per channel).
"""

from amqp_broker_native import extend_path

extend_path(__path__, __name__)  # the compiled build first, when in use (amqp_broker_native)
