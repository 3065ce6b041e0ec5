"""Broker logic without sockets: vhosts, connections, channels and one handler module per AMQP class.

Everything here is driven by bytes handed to ``Connection.receive_data`` and by ``Broker.tick(now)``;
output is collected in per-connection buffers that the server layer writes out (DESIGN.md §2).
"""

from amqp_broker_native import extend_path

extend_path(__path__, __name__)  # the compiled build first, when in use (amqp_broker_native)
