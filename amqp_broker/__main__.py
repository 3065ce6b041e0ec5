"""``amqp-broker`` / ``python -m amqp_broker``: run the broker, or one of the operator subcommands.

    amqp-broker [run flags]                      parse the configuration and run the broker
    amqp-broker cluster-ca init|issue ...        cluster CA and node certificates (cluster.ca_cli)
    amqp-broker cluster-status --uri ... ...     each broker's cluster view as JSON (clustering.cli)
    amqp-broker ctl COMMAND ...                  rabbitmqctl's commands over the management API

A first argument naming a subcommand dispatches to it with the rest of the arguments; anything else
is the broker's own flags (``amqp_broker.config``), so ``amqp-broker --port 5673`` runs as before.
``amqp-broker --help`` lists the run flags, with the subcommands in its epilog. Exit codes: the
subcommand's own, or 2 for a configuration/usage error, 0 after a clean broker shutdown.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from .config import ConfigError, build_parser, load_config

__all__ = ["main", "SUBCOMMANDS", "EPILOG"]

EPILOG = """\
subcommands (run `amqp-broker SUBCOMMAND --help` for their options):
  amqp-broker cluster-ca init --dir D
        make a cluster CA (EC P-256) in directory D
  amqp-broker cluster-ca issue NODE --dir D [--host IP ...]
        issue NODE.crt/NODE.key signed by the CA in D, valid for the given addresses
  amqp-broker cluster-status --uri amqp://HOST:PORT/ [--uri ...]
        print each broker's cluster view (name, view number, members, leader first) as JSON;
        exit 1 when a broker does not answer
  amqp-broker ctl [--url http://127.0.0.1:15672] [-u USER --password PW] COMMAND [ARGS]
        rabbitmqctl's common commands over the management HTTP API: list_queues [columns],
        list_exchanges, list_bindings, list_connections, list_consumers, add_user,
        delete_user, change_password, set_user_tags, set_permissions [-p VHOST] USER C W R,
        add_vhost, delete_vhost, export_definitions FILE, import_definitions FILE,
        close_connection, purge_queue, delete_queue, cluster_status
"""


def _cluster_ca(argv: list[str]) -> int:
    """``cluster-ca``: ``cluster.ca_cli.main`` (imported late: it pulls in ``cryptography``)."""
    from cluster import ca_cli
    return ca_cli.main(argv)


def _cluster_status(argv: list[str]) -> int:
    """``cluster-status``: ``amqp_broker.clustering.cli.main``."""
    from .clustering import cli
    return cli.main(argv)


def _ctl(argv: list[str]) -> int:
    """``ctl``: ``amqp_broker.management.ctl.main``."""
    from .management import ctl
    return ctl.main(argv)


#: subcommand name -> function(argv after the name) returning the exit code
SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {
    "cluster-ca": _cluster_ca,
    "cluster-status": _cluster_status,
    "ctl": _ctl,
}


def run_parser() -> argparse.ArgumentParser:
    """The run flags' parser (``config.build_parser``) with the subcommands in its epilog."""
    parser = build_parser()
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a configuration error, 1 when the broker
    stops on an OS error: its port is taken, its data directory or disk unusable)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in SUBCOMMANDS:
        return SUBCOMMANDS[args[0]](args[1:])
    if args and not args[0].startswith("-"):
        print(f"amqp-broker: unknown command {args[0]!r} (commands: "
              f"{', '.join(SUBCOMMANDS)}; run flags: amqp-broker --help)", file=sys.stderr)
        return 2
    run_parser().parse_args(args)   # --help (with the epilog) and usage errors exit here
    try:
        config = load_config(args)
    except ConfigError as exc:
        print(f"amqp-broker: {exc}", file=sys.stderr)
        return 2
    from .app import run
    try:
        run(config)
    except BaseException as exc:  # anyio wraps startup errors in an ExceptionGroup
        errors = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
        oserrors = [e for e in errors if isinstance(e, OSError)]
        if not oserrors or len(oserrors) != len(errors):
            raise
        print(f"amqp-broker on {config.host}:{config.port} stopped: {oserrors[0]}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
