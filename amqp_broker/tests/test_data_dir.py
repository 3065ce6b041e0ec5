"""The default data directory (``config.default_data_dir``, issue 22): a source checkout keeps
``<checkout>/data``; an installed broker uses ``/var/lib/amqp-broker`` as root (as RabbitMQ's and
LavinMQ's packages use ``/var/lib/...``), else ``$XDG_DATA_HOME/amqp-broker`` with the XDG Base
Directory specification's fallback ``$HOME/.local/share``. The last test runs a copy of the package
laid out as a wheel installs it (no ``pyproject.toml`` beside it) in a real interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from amqp_broker.config import DEFAULT_DATA_DIR, Config, build_parser, default_data_dir

CHECKOUT = Path(__file__).resolve().parents[2]


def _installed(tmp_path: Path) -> Path:
    package = tmp_path / "site-packages" / "amqp_broker"
    package.mkdir(parents=True)
    return package


def test_a_source_checkout_keeps_its_data_directory_whoever_runs_it(tmp_path):
    package = tmp_path / "clone" / "amqp_broker"
    package.mkdir(parents=True)
    (tmp_path / "clone" / "pyproject.toml").write_text('[project]\nname = "amqp-broker"\n')
    for uid in (0, 1000):
        assert default_data_dir(package, uid, {"HOME": "/home/u"}) == tmp_path / "clone" / "data"


def test_this_checkout_runs_with_data_under_it():
    assert DEFAULT_DATA_DIR == CHECKOUT / "data"
    assert Config().data_dir == str(CHECKOUT / "data")


def test_installed_as_root_uses_var_lib(tmp_path):
    env = {"HOME": "/root", "XDG_DATA_HOME": "/root/.xdg"}
    assert default_data_dir(_installed(tmp_path), 0, env) == Path("/var/lib/amqp-broker")


def test_installed_as_a_user_uses_xdg_data_home(tmp_path):
    package = _installed(tmp_path)
    env = {"HOME": "/home/u", "XDG_DATA_HOME": "/srv/u-data"}
    assert default_data_dir(package, 1000, env) == Path("/srv/u-data/amqp-broker")


def test_without_a_usable_xdg_data_home_it_is_under_home(tmp_path):
    package = _installed(tmp_path)
    want = Path("/home/u/.local/share/amqp-broker")
    assert default_data_dir(package, 1000, {"HOME": "/home/u"}) == want
    # empty or relative: the XDG Base Directory specification says to ignore it
    for xdg in ("", "relative/dir"):
        assert default_data_dir(package, 1000, {"HOME": "/home/u", "XDG_DATA_HOME": xdg}) == want


def test_help_names_the_default():
    (help_text,) = (a.help for a in build_parser()._actions if "--data-dir" in a.option_strings)
    assert "/var/lib/amqp-broker" in help_text and "$XDG_DATA_HOME/amqp-broker" in help_text


def test_an_installed_copy_of_the_package_does_not_write_into_site_packages(tmp_path):
    site = tmp_path / "site-packages"
    shutil.copytree(CHECKOUT / "amqp_broker", site / "amqp_broker",
                    ignore=shutil.ignore_patterns("tests", "__pycache__"))
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "XDG_DATA_HOME"}
    env.update(PYTHONPATH=str(site), HOME=str(home))
    out = subprocess.run(
        [sys.executable, "-c", "import amqp_broker.config as c; print(c.__file__); "
         "print(c.Config().data_dir)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    module_file, data_dir = out.stdout.split()
    assert Path(module_file).is_relative_to(site)   # the copy ran, not the checkout
    want = "/var/lib/amqp-broker" if os.geteuid() == 0 else str(home / ".local/share/amqp-broker")
    assert data_dir == want
