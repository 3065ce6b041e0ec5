"""Clustering in the style of Apache Qpid's ClusteringHA proposal (2006).

Pure parts so far: the Cluster method class codec (``codec``: class 3200, registered in pamqp's
INDEX_MAPPING at import), the sans-IO membership state machine (``membership``, with its view-change
rounds in ``rounds``, the joiner's replay order in ``syncing`` and its outputs in ``actions``), peer
authentication (``ca``/``ca_cli``: mutual TLS with a cluster CA; ``secret``: an HMAC
challenge-response over Connection.Secure), discovery (``discovery``: mDNS with python-zeroconf bound
to the broker's own address, static seeds) and the typed interface between cluster and broker
(``ports``). The cluster package never imports the broker core: it talks to it through ``ports``.
"""
