"""Dynamic shovels (issue 27): RabbitMQ's ``rabbitmq_shovel`` with AMQP 0-9-1 on both ends.

``params``: validating a ``shovel`` parameter's value (RabbitMQ's rules and texts);
``erl``: RabbitMQ's Erlang-term rendering of JSON values in those texts; ``link``: one running
shovel (our ``clients.aio`` client on both ends); ``manager``: every shovel of a broker, their
parameters (kept in the data directory), states and which cluster member runs them.
Source: RabbitMQ "Dynamic Shovels", "Shovel plugin" (3.10).
"""
