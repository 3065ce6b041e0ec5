"""``amqp-broker`` / ``python -m amqp_broker``: run the broker, or one of the operator subcommands.

    amqp-broker [run flags]                      parse the configuration and run the broker
    amqp-broker --version                        print "amqp-broker X.Y.Z" and exit 0
    amqp-broker cluster-ca init|issue ...        cluster CA and node certificates (cluster.ca_cli)
    amqp-broker cluster-status --uri ... ...     each broker's cluster view as JSON (clustering.cli)
    amqp-broker ctl COMMAND ...                  rabbitmqctl's commands over the management API
    amqp-broker help [SUBCOMMAND]                the run flags and subcommands, or one's options

A first argument naming a subcommand dispatches to it with the rest of the arguments; anything else
is the broker's own flags (``amqp_broker.config``), so ``amqp-broker --port 5673`` runs as before.
``amqp-broker --help`` lists the run flags, then the subcommands with one line each (``SUMMARIES``,
the epilog); an unknown command is refused with the list of commands. The version is the installed
distribution's (``importlib.metadata``), or ``pyproject.toml``'s when running from a source tree that
was never installed. Exit codes: the subcommand's own, or 2 for a configuration/usage error or an
unknown command, 0 after a clean broker shutdown, 1 when the broker stops on an OS error.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

from .config import ConfigError, build_parser, load_config

__all__ = ["main", "SUBCOMMANDS", "SUMMARIES", "EPILOG", "broker_version", "run_parser",
           "subcommand_parser"]

DISTRIBUTION = "amqp-broker"
PACKAGE_DIR = Path(__file__).resolve().parent


def broker_version(distribution: str = DISTRIBUTION, package_dir: Path = PACKAGE_DIR) -> str:
    """The version ``--version`` prints ("0.1.0"): ``distribution``'s installed metadata, else the
    ``[project] version`` of the ``pyproject.toml`` beside ``package_dir`` (a source tree run
    without install), else "unknown". Source: PEP 566 metadata via ``importlib.metadata``."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        project = tomllib.loads((package_dir.parent / "pyproject.toml").read_text())["project"]
        return str(project["version"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError):
        return "unknown"


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


def _help(argv: list[str]) -> int:
    """``help``: the run flags and subcommands (exit 0), or ``help SUBCOMMAND``: that one's
    ``--help``; an unknown name exits 2 as an unknown command does."""
    if not argv:
        run_parser().print_help()
        return 0
    if argv[0] in SUBCOMMANDS and argv[0] != "help":
        return SUBCOMMANDS[argv[0]](["--help"])
    return _unknown(argv[0])


#: subcommand name -> function(argv after the name) returning the exit code
SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {
    "ctl": _ctl,
    "cluster-status": _cluster_status,
    "cluster-ca": _cluster_ca,
    "help": _help,
}

#: subcommand name -> its one line in ``--help`` (at most 62 characters: 80 columns)
SUMMARIES: dict[str, str] = {
    "ctl": "rabbitmqctl's common commands over the management HTTP API",
    "cluster-status": "each broker's cluster view (members, leader) as JSON",
    "cluster-ca": "cluster CA and node certificates for peer links over mTLS",
    "help": "this help, or a subcommand's: amqp-broker help SUBCOMMAND",
}

EPILOG = "subcommands (`amqp-broker SUBCOMMAND --help` for their options):\n" + "".join(
    f"  {name:<16}{SUMMARIES[name]}\n" for name in SUBCOMMANDS)


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """The argument parser of subcommand ``name`` (not ``help``), for its ``--help`` text in the
    configuration reference; raises ``KeyError`` for another name."""
    if name == "ctl":
        from .management import ctl
        return ctl.build_parser()
    if name == "cluster-status":
        from .clustering import cli
        return cli.build_parser()
    if name == "cluster-ca":
        from cluster import ca_cli
        return ca_cli.build_parser()
    raise KeyError(name)


def run_parser() -> argparse.ArgumentParser:
    """The run flags' parser (``config.build_parser``) with ``--version`` and the subcommands in
    its epilog."""
    parser = build_parser()
    parser.add_argument("--version", action="version",
                        version=f"amqp-broker {broker_version()}",
                        help="print the version (amqp-broker X.Y.Z) and exit")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _unknown(command: str) -> int:
    """Refuse ``command``: one stderr line per subcommand, then how to see the run flags; 2."""
    print(f"amqp-broker: unknown command {command!r}\n{EPILOG}"
          "run flags (a broker): amqp-broker --help", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a configuration error or an unknown
    command, 1 when the broker stops on an OS error: its port is taken, its data directory or
    disk unusable)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in SUBCOMMANDS:
        return SUBCOMMANDS[args[0]](args[1:])
    if args and not args[0].startswith("-"):
        return _unknown(args[0])
    run_parser().parse_args(args)   # --help, --version and usage errors exit here
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
