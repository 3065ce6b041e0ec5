"""The lazyfs process: mount :class:`interop_tests.faults.lazyfs.LazyFS` and take commands.

Run as ``python -m interop_tests.faults.lazyfs_daemon MOUNTPOINT BACKING STATE`` (foreground, as
root or through fusermount3): STATE holds lazyfs's ``trash/`` and ``stage/`` and must be on the
backing directory's file system. It prints ``{"ready": true}`` once mounted, then reads commands
on stdin, one a line, and answers each with one JSON line: ``drop`` (``{"files": n, "bytes": n,
"dirs": n, "missing": n, "names": [...]}``: files whose unsynced data was cut, unsynced bytes
undone, directories whose unsynced names were undone, durable names whose file could not be found,
the first 20 names undone as ``+dir/name`` back or ``-dir/name`` gone), ``pending`` (the counts,
nothing undone); an error answers ``{"error": text}``. End of stdin unmounts (``fusermount3 -u
-z``) and exits. Mount options: single-threaded, ``default_permissions``, attribute, entry and
negative timeouts 0 and no kept page cache (``drop`` changes files behind the kernel's back),
``hard_remove`` (an unlinked open file is not renamed to ``.fuse_hidden*``). Binding: mfusepy
(ctypes over Debian's libfuse3), imported only here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .lazyfs import LazyFS

__all__ = ["main"]


def _serve_commands(fs: LazyFS, mountpoint: str, out: Callable[[dict[str, Any]], None]) -> None:
    """Answer stdin's commands; on its end, unmount (the FUSE loop then returns)."""
    for line in sys.stdin:
        cmd = line.strip()
        try:
            if cmd == "drop":
                out(fs.drop())
            elif cmd == "pending":
                out(fs.pending())
            else:
                out({"error": f"unknown command {cmd!r}"})
        except OSError as exc:
            out({"error": str(exc)})
    subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False, timeout=20)


def main(argv: list[str] | None = None) -> int:
    """Mount and serve until stdin ends (see the module docstring). Exit 0, or 1 when the mount
    failed (libfuse's message on stderr)."""
    p = argparse.ArgumentParser(prog="python -m interop_tests.faults.lazyfs_daemon")
    p.add_argument("mountpoint")
    p.add_argument("backing")
    p.add_argument("state")
    args = p.parse_args(argv)
    import mfusepy  # here: importing this module needs no libfuse3

    for d in (args.mountpoint, args.backing, args.state):
        Path(d).mkdir(parents=True, exist_ok=True)
    fs = LazyFS(args.backing, args.state)
    out_lock = threading.Lock()

    def out(obj: dict[str, Any]) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    fs.on_ready = lambda: out({"ready": True})
    threading.Thread(target=_serve_commands, args=(fs, args.mountpoint, out), daemon=True,
                     name="lazyfs-control").start()
    class Fuse(mfusepy.FUSE):   # type: ignore[misc]
        def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
            # ftruncate(2) comes with its handle (mfusepy 3.1 drops it; the path alone fails
            # for an unlinked open file)
            fh = fip.contents.fh if fip else None
            return fs.truncate(None if path is None else path.decode(), length, fh)

    try:
        Fuse(fs, args.mountpoint, foreground=True, nothreads=True, hard_remove=True,
             default_permissions=True, attr_timeout=0, entry_timeout=0, negative_timeout=0,
             fsname="lazyfs")
    except RuntimeError as exc:
        print(f"lazyfs: mount failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
