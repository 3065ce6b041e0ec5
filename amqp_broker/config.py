"""Configuration: defaults < TOML file (``--config``) < ``AMQP_BROKER_*`` environment < CLI flags.

Keys (TOML top level, env ``AMQP_BROKER_<KEY upper>``, CLI ``--key-with-dashes``):
host (str, 127.0.0.1), port (int, 5672), data_dir (path, default below), node_name (str),
log_level (debug|info|warning|error), heartbeat (s, 60), frame_max (bytes, 131072), channel_max
(2047), max_message_size (bytes, default 16 MiB as RabbitMQ 4.x's max_message_size, at most
512 MiB: a larger message body closes the publisher's channel with 406), memory_high_watermark (bytes; 0 = off; a float < 1 is a fraction of RAM, RabbitMQ's
vm_memory_high_watermark; default 0.4), sync_policy (batch | always | none; default batch: publisher
confirms for persistent messages wait for the group-commit fsync), queue_memory_budget (bytes,
default 64 MiB: ready message bodies one durable queue keeps in RAM; persistent messages beyond it
stay on disk only and are read back as consumers reach them; 0 = keep everything in RAM),
disk_free_limit (bytes, default 50000000 as RabbitMQ's disk_free_limit: below this much free space
on the data directory's file system the disk alarm blocks publishers; 0 = off), management_port
(int, default port + 10000, so 15672 for 5672: the management HTTP API and web page; 0 = off),
prometheus_port (int, default port + 10020, so 15692 for 5672: Prometheus /metrics; 0 = off),
tls_port (int, 5671: the AMQPS listener, on when tls_cert and tls_key
are given or cluster_tls_dir is), tls_cert / tls_key / tls_ca (PEM paths), tls_verify (verify_none |
verify_peer), tls_fail_if_no_peer_cert (bool), tls_login_from (common_name | distinguished_name:
SASL EXTERNAL's user name), management_tls (bool: the management API over HTTPS with tls_cert),
cluster_tls_dir (a ``cluster-ca`` directory: peer links over mutual TLS), relay_policy (pass-on | hold:SECONDS | drop, default pass-on:
what a cluster member does with a relayed message whose queue has no local consumer any more),
auth_mechanisms (SASL mechanisms offered, most preferred first, from PLAIN, AMQPLAIN and EXTERNAL:
a comma-separated list, or a TOML array; default PLAIN,AMQPLAIN as RabbitMQ's auth_mechanisms;
EXTERNAL only to TLS clients with a verified certificate). Users in TOML as ``[[users]]`` tables with name, password,
vhosts, loopback_only; default guest/guest from loopback only (RabbitMQ "Access Control").
Raises ``ConfigError`` for an unreadable file, an unknown key or a value of the wrong type.

Default data directory (``default_data_dir``, issue 22): run from a source checkout (the package's
parent directory holds ``pyproject.toml``: a clone, or an editable install of one) it is
``<checkout>/data``; an installed broker (a wheel in site-packages) uses ``/var/lib/amqp-broker``
when run as root, as RabbitMQ's and LavinMQ's Debian packages keep theirs under ``/var/lib``, and
``$XDG_DATA_HOME/amqp-broker`` otherwise (``~/.local/share/amqp-broker`` when XDG_DATA_HOME is
unset, empty or relative, as the XDG Base Directory specification says).

The configuration reference (``docs/configuration.md``) is generated from this module by
``docs/hooks/config_reference.py``: a setting's description is its flag's help, plus
``FIELD_HELP`` (which a key without a flag must have); ``DEFAULT_TEXT`` shows a default that
depends on the machine.

Derived ports (issue 22): management_port and prometheus_port not given at all (no flag, no
``AMQP_BROKER_*`` variable, no TOML key) follow the AMQP port, port + 10000 and port + 10020 (5672
gives RabbitMQ's 15672 / 15692, 5702 gives 15702 / 15722), so brokers started on one host with only
``--port`` apart do not collide. With port 0 (a free AMQP port) they are 0, i.e. off: an
OS-chosen port has no meaningful neighbours; give them to have them. A derived port above 65535 is
a ``ConfigError`` naming the flag to set. The AMQPS port (tls_port, 5671) is not derived (5672 - 1
would be a neighbour's AMQP port); brokers with TLS on one host each give ``--tls-port``.
"""

from __future__ import annotations

import argparse
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, cast

from .core.mechanisms import parse_auth_mechanisms
from .core.settings import BrokerSettings, User, parse_relay_policy
from .protocol.assembler import MAX_MESSAGE_SIZE

