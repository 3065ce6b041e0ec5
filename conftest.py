"""Repository-wide pytest setup.

- Broker processes that tests start (interop, cluster, clients, spark, faults) do not take the fixed
  management and Prometheus ports (15672/15692), since many brokers run at once; a test that wants
  them passes --management-port/--prometheus-port (flags beat the environment).
- ``amqp-broker ctl`` remembers cluster members in ``$XDG_CACHE_HOME/amqp-broker/ctl-members.json``;
  the tests get a cache directory of their own (made once per pytest process, removed at exit), so a
  test run never writes into the user's ``~/.cache``.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("AMQP_BROKER_MANAGEMENT_PORT", "0")
os.environ.setdefault("AMQP_BROKER_PROMETHEUS_PORT", "0")

_cache_dir = tempfile.mkdtemp(prefix="amqp-broker-test-cache-")
atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
os.environ["XDG_CACHE_HOME"] = _cache_dir
