"""Broker logic without sockets: vhosts, connections, channels and one handler module per AMQP class.

Everything here is driven by bytes handed to ``Connection.receive_data`` and by ``Broker.tick(now)``;
output is collected in per-connection buffers that the server layer writes out (DESIGN.md §2).
"""