__all__ = ["Config", "ConfigError", "load_config", "build_parser", "DEFAULT_DATA_DIR",
           "default_data_dir", "FIELD_HELP", "FLAG_FIELDS", "DEFAULT_TEXT", "USER_KEY_HELP",
           "DERIVED_PORTS", "derived_ports"]

def default_data_dir(package_dir: Path, uid: int, environ: Mapping[str, str]) -> Path:
    """The data directory used when none is configured (module docstring): ``<checkout>/data``
    when ``package_dir`` (the ``amqp_broker`` package's directory) sits in a source checkout (its
    parent holds ``pyproject.toml``); else ``/var/lib/amqp-broker`` for ``uid`` 0 (root, as
    RabbitMQ's and LavinMQ's packages use ``/var/lib/rabbitmq`` and ``/var/lib/lavinmq``); else
    ``$XDG_DATA_HOME/amqp-broker`` from ``environ``, or ``$HOME/.local/share/amqp-broker`` when
    XDG_DATA_HOME is unset, empty or not absolute (XDG Base Directory specification 0.8)."""
    checkout = package_dir.parent
    if (checkout / "pyproject.toml").is_file():
        return checkout / "data"
    if uid == 0:
        return Path("/var/lib/amqp-broker")
    xdg = environ.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "amqp-broker"
    home = environ.get("HOME") or str(Path("~").expanduser())
    return Path(home) / ".local" / "share" / "amqp-broker"


DEFAULT_DATA_DIR = default_data_dir(Path(__file__).resolve().parent,
                                    getattr(os, "geteuid", lambda: -1)(), os.environ)
#: A port not given follows the AMQP port at this offset (module docstring): name -> (offset, flag)
DERIVED_PORTS = {"management_port": (10000, "--management-port"),
                 "prometheus_port": (10020, "--prometheus-port")}


class ConfigError(ValueError):
    """A configuration value or file is invalid (message says which)."""


@dataclass(frozen=True)
class Config:
    """Everything the process needs to start."""

    host: str = "127.0.0.1"
    port: int = 5672
    data_dir: str = str(DEFAULT_DATA_DIR)
    node_name: str = field(default_factory=lambda: f"amqp-broker@{socket.gethostname()}")
    log_level: str = "info"
    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 2047
    max_message_size: int = 16 * 1024 * 1024
    memory_high_watermark: float = 0.4
    sync_policy: str = "batch"
    queue_memory_budget: int = 64 * 1024 * 1024
    disk_free_limit: int = 50_000_000
    cluster_name: str = ""
    seeds: str = ""
    cluster_secret: str = ""
    sync_replies: str = "all"
    ping_interval: float = 0.5
    metadata_timeout: float = 30.0
    relay_policy: str = "pass-on"
    management_port: int = 15672
    prometheus_port: int = 15692
    tls_port: int = 5671
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_verify: str = "verify_none"
    tls_fail_if_no_peer_cert: bool = False
    tls_login_from: str = "common_name"
    management_tls: bool = False
    cluster_tls_dir: str = ""
    auth_mechanisms: str = "PLAIN,AMQPLAIN"
    users: tuple[User, ...] = (User("guest", "guest", ("*",), loopback_only=True),)

    def broker_settings(self) -> BrokerSettings:
        """The core's settings derived from this config."""
        wm = self.memory_high_watermark
        if 0 < wm < 1:
            wm = wm * _total_memory()
        return BrokerSettings(node_name=self.node_name, frame_max=self.frame_max,
                              channel_max=self.channel_max, heartbeat=self.heartbeat,
                              max_message_size=self.max_message_size, users=self.users, memory_high_watermark_bytes=int(wm),
                              queue_memory_budget=self.queue_memory_budget,
                              disk_free_limit_bytes=self.disk_free_limit,
                              relay_policy=parse_relay_policy(self.relay_policy),
                              peer_tls_required=bool(self.cluster_tls_dir),
                              auth_mechanisms=parse_auth_mechanisms(self.auth_mechanisms))

    @property
    def tls_enabled(self) -> bool:
        """True when the AMQPS listener runs (a certificate and key, or a cluster CA dir)."""
        return bool(self.tls_cert and self.tls_key) or bool(self.cluster_tls_dir)


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


# with ``from __future__ import annotations`` a field's type is its annotation text ("str", "int")
_SCALARS = {f.name: cast(str, f.type) for f in fields(Config) if f.name != "users"}
_TYPES = {"str": str, "int": int, "float": float, "bool": bool}
_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _coerce(key: str, value: Any) -> Any:
    want = _TYPES[_SCALARS[key]]
    if want is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _BOOLS:
            return _BOOLS[value.lower()]
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if isinstance(value, want) and not isinstance(value, bool):
        return value
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return want(value)
        except ValueError:
            pass
    raise ConfigError(f"{key}: expected {want.__name__}, got {value!r}")


