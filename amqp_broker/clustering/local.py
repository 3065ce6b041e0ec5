"""``python -m amqp_broker.clustering.local`` (``make cluster``): a cluster of N brokers on this machine.

Starts N broker processes on 127.0.0.1, ports ``--base-port``.. (default 5701..), data under
``<project>/data/cluster/nK``, node names n1..nN, a shared secret made once in
``data/cluster/cluster.secret``; n1 founds the cluster and the others join through it. Prints each
member's view (as ``amqp-broker cluster-status`` does) once they agree, then waits; Ctrl-C (or
SIGTERM) stops them all in an orderly way (each sends Cluster.Leave). Source: issue "Peer
clustering" ("a three-broker cluster forms from a fresh clone by one documented command").
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..config import DEFAULT_DATA_DIR
from .cli import broker_status

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the cluster until interrupted; returns the exit code (1 when it did not form)."""
    p = argparse.ArgumentParser(prog="python -m amqp_broker.clustering.local",
                                description="Run a cluster of brokers on 127.0.0.1.")
    p.add_argument("--size", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--base-port", type=int, default=5701, help="first AMQP port (default 5701)")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR / "cluster"))
    args = p.parse_args(argv)
    base = Path(args.data_dir)
    base.mkdir(parents=True, exist_ok=True)
    secret = base / "cluster.secret"
    if not secret.exists():
        secret.write_text(secrets.token_hex(32))
        os.chmod(secret, 0o600)
    procs: list[subprocess.Popen] = []
    stop = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    try:
        for i in range(args.size):
            port = args.base_port + i
            cmd = [sys.executable, "-m", "amqp_broker", "--port", str(port), "--node-name",
                   f"n{i + 1}", "--data-dir", str(base / f"n{i + 1}"), "--cluster-secret",
                   str(secret), "--log-level", "warning",
                   # one host: each member its own management and Prometheus port
                   "--management-port", str(15672 + i), "--prometheus-port", str(15692 + i)]
            if i:
                cmd += ["--seed", f"127.0.0.1:{args.base_port}"]
            procs.append(subprocess.Popen(cmd))
            time.sleep(1.0 if i == 0 else 0.2)
        uris = [f"amqp://127.0.0.1:{args.base_port + i}/" for i in range(args.size)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            views = [broker_status(u, 1.0) for u in uris]
            members = {json.dumps(v.get("cluster_members")) for v in views}
            if len(members) == 1 and all(len(v.get("cluster_members") or []) == args.size
                                         for v in views):
                print(json.dumps({"brokers": views}, indent=2))
                print(f"cluster of {args.size} up; clients: amqp://guest:guest@127.0.0.1:"
                      f"{args.base_port}/ (any member); Ctrl-C stops it", flush=True)
                break
            time.sleep(0.5)
        else:
            print("the cluster did not form within 30 s; see the brokers' output", file=sys.stderr)
            return 1
        while not stop and all(p.poll() is None for p in procs):
            time.sleep(0.5)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
