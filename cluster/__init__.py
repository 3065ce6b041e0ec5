"""Clustering in the style of Apache Qpid's ClusteringHA proposal (2006).

Pure parts so far: the Cluster method class codec (``codec``), the sans-IO membership state machine
(``membership``), peer authentication (``ca``: mutual TLS with a cluster CA; ``secret``: an HMAC
challenge-response over Connection.Secure), discovery (``discovery``: mDNS with python-zeroconf bound to
the broker's own address, static seeds) and the typed interface the broker implements for us
(``ports``). The cluster package never imports the broker core: it talks to it through ``ports``.
"""
