"""Repository-wide pytest setup: broker processes that tests start (interop, cluster, clients,
spark, faults) do not take the fixed management and Prometheus ports (15672/15692), since many
brokers run at once; a test that wants them passes --management-port/--prometheus-port (flags
beat the environment)."""

import os

os.environ.setdefault("AMQP_BROKER_MANAGEMENT_PORT", "0")
os.environ.setdefault("AMQP_BROKER_PROMETHEUS_PORT", "0")
