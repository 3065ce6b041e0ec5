"""Clustering in the style of Apache Qpid's ClusteringHA proposal (2006), plus Raft for replicated
queues.

Pure parts: the Cluster method class codec (``codec``: class 3200, registered in pamqp's
INDEX_MAPPING at import), the sans-IO membership state machine (``membership``, with its view-change
rounds in ``rounds``, the joiner's replay order in ``syncing`` and its outputs in ``actions``), peer
authentication (``ca``/``ca_cli``: mutual TLS with a cluster CA; ``secret``: an HMAC
challenge-response over Connection.Secure), discovery (``discovery``: mDNS with python-zeroconf bound
to the broker's own address, static seeds) and ``raft`` (a sans-IO Raft core, its disk log and the
quorum queue's state machine). I/O: ``links`` (peer links) and ``driver`` (runs the membership and
the relay over the links). The cluster package never imports the broker core: the broker's side of
the seams is described by the Protocols in ``amqp_broker.core.broker`` (``ClusterHooks``,
``RelaySink``, ``PeerAuth``) and wired by ``amqp_broker.clustering``.
"""

from amqp_broker_native import extend_path

extend_path(__path__, __name__)  # the compiled build first, when in use (amqp_broker_native)
