"""``amqp-broker cluster-ca``: make the cluster CA and node certificates for peer mTLS.

    amqp-broker cluster-ca init --dir D [--name "prod cluster CA"] [--days N] [--force]
    amqp-broker cluster-ca issue NODE --dir D [--host 127.0.0.2 ...] [--days N] [--force]

Prints the paths written, one per line. Exit codes: 0 success, 1 failure (exists, missing CA, bad
node name; the reason goes to stderr), 2 usage error (argparse). The lead wires ``main`` into
``amqp_broker.__main__`` as the ``cluster-ca`` subcommand. Must not know: the broker.
"""

from __future__ import annotations

import argparse
import sys

from . import ca

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for ``--help`` tests and the broker's own CLI)."""
    p = argparse.ArgumentParser(prog="amqp-broker cluster-ca",
                                description="cluster CA and node certificates for peer mTLS")
    sub = p.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="make a new CA (EC P-256) in --dir")
    init.add_argument("--dir", required=True, help="the CA directory (created when missing)")
    init.add_argument("--name", default="amqp-broker cluster CA", help="the CA's common name")
    init.add_argument("--days", type=int, default=3650)
    init.add_argument("--force", action="store_true", help="replace an existing CA key")
    issue = sub.add_parser("issue", help="issue NODE.crt/NODE.key signed by the CA in --dir")
    issue.add_argument("node", help="the node name (a DNS label; CN and DNS SAN)")
    issue.add_argument("--dir", required=True)
    issue.add_argument("--host", action="append", default=[],
                       help="an IP address or DNS name the node is reached at (repeatable)")
    issue.add_argument("--days", type=int, default=825)
    issue.add_argument("--force", action="store_true", help="replace an existing node key")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code (see the module docstring)."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "init":
            crt = ca.init_ca(args.dir, args.name, args.days, args.force)
            sys.stdout.write(f"{crt}\n{crt.with_name('ca.key')}\n")
        else:
            crt, key = ca.issue_node(args.dir, args.node, args.host, args.days, args.force)
            sys.stdout.write(f"{crt}\n{key}\n")
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"amqp-broker cluster-ca: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
