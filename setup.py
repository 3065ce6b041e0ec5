"""Build step of ``pip install``: compile the hot-path modules with mypyc (all else is in
pyproject.toml).

The modules listed in ``amqp_broker_native.MODULES`` are compiled as one mypyc group into
``amqp_broker_native/_lib/`` (never beside their sources, so a build cannot shadow an edited
source file: see ``amqp_broker_native``). Anything that stops the build -- mypyc missing, a
type error mypyc refuses, no C compiler -- prints a warning and the install goes on without the
build: the broker then runs from source. ``AMQP_BROKER_PURE_BUILD=1`` skips the compile.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from amqp_broker_native import GROUP, MODULES, source_digests  # noqa: E402

NATIVE = "amqp_broker_native._lib."


def _warn(what: str) -> None:
    print(f"*** amqp-broker: {what}; the broker will run from its Python source", file=sys.stderr)


#: setup.py commands that build extensions. pip's PEP 517 hooks run setup.py three times per
#: install (``egg_info`` for the build requirements, ``dist_info`` for the metadata, then
#: ``editable_wheel`` or ``bdist_wheel``: setuptools' ``build_meta``), and mypyc's type check and
#: C generation take 15-40 s a time, so they run only when one of these commands is there.
BUILDS = {"build", "build_ext", "bdist", "bdist_wheel", "bdist_egg", "editable_wheel", "install",
          "develop"}


def _builds(argv: list[str]) -> bool:
    """Whether setup.py's command line ``argv`` runs a command of ``BUILDS`` (an option's value
    spelled like one counts too: then mypyc runs for nothing, never the other way round)."""
    return any(arg in BUILDS for arg in argv[1:])


def _extensions() -> list:
    """mypyc's extensions for ``MODULES``, their shims renamed to build into ``_lib/``; none when
    setup.py only writes metadata (``_builds``)."""
    if os.environ.get("AMQP_BROKER_PURE_BUILD", "") not in ("", "0"):
        return []
    if not _builds(sys.argv):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        _warn(f"mypyc is not available ({exc})")
        return []
    paths = [str(Path(*mod.split(".")).with_suffix(".py")) for mod in MODULES]
    old = os.getcwd()
    os.chdir(ROOT)  # mypyc reads [tool.mypy] from pyproject.toml in the working directory
    try:
        extensions = mypycify(paths, opt_level="3", group_name=GROUP)
    except (Exception, SystemExit) as exc:  # mypyc exits on an error it reports
        _warn(f"mypyc could not compile the hot path ({exc!r})")
        return []
    finally:
        os.chdir(old)
    for ext in extensions:
        if not ext.name.startswith(NATIVE):  # a module's shim: build it under _lib/ too
            ext.name = NATIVE + ext.name
    return extensions


class BuildNative(build_ext):
    """build_ext that keeps going without the build when the compile fails, and writes
    ``_lib/manifest.json`` (the digests of the sources compiled) only when all of it built."""

    def run(self) -> None:
        self._failed: list[str] = []
        in_place = self.inplace or getattr(self, "editable_mode", False)
        if in_place:  # the copy into the source tree does not make directories
            for ext in self.extensions:
                ROOT.joinpath(*ext.name.split(".")[:-1]).mkdir(parents=True, exist_ok=True)
        try:
            super().run()
        except Exception as exc:  # whatever else stops it: install without the build
            self._failed.append(f"the build ({exc})")
        if not self.extensions:
            return
        if self._failed:
            _warn(f"compiling {', '.join(self._failed)} failed")
            return
        manifest = json.dumps({"sources": source_digests(ROOT)}, indent=1, sort_keys=True)
        out = Path(self.get_ext_fullpath(self.extensions[0].name)).parent
        places = {out / "manifest.json"}
        if in_place:
            places.add(ROOT / "amqp_broker_native" / "_lib" / "manifest.json")
        for place in places:
            place.parent.mkdir(parents=True, exist_ok=True)
            place.write_text(manifest + "\n")

    def build_extension(self, ext) -> None:  # noqa: ANN001 (setuptools' Extension)
        try:
            super().build_extension(ext)
        except Exception as exc:  # CompileError, LinkError, a missing compiler
            print(f"*** amqp-broker: building {ext.name} failed: {exc}", file=sys.stderr)
            self._failed.append(ext.name)


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildNative})
