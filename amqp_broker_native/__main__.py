"""``python -m amqp_broker_native``: print whether the hot path runs compiled or from its Python
source, and why. Exit status: 0 compiled, 1 source (not built, or ``AMQP_BROKER_PURE``), 2 source
because the build is stale (``make native`` rebuilds it)."""

import sys

from . import ACTIVE, REASON, STALE

print(f"amqp-broker hot path: {REASON}")
sys.exit(0 if ACTIVE else 2 if STALE else 1)
