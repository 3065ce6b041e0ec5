"""RabbitMQ's Grafana dashboards fill in on our broker as on RabbitMQ 3.10 (issue 26).

One Debian ``prometheus`` (``interop_tests.promserver``, scrape interval 1 s) scrapes ``/metrics``
of a broker of ours (job "ours") and of the private RabbitMQ 3.10 node with rabbitmq_prometheus
(``interop_tests.rabbitmq_node``, job "rabbitmq") after the same load on both (a quorum and a
classic queue, confirmed publishes, unroutable ones dropped and returned, gets with and without
ack, an empty get, a requeued redelivery, manual-ack and auto-ack consumers, channel and queue
churn). Every panel query of "RabbitMQ-Overview" (grafana.com 10991) and
"RabbitMQ-Quorum-Queues-Raft" (11340), at the revision RabbitMQ 3.10.8 ships and the newest one
(``dashboards/rabbitmq_dashboards.json``, with their source: repository, path, commit) is
evaluated through Prometheus' HTTP API for each side, its template variables ($namespace,
$rabbitmq_cluster, $endpoint) resolved as Grafana does (``label_values`` on the side's own
series; the first value, "" when there is none, which matches an absent label), ``$__rate_interval``
as 10s and ``$__range`` as 1m. Each query that returns series on RabbitMQ must return series on
ours with the same label names (our ``rabbitmq_build_info`` adds RabbitMQ's optional
``product_name`` / ``product_version``). ``/metrics/per-object`` is compared too: every metric
both expose has the same label names there, and RabbitMQ's per-queue ``rabbitmq_raft_*`` series
are ours as well; ``promtool check metrics`` passes on both of our endpoints.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pika
import pika.exceptions
import pytest
from prometheus_client.parser import text_string_to_metric_families

from interop_tests.conftest import _free_port
from interop_tests.promserver import PrometheusServer, prometheus_binary
from interop_tests.rabbitmq_node import (
    RabbitMQUnavailable,
    rabbitmq_prometheus_url,
    rabbitmq_uri,
)

pytestmark = [pytest.mark.interop,
              pytest.mark.timeout(300),   # the first test to need RabbitMQ boots it (15-100 s)
              pytest.mark.skipif(prometheus_binary() is None or shutil.which("promtool") is None,
                                 reason="prometheus not installed (interop_tests/setup.sh)")]

DASHBOARDS = Path(__file__).parent / "dashboards" / "rabbitmq_dashboards.json"
#: rabbitmq_build_info labels RabbitMQ adds when product.name / product.version are set.
OPTIONAL_LABELS = {"product_name", "product_version"}


def _load(uri: str, prefix: str) -> list[pika.BlockingConnection]:
    """The same traffic on either broker; returns the connections to keep open (consumers)."""
    params = pika.URLParameters(uri)
    pub = pika.BlockingConnection(params)
    ch = pub.channel()
    ch.confirm_delivery()
    qq, cq, empty, tmp = (f"{prefix}.{n}" for n in ("qq", "cq", "empty", "tmp"))
    ch.queue_declare(qq, durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_declare(cq)
    ch.queue_declare(empty)
    ch.queue_declare(tmp)
    ch.queue_delete(tmp)
    for _ in range(20):
        ch.basic_publish("", qq, b"q" * 100)
        ch.basic_publish("", cq, b"c" * 1000)
    ch.basic_publish("", f"{prefix}.nowhere", b"dropped")
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("", f"{prefix}.nowhere", b"returned", mandatory=True)
    gets = pub.channel()
    gets.basic_get(cq, auto_ack=True)
    method, _, _ = gets.basic_get(cq)
    gets.basic_nack(method.delivery_tag, requeue=True)
    assert gets.basic_get(empty) == (None, None, None)
    gets.close()
    sub = pika.BlockingConnection(params)
    manual = sub.channel()
    manual.basic_qos(prefetch_count=5)

    def ack_two(chan, deliver, _props, _body):
        if deliver.delivery_tag <= 2:
            chan.basic_ack(deliver.delivery_tag)

    manual.basic_consume(qq, ack_two)
    auto = sub.channel()
    auto.basic_consume(cq, lambda *_: None, auto_ack=True)
    sub.process_data_events(1.0)
    return [pub, sub]


def _delete_queues(uri: str, prefix: str) -> None:
    """Remove what ``_load`` declared (the RabbitMQ node is shared by the test session)."""
    with pika.BlockingConnection(pika.URLParameters(uri)) as conn:
        ch = conn.channel()
        for name in ("qq", "cq", "empty"):
            ch.queue_delete(f"{prefix}.{name}")


def _with_job(selector: str, job: str) -> str:
    """``selector`` restricted to ``job`` (a metric name with or without matchers)."""
    if "{" in selector:
        return selector.replace("{", f'{{job="{job}",', 1)
    return f'{selector}{{job="{job}"}}'


def _variables(prom: PrometheusServer, variables: list[dict], job: str) -> dict[str, str]:
    """Grafana's template variables for ``job``'s series: each ``label_values(selector, label)``
    once the variables it names are known (Grafana resolves them in dependency order, not in
    the order listed); the first value, or "" when there is none."""
    values: dict[str, str] = {}
    names = {var["name"] for var in variables}
    todo = list(variables)
    for _ in range(len(variables)):
        for var in list(todo):
            if any(f"${n}" in var["query"] for n in names - set(values) - {var["name"]}):
                continue  # waits for a variable it names
            query = _substitute(var["query"], values)
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query, re.S)
            assert m, f"unexpected variable query {query!r}"
            found = sorted({s[m.group(2)] for s in prom.series(_with_job(m.group(1), job))
                            if m.group(2) in s})
            values[var["name"]] = found[0] if found else ""
            todo.remove(var)
    assert not todo, f"variables naming each other: {todo}"
    return values


def _substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", "10s").replace("$__range", "1m")
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    return expr


def _label_names(result: list[dict]) -> set[frozenset[str]]:
    return {frozenset(set(s["metric"]) - OPTIONAL_LABELS) for s in result}


def _wait_for_samples(prom: PrometheusServer, jobs: tuple[str, ...], count: int,
                      timeout: float = 60.0) -> None:
    """Until each job's target has been scraped ``count`` times (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        done = all(any(float(s["value"][1]) >= count for s in prom.query(
            f'count_over_time(up{{job="{job}"}}[5m])')) for job in jobs)
        if done:
            return
        assert time.monotonic() < deadline, "Prometheus did not scrape both targets in time"
        time.sleep(0.5)


