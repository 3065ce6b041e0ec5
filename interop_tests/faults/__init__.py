"""A Jepsen-style fault-injection harness for amqp-broker clusters (issue 11).

Real brokers, each in its own network namespace; real clients (pika and aio-pika), each pinned to
one broker, publishing unique ids with confirms and consuming with acks; nemeses that kill,
pause, partition and flap links, cut power, damage files (issue 24); then heal, restart the dead,
wait for one view, drain every broker, and count: lost (confirmed, never delivered; split into
prefix, middle and suffix of each publisher's ids), unexpected (delivered, never published),
duplicates, the seconds publishers saw no confirms, Python tracebacks in the brokers' logs, and
whether the quorum queue's replicas, read from their files, agree. The design follows Kyle Kingsbury's
Jepsen analysis of RabbitMQ (2014) and RabbitMQ's own Jepsen suite (rabbitmq/jepsen).

    python -m interop_tests.faults --nemesis kill --seconds 60 --runs 1 --brokers 3

Modules, one job each: ``netns`` (namespaces, addresses, cuts), ``brokers`` (processes, views),
``clients_common`` / ``pika_clients`` / ``aio_clients`` (the workload's clients), ``workload``
(who runs where, queue declare, final drain), ``nemesis`` (faults and their schedule),
``corrupt`` (damaged files), ``kills`` (kill targets: the queue's leader, a majority, all),
``diskfull`` / ``loopdisk`` (a full disk on a loop-mounted file system), ``lossy`` (packet loss and
bandwidth limits between brokers),
``membership`` (replicas added and removed, brokers replaced, under kills and partitions),
``defs_workload`` / ``defs_check`` (issue 23's ``--workload definitions``: clients changing the
same definitions on every member; divergent names and lost changes after the heal),
``history`` (the operation log), ``checker`` (history in, counts out; pure), ``replicas`` (the
quorum replicas compared), ``stream_check`` / ``stream_replicas`` (issue 25's ``--queue-type
stream``: readers from ``x-stream-offset`` first see one log in order; every broker's segment
files agree), ``logscan`` (tracebacks in the logs), ``runner`` (one run),
``report`` (summary line, RESULTS.md), ``cli`` (the command). Needs root (``ip netns``).
"""
