"""The choice between the compiled hot path and its Python source (``amqp_broker_native``):
what a process imports with and without ``AMQP_BROKER_PURE``, and the fall-back to source for a
missing, partial or stale build. Each case runs a fresh interpreter (the choice is made once per
process, at import)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import amqp_broker_native
from amqp_broker_native import LIB, MODULES

PROBE = """
import importlib, json, amqp_broker_native as n
files = {m: importlib.import_module(m).__file__ for m in n.MODULES}
from amqp_broker.protocol import framing
print(json.dumps({"active": n.ACTIVE, "reason": n.REASON, "files": files,
                  "encode_frame": type(framing.encode_frame).__name__}))
"""


def _probe(env_extra: dict[str, str], cwd: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "AMQP_BROKER_PURE"}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_pure_env_runs_every_hot_module_from_its_source() -> None:
    got = _probe({"AMQP_BROKER_PURE": "1"})
    assert got["active"] is False and "AMQP_BROKER_PURE" in got["reason"]
    for mod, file in got["files"].items():
        assert file.endswith(".py") and Path(file).parent != LIB, mod
    assert got["encode_frame"] == "function"  # a Python function


def test_without_the_env_var_all_or_none_of_the_modules_are_compiled() -> None:
    got = _probe({})
    compiled = {mod: Path(file).is_relative_to(LIB) and not file.endswith(".py")
                for mod, file in got["files"].items()}
    if got["active"]:
        assert all(compiled.values()), compiled
        assert got["encode_frame"] == "builtin_function_or_method"  # C code
    else:
        assert not any(compiled.values()), compiled
    # this test process made the same choice
    assert amqp_broker_native.ACTIVE is (got["active"] and "AMQP_BROKER_PURE" not in os.environ)


# ----------------------------------------------------------------- the decision, on a fake tree
@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the loader package over fake sources and a fake build of them (empty
    extension files: the decision only looks at which exist, and at the sources' digests)."""
    shutil.copytree(Path(amqp_broker_native.__file__).parent, tmp_path / "amqp_broker_native",
                    ignore=shutil.ignore_patterns("_lib", "tests", "__pycache__"))
    lib = tmp_path / "amqp_broker_native" / "_lib"
    digests = {}
    for mod in MODULES:
        src = tmp_path.joinpath(*mod.split(".")).with_suffix(".py")
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f"# {mod}\n")
        digests[mod] = hashlib.sha256(src.read_bytes()).hexdigest()
        so = lib.joinpath(*mod.split("."))
        so.parent.mkdir(parents=True, exist_ok=True)
        so.with_name(so.name + EXTENSION_SUFFIXES[0]).write_bytes(b"")
    (lib / ("hotpath__mypyc" + EXTENSION_SUFFIXES[0])).write_bytes(b"")
    (lib / "manifest.json").write_text(json.dumps({"sources": digests}))
    return tmp_path


def _status(root: Path, **env: str) -> tuple[int, str]:
    environ = {k: v for k, v in os.environ.items() if k != "AMQP_BROKER_PURE"}
    environ.update(env)
    out = subprocess.run([sys.executable, "-m", "amqp_broker_native"], cwd=root, env=environ,
                         capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout + out.stderr


def test_a_fresh_build_is_used(tree: Path) -> None:
    assert _status(tree) == (0, "amqp-broker hot path: compiled (mypyc)\n")


def test_pure_env_wins_over_a_build(tree: Path) -> None:
    code, text = _status(tree, AMQP_BROKER_PURE="1")
    assert code == 1 and "AMQP_BROKER_PURE is set" in text
    assert _status(tree, AMQP_BROKER_PURE="0")[0] == 0


def test_an_edited_source_makes_the_build_stale(tree: Path) -> None:
    tree.joinpath("queues", "queue.py").write_text("# edited\n")
    code, text = _status(tree)
    assert code == 2
    assert "stale: queues.queue changed" in text and "make native" in text
    assert "RuntimeWarning" in text  # warned once, on stderr


def test_a_module_added_to_the_list_makes_the_build_stale(tree: Path) -> None:
    manifest = tree / "amqp_broker_native" / "_lib" / "manifest.json"
    sources = json.loads(manifest.read_text())["sources"]
    del sources["queues.discards"]  # built before queues.discards joined MODULES
    manifest.write_text(json.dumps({"sources": sources}))
    code, text = _status(tree)
    assert code == 2  # `make native` rebuilds on 2
    assert "stale: queues.discards added since" in text


@pytest.mark.parametrize("lost", ["manifest.json", "queues/consumers", "hotpath__mypyc"])
def test_a_missing_or_partial_build_falls_back_to_source(tree: Path, lost: str) -> None:
    lib = tree / "amqp_broker_native" / "_lib"
    path = lib / lost if lost.endswith(".json") else lib / (lost + EXTENSION_SUFFIXES[0])
    path.unlink()
    code, text = _status(tree)
    assert code == 1 and "pure Python" in text
