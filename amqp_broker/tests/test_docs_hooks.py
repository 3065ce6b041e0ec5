"""The docs site's generated parts (``docs/hooks``, run by ``mkdocs build`` in ``make lint``): the
configuration reference lists every ``Config`` field with its TOML key, environment variable,
flag and default, every ``[[users]]`` key and every subcommand, and refuses a setting that has no
description; the Benchmarks page's latest results are RESULTS.md's ``## Latest`` section."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import field, fields, make_dataclass
from pathlib import Path
from types import ModuleType

import pytest

from amqp_broker.__main__ import SUBCOMMANDS
from amqp_broker.config import FIELD_HELP, Config
from amqp_broker.core.settings import User

HOOKS = Path(__file__).resolve().parents[2] / "docs" / "hooks"


def _hook(name: str) -> ModuleType:
    """Load ``docs/hooks/<name>.py`` as MkDocs does (a module by path)."""
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", HOOKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


config_reference = _hook("config_reference")
latest_results = _hook("latest_results")


def test_every_setting_is_in_the_reference_with_its_env_var_and_flag():
    text = config_reference.reference_markdown()
    rows = {r.key: r for r in config_reference.settings()}
    assert set(rows) == {f.name for f in fields(Config)} - {"users"}
    for key, row in rows.items():
        assert f"#### `{key}` {{#{key}}}" in text
        assert f"- environment: `AMQP_BROKER_{key.upper()}`" in text
        assert row.description and row.default
    assert "`--port PORT`" in rows["port"].flag
    assert "`--seed HOST:PORT` (repeatable)" == rows["seeds"].flag   # a dest unlike its field
    assert rows["channel_max"].flag == ""                             # a key without a flag
    for user_key in (f.name for f in fields(User)):
        assert f"| `{user_key}` |" in text
    for name in set(SUBCOMMANDS) - {"help"}:
        assert f"usage: amqp-broker {name}" in text
    assert "`--version`" in text and "`--config FILE`" in text


def test_a_setting_without_a_description_fails_the_reference():
    undocumented = make_dataclass("Undocumented", [("shiny_new_knob", int, field(default=3))],
                                  bases=(Config,), frozen=True)
    with pytest.raises(config_reference.MissingDescription, match="shiny_new_knob"):
        config_reference.reference_markdown(undocumented)


def test_a_computed_default_needs_its_text():
    computed = make_dataclass("Computed", [("spool_dir", str, field(default_factory=str))],
                              bases=(Config,), frozen=True)
    with pytest.raises(config_reference.MissingDescription, match="spool_dir"):
        config_reference.settings(computed, field_help={**FIELD_HELP, "spool_dir": "spools"})


def test_the_page_marker_is_replaced_and_other_pages_are_left_alone():
    page = f"# Configuration\n\n{config_reference.MARKER}\n"
    out = config_reference.on_page_markdown(page, page=None, config=None, files=None)
    assert config_reference.MARKER not in out and "## Settings" in out
    assert config_reference.on_page_markdown("# Other\n", page=None, config=None,
                                             files=None) == "# Other\n"


RESULTS = """# Results

Intro.

## Latest

### make bench

| case | msg/s |
|---|---:|
| 1 KiB | 236,291 |

See [the runner](run.py) and [RabbitMQ](https://www.rabbitmq.com/).

## History

### old run

| case | msg/s |
"""


def test_latest_results_are_the_section_between_latest_and_history():
    section = latest_results.latest_section(RESULTS)
    assert section.startswith("### make bench")
    assert "236,291" in section and "old run" not in section and "Intro" not in section
    # a relative link would point outside the docs: it becomes its text and path
    assert "the runner (`benchmarks/run.py`)" in section
    assert "[RabbitMQ](https://www.rabbitmq.com/)" in section


def test_results_without_the_two_headings_fail():
    for text in ("# Results\n\n## History\n", "# Results\n\n## Latest\n\nfigures\n"):
        with pytest.raises(latest_results.MissingSection):
            latest_results.latest_section(text)


def test_the_real_results_file_has_a_latest_section():
    section = latest_results.latest_section(latest_results.RESULTS.read_text(encoding="utf-8"))
    assert "|---" in section   # at least one table of figures