def _users(raw: Any) -> tuple[User, ...]:
    if not isinstance(raw, list):
        raise ConfigError("users: expected an array of tables")
    out = []
    for item in raw:
        if not isinstance(item, dict):
            raise ConfigError(f"users: bad entry {item!r}")
        name, password = item.get("name"), item.get("password")
        vhosts = item.get("vhosts", ["*"])
        loopback_only = item.get("loopback_only", False)
        if not isinstance(name, str) or not isinstance(password, str):
            raise ConfigError(f"users: name and password must be strings in {item!r}")
        if not isinstance(vhosts, list) or not all(isinstance(v, str) for v in vhosts):
            raise ConfigError(f"users: vhosts must be an array of strings in {item!r}")
        if not isinstance(loopback_only, bool):
            raise ConfigError(f"users: loopback_only must be a boolean in {item!r}")
        out.append(User(name, password, tuple(vhosts), loopback_only))
    return tuple(out)


#: A key's description beyond its flag's help (the only one for a key without a flag), for
#: ``docs/configuration.md``: every ``Config`` field needs a flag with help or an entry here.
FIELD_HELP: dict[str, str] = {
    "channel_max": "highest channel number offered to clients in Connection.Tune (default 2047, "
                   "RabbitMQ's channel_max)",
    "seeds": "in TOML and AMQP_BROKER_SEEDS: the same members as one comma-separated string "
             "\"HOST:PORT,HOST:PORT\"",
    "users": "the accounts (TOML only, as [[users]] tables); default guest/guest, from loopback "
             "only (RabbitMQ \"Access Control\")",
}
#: argparse ``dest`` -> ``Config`` field where the two differ (the repeatable ``--seed`` fills seeds)
FLAG_FIELDS: dict[str, str] = {"seed_list": "seeds"}
#: defaults that depend on the machine, as the reference shows them
DEFAULT_TEXT: dict[str, str] = {
    "data_dir": "<checkout>/data from a source checkout; installed: /var/lib/amqp-broker as root, "
                "else $XDG_DATA_HOME/amqp-broker (~/.local/share/amqp-broker)",
    "node_name": "amqp-broker@<hostname>",
}
#: the keys of a ``[[users]]`` table (``_users``)
USER_KEY_HELP: dict[str, str] = {
    "name": "user name (string, required)",
    "password": "password (string, required; plain text)",
    "vhosts": "virtual hosts the user may open (array of strings; default [\"*\"]: every vhost)",
    "loopback_only": "refuse this user from non-loopback peers, as RabbitMQ's guest (boolean, "
                     "default false)",
}


