"""A private Prometheus server for tests: Debian's ``prometheus`` binary scraping given targets.

``PrometheusServer(jobs, workdir)`` writes a configuration with one scrape job per entry of
``jobs`` (job name -> ``host:port`` of a ``/metrics`` endpoint on 127.0.0.1), scrape and
evaluation interval 1 s, its storage under ``workdir``, its web listener on a free loopback port;
``start()`` waits (bounded) until ``/-/ready``; ``query(expr)`` runs an instant query through the
HTTP API (``/api/v1/query``) and returns its ``result`` list; ``series(selector)`` the label sets
``/api/v1/series`` matches; ``stop()`` ends the process (SIGTERM, then SIGKILL).
Errors: ``RuntimeError`` when the server does not get ready within ``timeout`` seconds (with the
tail of its log) or a query answers ``status: error``. Source: Prometheus "Configuration"
(``scrape_configs``, ``static_configs``) and "HTTP API" documentation (v2.42, Debian 12).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["PrometheusServer", "prometheus_binary"]


def prometheus_binary() -> str | None:
    """Path of Debian's ``prometheus`` (interop_tests/setup.sh installs it), or None."""
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    """One Prometheus process scraping ``jobs`` (see module docstring)."""

    def __init__(self, jobs: dict[str, str], workdir: Path) -> None:
        self.jobs = jobs
        self.workdir = workdir
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Write the configuration, start the server and wait until it is ready."""
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("prometheus is not installed (interop_tests/setup.sh installs it)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        jobs = "".join(f"  - job_name: '{name}'\n    static_configs:\n"
                       f"      - targets: ['{target}']\n" for name, target in self.jobs.items())
        config = self.workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          "  evaluation_interval: 1s\nscrape_configs:\n" + jobs)
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        tail = (self.workdir / "prometheus.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"prometheus did not get ready within {timeout:.0f} s:\n{tail}")

    def _get(self, path: str, params: list[tuple[str, str]]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # 400/422 carry the error in JSON
            answer = json.loads(exc.read())
        if answer.get("status") != "success":
            raise RuntimeError(f"prometheus {path} {params}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query now: the ``result`` list (``metric`` labels and ``value`` each)."""
        data = self._get("/api/v1/query", [("query", expr)])
        return data["result"] if data["resultType"] == "vector" else []

    def series(self, selector: str) -> list[dict[str, str]]:
        """The label sets of the series ``selector`` matches (the last 5 minutes)."""
        start = time.time() - 300
        return self._get("/api/v1/series", [("match[]", selector), ("start", f"{start:.0f}")])

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
