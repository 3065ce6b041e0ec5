"""Operating the broker as people operate RabbitMQ (issue 13): the management HTTP API on
``--management-port`` (RabbitMQ 3.x shapes, basic auth with broker users and tags), the web page
at ``/`` of the same port, Prometheus metrics on ``--prometheus-port``, and the ``amqp-broker
ctl`` commands that use the API.

Layout: ``server`` (binding, Hypercorn in the broker's loop, rate sampler), ``app`` (routes),
``routes_*`` (one module per resource), ``direct`` (API actions as in-process AMQP methods
through the broker's handlers), ``shapes`` (JSON), ``auth`` (basic auth and tags), ``persist``
(users, permissions, vhosts in definitions.db), ``definitions_json`` (import/export),
``prometheus``, ``node`` (process and cluster figures), ``peers`` (the other members' listeners,
read from their Connection.Start), ``ctl`` (the CLI) with ``ctl_client`` (its HTTP client over
several members, and the members it remembers).
Must not be imported by ``amqp_broker.core`` (the core knows nothing of HTTP).
"""