def _samples(url: str) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _per_object_labels(url: str, queues_only: bool = False) -> dict[str, set[frozenset[str]]]:
    """The label-name sets of each metric on ``url``'s ``/metrics/per-object``. With
    ``queues_only``, leaves out the ``rabbitmq_raft_*`` samples of Ra servers that are no queue's
    (no ``queue`` label): RabbitMQ 3.10's stream coordinator (``rabbit_stream_coordinator`` in
    ``ra_metrics``) starts at the first stream declared on the node and stays after it is
    deleted, its Raft series unlabelled. The private RabbitMQ node is shared by every interop
    test of a pytest process (``interop_tests.rabbitmq_node``), and test_streams.py declares
    streams on it: run after it (as pytest-xdist may order them), RabbitMQ has that extra
    label set, run alone it has not. Our broker has no such Ra server."""
    text = urllib.request.urlopen(url + "/metrics/per-object", timeout=30).read().decode()
    out: dict[str, set[frozenset[str]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if queues_only and s.name.startswith("rabbitmq_raft_") and "queue" not in s.labels:
                continue
            out.setdefault(s.name, set()).add(frozenset(set(s.labels) - OPTIONAL_LABELS))
    return out


def test_dashboard_panels_fill_in_as_on_rabbitmq(broker_factory, tmp_path):
    try:
        rabbit_amqp = rabbitmq_uri()
        rabbit_prom = rabbitmq_prometheus_url()
    except RabbitMQUnavailable as exc:
        pytest.skip(str(exc))
    prom_port = _free_port()
    ours = broker_factory("--prometheus-port", str(prom_port))
    ours_prom = f"http://127.0.0.1:{prom_port}"
    prefix = f"dash{os.getpid()}"
    conns = _load(ours.uri, prefix) + _load(rabbit_amqp, prefix)
    prom = PrometheusServer({"ours": f"127.0.0.1:{prom_port}",
                             "rabbitmq": rabbit_prom.removeprefix("http://")}, tmp_path / "prom")
    prom.start()
    try:
        _wait_for_samples(prom, ("ours", "rabbitmq"), 4)
        for c in conns:
            c.process_data_events(0)  # heartbeats
        data = json.loads(DASHBOARDS.read_text())
        failures: list[str] = []
        filled = 0
        for board in data["dashboards"]:
            where = f'{board["dashboard"]} ({board["revision"]})'
            sides = {job: _variables(prom, board["variables"], job)
                     for job in ("ours", "rabbitmq")}
            assert sides["rabbitmq"]["rabbitmq_cluster"] and sides["ours"]["rabbitmq_cluster"]
            for q in board["queries"]:
                theirs = prom.query(_substitute(q["expr"], sides["rabbitmq"]))
                if not theirs:
                    continue  # empty on RabbitMQ 3.10 too (a newer name, or no data)
                filled += 1
                mine = prom.query(_substitute(q["expr"], sides["ours"]))
                if not mine:
                    failures.append(f"{where} {q['panel']!r}: empty on ours: {q['expr']}")
                elif _label_names(mine) != _label_names(theirs):
                    failures.append(f"{where} {q['panel']!r}: labels {_label_names(mine)} "
                                    f"on ours, {_label_names(theirs)} on RabbitMQ")
        assert not failures, "\n".join(failures)
        assert filled >= 70, f"only {filled} panel queries fill in on RabbitMQ: is it scraped?"
    finally:
        prom.stop()
        for c in conns:
            if c.is_open:
                c.close()
    theirs_po = _per_object_labels(rabbit_prom, queues_only=True)
    mine_po = _per_object_labels(ours_prom)
    _delete_queues(rabbit_amqp, prefix)
    for name in ("rabbitmq_raft_term_total", "rabbitmq_raft_log_snapshot_index",
                 "rabbitmq_raft_log_last_applied_index", "rabbitmq_raft_log_commit_index",
                 "rabbitmq_raft_log_last_written_index",
                 "rabbitmq_raft_entry_commit_latency_seconds"):
        assert theirs_po.get(name) == mine_po.get(name) == {frozenset({"vhost", "queue"})}, name
    # ours aggregates the Raft series on /metrics as RabbitMQ does: the sum over the replicas
    # (compared once the log stands still: the consumers' cancels were being committed)
    names = ("rabbitmq_raft_log_commit_index", "rabbitmq_raft_log_last_written_index",
             "rabbitmq_raft_term_total")

    def raft_sums() -> tuple[dict[str, float], dict[str, float]]:
        agg, per = _samples(ours_prom + "/metrics"), _samples(ours_prom + "/metrics/per-object")
        return ({n: agg[(n, frozenset())] for n in names},
                {n: sum(v for (m, _labels), v in per.items() if m == n) for n in names})

    for _ in range(50):
        aggregated, summed = raft_sums()
        if aggregated == summed:
            break
        time.sleep(0.2)
    assert aggregated == summed
    assert aggregated["rabbitmq_raft_log_commit_index"] >= 20   # the 20 publishes at least
    differ = {n: (mine_po[n], theirs_po[n]) for n in set(mine_po) & set(theirs_po)
              if n != "rabbitmq_identity_info" and mine_po[n] != theirs_po[n]}
    assert not differ, differ
    for path in ("/metrics", "/metrics/per-object"):
        text = urllib.request.urlopen(ours_prom + path, timeout=30).read()
        check = subprocess.run(["promtool", "check", "metrics"], input=text,
                               capture_output=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
