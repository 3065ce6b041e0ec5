"""``amqp-broker`` as a user meets it before running a broker (issue 22): ``--version`` prints
"amqp-broker X.Y.Z" (the installed distribution's version, pyproject's from a source tree never
installed) and exits 0; ``--help`` lists every subcommand with a one-line description, for the
console script and ``python -m amqp_broker`` alike; ``amqp-broker help`` shows the same and ``help
SUBCOMMAND`` that one's options; an unknown command exits 2 naming the commands. Real entry points
in subprocesses."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from amqp_broker.__main__ import SUBCOMMANDS, SUMMARIES, broker_version

CHECKOUT = Path(__file__).resolve().parents[2]
PYPROJECT_VERSION = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["version"]


def _entry_points() -> list[list[str]]:
    script = shutil.which("amqp-broker", path=os.path.dirname(sys.executable))
    assert script is not None, "the amqp-broker console script is not installed"
    return [[script], [sys.executable, "-m", "amqp_broker"]]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="100")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("entry", _entry_points(), ids=["amqp-broker", "python -m amqp_broker"])
def test_version_prints_the_distribution_version(entry):
    out = _run([*entry, "--version"])
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"amqp-broker {importlib.metadata.version('amqp-broker')}\n"
    assert out.stdout == f"amqp-broker {PYPROJECT_VERSION}\n"


def test_version_from_a_source_tree_that_was_never_installed(tmp_path):
    # no distribution of that name: the version of the pyproject.toml beside the package
    assert broker_version("no-such-distribution-e22", CHECKOUT / "amqp_broker") == PYPROJECT_VERSION
    assert broker_version("no-such-distribution-e22", tmp_path / "amqp_broker") == "unknown"


def _lists_subcommands(text: str) -> None:
    for name in SUBCOMMANDS:
        line = re.search(rf"^  {re.escape(name)} +(.+)$", text, re.MULTILINE)
        assert line is not None, f"{name} has no line of its own in:\n{text}"
        assert line.group(1) == SUMMARIES[name]


@pytest.mark.parametrize("entry", _entry_points(), ids=["amqp-broker", "python -m amqp_broker"])
def test_help_lists_each_subcommand_on_one_line(entry):
    out = _run([*entry, "--help"])
    assert out.returncode == 0, out.stderr
    assert "--data-dir" in out.stdout and "--version" in out.stdout
    _lists_subcommands(out.stdout)
    # `amqp-broker help` is the same text
    assert _run([*entry, "help"]).stdout == out.stdout


def test_help_subcommand_shows_its_options():
    (script, *_), _ = _entry_points()
    out = _run([script, "help", "ctl"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: amqp-broker ctl")


def test_an_unknown_command_exits_2_naming_the_commands():
    (script, *_), _ = _entry_points()
    for argv in (["stauts"], ["help", "stauts"]):
        out = _run([script, *argv])
        assert out.returncode == 2
        assert "unknown command 'stauts'" in out.stderr
        _lists_subcommands(out.stderr)
        assert "amqp-broker --help" in out.stderr
