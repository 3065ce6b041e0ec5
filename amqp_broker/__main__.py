"""``amqp-broker`` / ``python -m amqp_broker``: parse the configuration and run the broker."""

from __future__ import annotations

import sys

from .config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (2 for a configuration error)."""
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"amqp-broker: {exc}", file=sys.stderr)
        return 2
    from .app import run
    run(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