def build_parser() -> argparse.ArgumentParser:
    """The ``amqp-broker`` argument parser."""
    p = argparse.ArgumentParser(prog="amqp-broker",
                                description="AMQP 0-9-1 message broker (RabbitMQ-compatible).")
    p.add_argument("--config", metavar="FILE",
                   help="TOML configuration file (or the AMQP_BROKER_CONFIG variable)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="AMQP port (default 5672; 0 picks a free one); "
                   "the management and Prometheus ports follow it unless given")
    p.add_argument("--data-dir", help="directory for broker data (default <checkout>/data from a "
                   "source checkout; installed: /var/lib/amqp-broker as root, else "
                   "$XDG_DATA_HOME/amqp-broker)")
    p.add_argument("--node-name", help="this node's name (default amqp-broker@<hostname>)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                   help="log messages of this level and above (default info)")
    p.add_argument("--heartbeat", type=int, metavar="SECONDS",
                   help="heartbeat interval offered to clients in Connection.Tune, s (default 60)")
    p.add_argument("--frame-max", type=int, metavar="BYTES",
                   help="largest frame offered to clients, bytes (default 131072)")
    p.add_argument("--max-message-size", type=int, metavar="BYTES",
                   help="largest message body a client may publish, bytes; a larger one closes "
                   "its channel with 406 PRECONDITION_FAILED (default 16777216 = 16 MiB, as "
                   "RabbitMQ 4.x; at most 536870912 = 512 MiB, as RabbitMQ)")
    p.add_argument("--memory-high-watermark", type=float, metavar="BYTES|FRACTION",
                   help="memory alarm threshold: bytes, or a fraction of RAM when < 1 (0 = off)")
    p.add_argument("--queue-memory-budget", type=int, metavar="BYTES",
                   help="ready message bodies a durable queue keeps in RAM; persistent messages "
                   "beyond it stay on disk until consumers reach them (default 64 MiB; 0 = off)")
    p.add_argument("--disk-free-limit", type=int, metavar="BYTES",
                   help="free disk space on the data directory under which publishers are "
                   "blocked (default 50000000, as RabbitMQ; 0 = off)")
    p.add_argument("--cluster", dest="cluster_name", metavar="NAME",
                   help="cluster name (peers must agree on it)")
    p.add_argument("--seed", dest="seed_list", action="append", metavar="HOST:PORT",
                   help="join the cluster through this member (repeatable)")
    p.add_argument("--cluster-secret", metavar="FILE",
                   help="file holding the shared secret cluster peers authenticate with")
    p.add_argument("--sync-replies", metavar="all|majority|none|N",
                   help="members that must confirm a declare/bind/delete before the client is "
                   "answered (default all)")
    p.add_argument("--ping-interval", type=float, metavar="SECONDS",
                   help="ring ping interval, s (default 0.5)")
    p.add_argument("--metadata-timeout", type=float, metavar="SECONDS",
                   help="a definition change not committed in the cluster metadata log within "
                   "this time is refused with 541 (default 30, RabbitMQ 4's "
                   "khepri_default_timeout)")
    p.add_argument("--relay-policy", metavar="pass-on|hold:SECONDS|drop",
                   help="a message relayed here whose queue has no local consumer any more: give "
                   "it back to its sender (pass-on, default), hold it SECONDS for a new consumer "
                   "first, or drop it")
    p.add_argument("--management-port", type=int, metavar="PORT",
                   help="management HTTP API and web page, on --host (default --port + 10000: "
                   "15672 for 5672; off with --port 0; 0 = off)")
    p.add_argument("--prometheus-port", type=int, metavar="PORT",
                   help="Prometheus /metrics, on --host (default --port + 10020: 15692 for 5672; "
                   "off with --port 0; 0 = off)")
    tls = p.add_argument_group("TLS (RabbitMQ's ssl_options)")
    tls.add_argument("--tls-port", type=int, metavar="PORT",
                     help="AMQPS listener (default 5671, on --host; on when --tls-cert and "
                     "--tls-key are given)")
    tls.add_argument("--tls-cert", metavar="FILE", help="server certificate (PEM, chain first)")
    tls.add_argument("--tls-key", metavar="FILE", help="server private key (PEM)")
    tls.add_argument("--tls-ca", metavar="FILE", help="CA certificates client certificates must "
                     "chain to (PEM)")
    tls.add_argument("--tls-verify", choices=["verify_none", "verify_peer"],
                     help="ask clients for a certificate (verify_peer, needs --tls-ca) or not "
                     "(verify_none, default)")
    tls.add_argument("--tls-fail-if-no-peer-cert", action="store_true", default=None,
                     help="with verify_peer: refuse clients without a certificate")
    tls.add_argument("--tls-login-from", choices=["common_name", "distinguished_name"],
                     help="SASL EXTERNAL's user name: the client certificate's subject CN "
                     "(default) or its DN (RabbitMQ's ssl_cert_login_from)")
    tls.add_argument("--management-tls", action="store_true", default=None,
                     help="serve the management API over HTTPS with --tls-cert/--tls-key")
    tls.add_argument("--cluster-tls-dir", metavar="DIR",
                     help="cluster CA directory (amqp-broker cluster-ca): peer links over mutual "
                     "TLS to the members' TLS ports; cluster-peer connections need its "
                     "certificate")
    p.add_argument("--sync-policy", choices=["batch", "always", "none"],
                   help="message store fsync: batch (group commit, default, safe), always, "
                   "none (no fsync: survives kill -9, not power loss)")
    p.add_argument("--auth-mechanisms", metavar="LIST",
                   help="SASL mechanisms offered to clients, most preferred first, from PLAIN, "
                   "AMQPLAIN and EXTERNAL (the TLS client certificate's name, offered only to "
                   "clients with a verified certificate), e.g. EXTERNAL,PLAIN,AMQPLAIN (default "
                   "PLAIN,AMQPLAIN, as RabbitMQ's auth_mechanisms)")
    return p


def load_config(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> Config:
    """Parse CLI ``argv`` over env ``environ`` over the TOML file over defaults."""
    args = build_parser().parse_args(argv)
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    cfg_file = args.config or env.get("AMQP_BROKER_CONFIG")
    if cfg_file:
        try:
            with open(cfg_file, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {cfg_file}: {exc}") from exc
        for key, value in data.items():
            key = key.replace("-", "_")
            if key == "users":
                values["users"] = _users(value)
            elif key == "auth_mechanisms" and isinstance(value, list):  # a TOML array
                values[key] = ",".join(str(item) for item in value)
            elif key in _SCALARS:
                values[key] = _coerce(key, value)
            else:
                raise ConfigError(f"unknown configuration key {key!r} in {cfg_file}")
    for key in _SCALARS:
        raw = env.get(f"AMQP_BROKER_{key.upper()}")
        if raw is not None:
            values[key] = _coerce(key, raw)
    for key in _SCALARS:
        raw = getattr(args, key, None)
        if raw is not None:
            values[key] = _coerce(key, raw)
    if args.seed_list:
        values["seeds"] = ",".join(args.seed_list)
    values.update(derived_ports(values.get("port", Config.port), values))
    config = replace(Config(), **values)
    if (config.seeds or config.cluster_name) and not config.cluster_secret:
        raise ConfigError("clustering (--seed/--cluster) needs --cluster-secret FILE")
    if config.sync_replies not in ("all", "majority", "none") and not config.sync_replies.isdigit():
        raise ConfigError(f"sync_replies: expected all, majority, none or a number, got "
                          f"{config.sync_replies!r}")
    if not 0 < config.max_message_size <= MAX_MESSAGE_SIZE:
        raise ConfigError(f"max_message_size: expected 1..{MAX_MESSAGE_SIZE} bytes (512 MiB, "
                          f"RabbitMQ's limit), got {config.max_message_size}")
    if config.queue_memory_budget < 0 or config.disk_free_limit < 0:
        raise ConfigError("queue_memory_budget and disk_free_limit must not be negative")
    try:
        parse_relay_policy(config.relay_policy)
    except ValueError as exc:
        raise ConfigError(f"relay_policy: {exc}") from None
    _check_tls(config)
    try:
        parse_auth_mechanisms(config.auth_mechanisms)
    except ValueError as exc:
        raise ConfigError(f"auth_mechanisms: {exc}") from None
    if config.sync_policy not in ("batch", "always", "none"):
        raise ConfigError(f"sync_policy: expected batch, always or none, got {config.sync_policy!r}")
    return config


def derived_ports(port: int, given: dict[str, Any]) -> dict[str, int]:
    """The management and Prometheus ports (``DERIVED_PORTS``) that ``given`` (the values set by
    TOML, environment or flags) lacks, from the AMQP ``port``: port + offset, or 0 (off) for port
    0. Raises ``ConfigError`` for a ``port`` outside 0..65535, or naming the flag to set when a
    derived port would be above 65535."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"port: expected 0..65535, got {port}")
    out = {}
    for key, (offset, flag) in DERIVED_PORTS.items():
        if key in given:
            continue
        derived = port + offset if port else 0
        if derived > 65535:
            raise ConfigError(f"port {port}: the {key} it implies, {port} + {offset} = {derived}, "
                              f"is above 65535; set {flag} (0 = off)")
        out[key] = derived
    return out


def _check_tls(config: Config) -> None:
    """Raise ``ConfigError`` for an inconsistent TLS configuration (files are read at start)."""
    if bool(config.tls_cert) != bool(config.tls_key):
        raise ConfigError("tls_cert and tls_key go together")
    if config.tls_verify not in ("verify_none", "verify_peer"):
        raise ConfigError(f"tls_verify: expected verify_none or verify_peer, got "
                          f"{config.tls_verify!r}")
    if config.tls_verify == "verify_peer" and not config.tls_ca:
        raise ConfigError("tls_verify verify_peer needs tls_ca (the CA client certificates "
                          "chain to)")
    if config.tls_fail_if_no_peer_cert and config.tls_verify != "verify_peer":
        raise ConfigError("tls_fail_if_no_peer_cert needs tls_verify verify_peer")
    if config.tls_login_from not in ("common_name", "distinguished_name"):
        raise ConfigError(f"tls_login_from: expected common_name or distinguished_name, got "
                          f"{config.tls_login_from!r}")
    if config.management_tls and not config.tls_cert:
        raise ConfigError("management_tls needs tls_cert and tls_key")
    if config.cluster_tls_dir:
        from cluster.ca import node_paths
        try:
            crt, key = node_paths(config.cluster_tls_dir, config.node_name)
        except ValueError as exc:
            raise ConfigError(f"cluster_tls_dir: {exc} (the node name is its certificate's "
                              f"name: amqp-broker cluster-ca issue NODE)") from None
        if not crt.exists() or not key.exists():
            raise ConfigError(f"cluster_tls_dir: {crt} or {key} is missing (amqp-broker "
                              f"cluster-ca issue {config.node_name} --dir "
                              f"{config.cluster_tls_dir})")
