"""Federation (issue 27): RabbitMQ's ``rabbitmq_federation`` plugin, AMQP 0-9-1 on both ends.

``params``: the ``federation-upstream`` and ``federation-upstream-set`` runtime parameters
(RabbitMQ's validation and texts) and the policy keys; ``upstreams``: which upstreams a policy
gives an exchange or a queue; ``headers``: ``x-received-from``, ``max-hops`` and cycle detection;
``exchange_link`` / ``queue_link``: one running link (our ``clients.aio`` client on both ends,
the shovel's forwarding loop); ``manager``: every link of a broker, the parameters (kept in the
data directory) and ``/api/federation-links``' status. Source: RabbitMQ "Federation Plugin",
"Federated Exchanges", "Federated Queues", "Federation Reference" (3.10).
"""
