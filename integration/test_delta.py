"""kafkasync streams into Delta Lake tables, on the real broker, across a hard stop.

integration/delta_app.py runs as a process of its own, twice: the first run is killed with
SIGKILL (its whole process group: the Python driver, Spark's JVM, the Python workers) while it
appends, after its CDC query failed right after a MERGE; the second continues both from their
checkpoints. Then:

* the appended table holds every record of its topic exactly once;
* the merged table equals the map the change events describe, although Spark ran the failed
  batch again and the topic holds Debezium's re-deliveries of older events: the sequence guard
  (``source.lsn``) made the replayed MERGE change nothing.

Delta's connector is built per Spark line; the Delta release pinned for each line is in
kafkasync_dev/testing/delta.py. Where none exists (PySpark 4.3) the test skips saying so, and
``make parity`` runs it on PySpark 4.2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkasync_dev.testing.broker import KafkaBroker
from kafkasync_dev.testing.mock_cluster import Record

APP = Path(__file__).with_name("delta_app.py")
PARTITIONS = 4
APPENDED = 3000
IDS = 1000
FAIL_BATCH = 2
"""The CDC query fails right after this batch's MERGE committed (batches of 400 events)."""


@pytest.fixture(scope="module")
def jars():
    import pyspark

    from kafkasync_dev.testing.delta import delta_jars

    found, problem = delta_jars(pyspark.__version__)
    if problem:
        if os.environ.get("KAFKASYNC_REQUIRE_DELTA") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    return found


def change_events(base_ms: int) -> tuple[list[Record], dict[int, tuple[str, float]]]:
    """Debezium events (JSON, as its JsonConverter writes them without schemas), keyed by id
    (partition id % 4), and the table they describe: ids created, every third updated, every
    seventh deleted, then, as after a connector restart, the creates of every fifth id delivered
    again (Debezium delivers at least once) - deleted and updated ids among them."""
    events: list[tuple[int, str, int]] = [(i, "c", 0) for i in range(IDS)]
    events += [(i, "u", 1) for i in range(0, IDS, 3)]
    events += [(i, "d", 2) for i in range(0, IDS, 7)]
    records, positions, table = [], {}, {}
    for lsn, (row_id, op, version) in enumerate(events, start=1):
        row = None if op == "d" else {"id": row_id, "name": f"customer-{row_id}-v{version}",
                                      "amount": round(row_id * 1.5 + version, 2)}
        before = None if op == "c" else {"id": row_id, "name": None, "amount": None}
        positions.setdefault(row_id, []).append((lsn, before, row, op))
        records.append(_event(row_id, lsn, before, row, op, base_ms))
        if op == "d":
            table.pop(row_id, None)
        else:
            table[row_id] = (row["name"], row["amount"])
    for row_id in range(0, IDS, 5):  # re-delivered: the create, with its old position and time
        lsn, before, row, op = positions[row_id][0]
        records.append(_event(row_id, lsn, before, row, op, base_ms))
    return records, table


def _event(row_id: int, lsn: int, before, after, op: str, base_ms: int) -> Record:
    committed = base_ms + lsn * 1000
    value = {"before": before, "after": after, "source": {"ts_ms": committed, "lsn": lsn}, "op": op,
             "ts_ms": committed + 5}
    return Record(row_id % PARTITIONS, committed + 5, json.dumps({"id": row_id}), json.dumps(value))


def _run_first(config: dict) -> str:
    """The first run, killed with its whole process group once it says it is ready."""
    process = subprocess.Popen([sys.executable, str(APP), "first", json.dumps(config)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    said = []
    try:
        for line in process.stdout:
            said.append(line)
            if line.startswith("delta-app ready-to-kill"):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(60)
                return line
        raise AssertionError("the first run ended before it was ready:\n" + "".join(said[-60:]))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(60)


def _reports(output: str) -> dict[str, object]:
    return {line.split(" ", 2)[1]: json.loads(line.split(" ", 2)[2])
            for line in output.splitlines() if line.startswith("delta-app ")}


def test_append_and_cdc_merge_each_record_once_across_a_hard_stop(bootstrap_servers, topic_factory, jars, tmp_path):
    append_topic, cdc_topic = topic_factory(PARTITIONS), topic_factory(PARTITIONS)
    base_ms = int(time.time() * 1000) - 3 * 3600 * 1000
    events, expected = change_events(base_ms)
    with KafkaBroker(bootstrap_servers) as broker:
        broker.produce(append_topic, [Record(n % PARTITIONS, base_ms + n, None, f"record-{n}")
                                      for n in range(APPENDED)])
        broker.produce(cdc_topic, events)
    config = {"bootstrap": bootstrap_servers, "append_topic": append_topic, "cdc_topic": cdc_topic,
              "work": str(tmp_path), "jars": jars, "fail_batch": FAIL_BATCH}

    ready = _run_first(config)
    assert "injected failure after the MERGE of batch 2" in ready
    restart = subprocess.run([sys.executable, str(APP), "restart", json.dumps(config)],
                             capture_output=True, text=True, timeout=900)
    assert restart.returncode == 0, restart.stdout[-3000:] + restart.stderr[-3000:]
    reports = _reports(restart.stdout)

    appended = reports["append"]
    assert (appended["rows"], appended["distinct"]) == (APPENDED, APPENDED)
    assert appended["values"] == sorted(f"record-{n}" for n in range(APPENDED))

    rows = {row_id: (name, amount, deleted) for row_id, name, amount, _, deleted in reports["cdc"]["rows"]}
    live = {row_id: (name, amount) for row_id, (name, amount, deleted) in rows.items() if not deleted}
    assert live == expected
    assert {row_id for row_id, (_, _, deleted) in rows.items() if deleted} == set(range(0, IDS, 7))

    batches = [json.loads(line) for line in (tmp_path / "cdc-batches.jsonl").read_text().splitlines()]
    first = [entry["batch"] for entry in batches if entry["run"] == "first"]
    replayed = next(entry for entry in batches if entry["run"] == "restart")
    assert first == list(range(FAIL_BATCH + 1)), "the first run merged batches 0..2, then failed"
    assert replayed["batch"] == FAIL_BATCH, "Spark ran the failed batch again"
    changed = {key: int(value) for key, value in (replayed["metrics"] or {}).items()
               if key in ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")}
    assert not any(changed.values()), f"the replayed MERGE changed rows: {replayed}"
    print(f"\ndelta: {APPENDED} appended once each across SIGKILL ({ready.strip()[:120]}); "
          f"{len(events)} change events -> {len(live)} rows; replay of batch {FAIL_BATCH}: {replayed}", flush=True)
