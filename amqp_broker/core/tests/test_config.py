"""config.load_config: defaults < TOML file < AMQP_BROKER_* environment < CLI flags, and its errors.

``amqp_broker.config`` imports ``socket`` (for the default node name), which the import-linter
contract forbids for ``amqp_broker.core`` and everything under it, these tests included; so the
module is loaded with ``importlib`` (invisible to the import graph) instead of an import statement.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from amqp_broker.core.settings import BrokerSettings, User

config = importlib.import_module("amqp_broker.config")
ConfigError = config.ConfigError
load_config = config.load_config


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    cfg = load_config([], {})
    assert (cfg.host, cfg.port, cfg.heartbeat, cfg.frame_max, cfg.channel_max) == (
        "127.0.0.1", 5672, 60, 131072, 2047)
    assert cfg.log_level == "info" and cfg.memory_high_watermark == 0.4
    assert cfg.users == (User("guest", "guest", ("*",), loopback_only=True),)
    assert cfg.node_name.startswith("amqp-broker@")


def test_precedence_defaults_toml_env_cli(tmp_path) -> None:
    path = write(tmp_path, 'port = 1111\nheartbeat = 11\nframe_max = 8192\nhost = "0.0.0.0"\n'
                           'log_level = "debug"\n')
    env = {"AMQP_BROKER_PORT": "2222", "AMQP_BROKER_HEARTBEAT": "22"}
    cfg = load_config(["--config", path, "--port", "3333"], env)
    assert cfg.port == 3333  # CLI beats env and file
    assert cfg.heartbeat == 22  # env beats file
    assert cfg.frame_max == 8192 and cfg.host == "0.0.0.0" and cfg.log_level == "debug"  # file
    assert cfg.channel_max == 2047  # default
    assert load_config(["--config", path], env).port == 2222
    assert load_config(["--config", path], {}).port == 1111


def test_config_file_from_the_environment(tmp_path) -> None:
    path = write(tmp_path, "port = 4444\n")
    assert load_config([], {"AMQP_BROKER_CONFIG": path}).port == 4444
    other = tmp_path / "other.toml"
    other.write_text("port = 5555\n")
    assert load_config(["--config", str(other)], {"AMQP_BROKER_CONFIG": path}).port == 5555


def test_dashed_toml_keys_and_numeric_coercions(tmp_path) -> None:
    path = write(tmp_path, 'frame-max = 65536\nport = "6000"\nmemory_high_watermark = 1000000\n')
    cfg = load_config(["--config", path], {"AMQP_BROKER_MEMORY_HIGH_WATERMARK": "0.25"})
    assert cfg.frame_max == 65536 and cfg.port == 6000
    assert cfg.memory_high_watermark == 0.25
    cfg = load_config(["--config", path], {})
    assert cfg.memory_high_watermark == 1000000.0


def test_cli_flags(tmp_path) -> None:
    cfg = load_config(["--host", "::1", "--node-name", "n@h", "--log-level", "warning",
                       "--frame-max", "4096", "--heartbeat", "0", "--data-dir", str(tmp_path),
                       "--memory-high-watermark", "0"], {})
    assert (cfg.host, cfg.node_name, cfg.log_level, cfg.frame_max, cfg.heartbeat) == (
        "::1", "n@h", "warning", 4096, 0)
    assert cfg.data_dir == str(tmp_path) and cfg.memory_high_watermark == 0.0


def test_bad_cli_value_exits() -> None:
    with pytest.raises(SystemExit):
        load_config(["--port", "abc"], {})
    with pytest.raises(SystemExit):
        load_config(["--log-level", "loud"], {})


def test_unknown_toml_key(tmp_path) -> None:
    path = write(tmp_path, "prot = 5672\n")
    with pytest.raises(ConfigError, match="prot"):
        load_config(["--config", path], {})


@pytest.mark.parametrize("line", ['port = "abc"', "port = true", "port = 1.5", "host = 5",
                                  'heartbeat = [1]', 'memory_high_watermark = "lots"',
                                  "log_level = false"])
def test_wrong_type_in_toml(tmp_path, line) -> None:
    path = write(tmp_path, line + "\n")
    with pytest.raises(ConfigError):
        load_config(["--config", path], {})


@pytest.mark.parametrize("key,value", [("PORT", "abc"), ("HEARTBEAT", "1.5"),
                                       ("MEMORY_HIGH_WATERMARK", "x")])
def test_wrong_type_in_env(key, value) -> None:
    with pytest.raises(ConfigError, match=key.lower()):
        load_config([], {f"AMQP_BROKER_{key}": value})


def test_unreadable_or_invalid_file(tmp_path) -> None:
    with pytest.raises(ConfigError):
        load_config(["--config", str(tmp_path / "missing.toml")], {})
    with pytest.raises(ConfigError):
        load_config(["--config", write(tmp_path, "port = = 1\n")], {})


def test_users_tables(tmp_path) -> None:
    path = write(tmp_path, '[[users]]\nname = "admin"\npassword = "pw"\nvhosts = ["/", "x"]\n'
                           '[[users]]\nname = "local"\npassword = "l"\nloopback_only = true\n')
    cfg = load_config(["--config", path], {})
    assert cfg.users == (User("admin", "pw", ("/", "x"), False), User("local", "l", ("*",), True))


@pytest.mark.parametrize("text", ['users = "admin"', '[[users]]\nname = "no-password"\n',
                                  "users = [1, 2]"])
def test_bad_users(tmp_path, text) -> None:
    with pytest.raises(ConfigError):
        load_config(["--config", write(tmp_path, text + "\n")], {})


def test_users_vhosts_must_be_an_array(tmp_path) -> None:
    path = write(tmp_path, '[[users]]\nname = "a"\npassword = "b"\nvhosts = "prod"\n')
    with pytest.raises(ConfigError):
        load_config(["--config", path], {})


def test_users_loopback_only_must_be_a_boolean(tmp_path) -> None:
    path = write(tmp_path, '[[users]]\nname = "a"\npassword = "b"\nloopback_only = "false"\n')
    with pytest.raises(ConfigError):
        load_config(["--config", path], {})


def test_broker_settings(monkeypatch) -> None:
    cfg = load_config(["--heartbeat", "7", "--frame-max", "8192",
                       "--memory-high-watermark", "123456"], {})
    s = cfg.broker_settings()
    assert isinstance(s, BrokerSettings)
    assert (s.heartbeat, s.frame_max, s.memory_high_watermark_bytes) == (7, 8192, 123456)
    assert s.users == cfg.users and s.node_name == cfg.node_name
    monkeypatch.setattr(config, "_total_memory", lambda: 1000)
    assert load_config(["--memory-high-watermark", "0.4"], {}).broker_settings() \
        .memory_high_watermark_bytes == 400
    assert load_config(["--memory-high-watermark", "0"], {}).broker_settings() \
        .memory_high_watermark_bytes == 0
