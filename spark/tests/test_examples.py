"""The examples as a user runs them: their command lines, ``batch_iris`` end to end, and
``stream_source`` stopped with Ctrl-C.

``--help`` of every example and the benchmark (no Spark started). ``batch_iris`` and
``stream_source`` run as their own processes (``python -m spark.examples...``) against the
session's broker (``conftest.broker``): ``batch_iris`` must publish the iris statistics
(scikit-learn's CSV file, from the ``test`` extra), and ``stream_source``, sent SIGINT once it
printed a micro-batch, must stop cleanly: exit 0, its "stopped" line, and no Java or Python
exception in its output (PySpark's own Ctrl-C handler made py4j print "reentrant call" errors,
and a stop during a batch killed Spark's stream thread with ``java.lang.StackOverflowError``).
"""

from __future__ import annotations

import importlib
import json
import signal
import subprocess
import sys
import threading
import time

import pika
import pytest

from spark.tests.conftest import REPO_ROOT, drain

#: Bounds of an example run: a JVM start alone takes 10-30 s, and ``batch_iris`` runs five Spark
#: jobs (30 s on an idle 2-core machine, 2 minutes on a busy one).
RUN_TIMEOUT = 400
slow = pytest.mark.timeout(RUN_TIMEOUT + 60)


@pytest.mark.parametrize("module", ["spark.examples.batch_iris", "spark.examples.streaming_rate",
                                    "spark.examples.stream_source", "spark.bench"])
def test_help(module, capsys):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--uri" in capsys.readouterr().out


def _needs_spark() -> None:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from spark.local import java_missing

    if java_missing():
        pytest.skip(java_missing())


def _example(module: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-u", "-m", module, *args], cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _exception_lines(output: str) -> list[str]:
    return [line for line in output.splitlines()
            if "Exception" in line or "StackOverflowError" in line or "Traceback" in line]


@slow
def test_batch_iris_publishes_the_statistics_per_species(broker, unique):
    _needs_spark()  # scikit-learn (the iris CSV file) comes with the test extra: no skip
    queue, exchange = unique, f"{unique}.ex"
    proc = _example("spark.examples.batch_iris", "--uri", broker.uri, "--queue", queue,
                    "--exchange", exchange)
    output, _ = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, output[-3000:]
    assert "local[2,4]" in output  # the session retries failed tasks
    # connected after the run: an idle pika connection misses its heartbeats meanwhile
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    try:
        got = drain(conn.channel(), queue, 3)
    finally:
        conn.close()
    stats = {row["species"]: row for row in (json.loads(body) for _, body in got)}
    assert sorted(stats) == ["setosa", "versicolor", "virginica"], output[-2000:]
    assert [stats[s]["n"] for s in sorted(stats)] == [50, 50, 50]
    assert stats["setosa"]["petal_length_mean"] == 1.462  # Fisher's data, as every source has it
    assert all(props.content_type == "application/json" for props, _ in got)


@slow
def test_stream_source_stops_cleanly_on_ctrl_c(broker, unique, tmp_path):
    _needs_spark()
    proc = _example("spark.examples.stream_source", "--uri", broker.uri, "--queue", unique,
                    "--exchange", f"{unique}.ex", "--seconds", "0", "--rate", "1000",
                    "--checkpoint", str(tmp_path / "checkpoint"))
    lines: list[str] = []
    batch_seen = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "] batch " in line:
                batch_seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert batch_seen.wait(RUN_TIMEOUT), "".join(lines)[-3000:]
        time.sleep(0.5)  # into the next micro-batch, which runs back to back at this rate
        proc.send_signal(signal.SIGINT)
        proc.wait(RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    reader.join(10)
    output = "".join(lines)
    assert proc.returncode == 0, output[-3000:]
    assert "Ctrl-C: stopping" in output and "] stopped; run again" in output, output[-3000:]
    assert _exception_lines(output) == [], output[-5000:]
