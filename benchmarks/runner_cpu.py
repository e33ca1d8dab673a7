"""What Spark's Python source runner costs per streaming query, phase by phase, without Spark.

Spark starts ``pyspark.sql.streaming.python_streaming_source_runner`` as a new Python process for
every streaming query (PySpark 4.2: ``PythonStreamingSourceRunner``, not through the daemon), with
``$SPARK_HOME/python/lib/pyspark.zip`` first on its ``PYTHONPATH`` (``PythonUtils.sparkPythonPath``;
a pip-installed PySpark ships that zip too). Measured inside Spark, its CPU moves by a fifth from
run to run on a shared 2-core machine (``harness.samplers.CpuByProcess``); this runs the same steps in a
child process given the same ``PYTHONPATH``, on a real broker, and times each with
``getrusage`` (the whole process: librdkafka's threads included):

* ``interpreter``: the interpreter's start; ``runner imports``: the runner module's own imports
  (PySpark, compiled from the zip, which holds no bytecode; pyarrow, numpy);
  ``invalidate_caches``: ``setup_spark_files`` calls ``importlib.invalidate_caches()``, which
  has each zip importer read the zip's directory again. These three are Spark's floor: what any
  Python streaming source pays per query (``floor`` sums them).
* ``unpickle source``: the data source as the runner receives it (cloudpickle), which imports
  kafkasync; ``stream reader``: ``streamReader(schema)``; then each call Spark makes, through the
  runner's own handlers (its JSON and pickling included), for a ``trigger(availableNow=True)``
  read of the backlog: ``prepareForTriggerAvailableNow``, ``initialOffset``, and per trigger
  ``latestOffset`` (with the default read limit), ``reportLatestOffset``, ``partitions``, and
  after a pause as long as the executors would read (``--pause``, librdkafka's threads keep
  running) the previous batch's ``commit``.

Against: Spark's floor for any Python source (``floor``); no target (not in ``make bench``: a
diagnostic of ``benchmarks/backlog_read.py``'s CPU figures).
``python -m benchmarks.runner_cpu`` starts a broker (``harness.brokers``), writes 8 partitions x
50,000 records of 1 KB (``harness.backlogs.produce_backlog``) and prints, as JSON, the phases of an
uncapped read and of one capped at an eighth a trigger, each the median of ``--runs`` children.
A deterministic figure where the machine is busy: run it under ``valgrind --tool=callgrind``
(instructions instead of seconds).
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
_PHASES = "KAFKASYNC_RUNNER_CPU_PHASES"
"""The child's environment variable naming the pickled data source and its schema."""
_CHILD = "--child"


def _pyspark_path() -> str:
    """The ``PYTHONPATH`` Spark gives its Python workers, then this checkout."""
    import pyspark

    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    zips = sorted(os.path.join(lib, name) for name in os.listdir(lib) if name.endswith(".zip"))
    return os.pathsep.join([*zips, os.path.dirname(HERE)])


def run_child(options: dict[str, str], pause_s: float) -> dict[str, float]:
    """One runner's phases, CPU seconds each, for a read with these source options."""
    import subprocess

    from pyspark import cloudpickle

    from kafkasync_source.spark.source import KafkaSyncDataSource

    source = KafkaSyncDataSource(options)
    payload = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"runner-cpu-{os.getpid()}.pickle")
    with open(payload, "wb") as out:
        out.write(cloudpickle.dumps((source, source.schema().json())))
    try:
        env = {**os.environ, "PYTHONPATH": _pyspark_path(), _PHASES: payload}
        done = subprocess.run([sys.executable, "-m", "benchmarks.runner_cpu", _CHILD, str(pause_s)], env=env,
                              cwd=os.path.dirname(HERE), capture_output=True, text=True, timeout=600, check=True)
    finally:
        os.unlink(payload)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(pause_s: float) -> None:
    """The runner's steps in this process (``PYTHONPATH`` as Spark sets it), printed as JSON."""
    import resource

    phases: dict[str, float] = {}
    last = [0.0]

    def phase(name: str) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        now = usage.ru_utime + usage.ru_stime
        phases[name] = phases.get(name, 0.0) + now - last[0]
        last[0] = now

    phase("interpreter")
    import dataclasses
    import importlib

    import pyspark.sql.streaming.python_streaming_source_runner as runner
    from pyspark.serializers import write_with_length
    from pyspark.sql.datasource_internal import _streamReader
    from pyspark.sql.types import StructType, _parse_datatype_json_string
    phase("runner imports")
    importlib.invalidate_caches()
    phase("invalidate_caches")
    with open(os.environ[_PHASES], "rb") as payload:
        source, schema_json = runner.pickleSer.loads(payload.read())
    schema = _parse_datatype_json_string(schema_json)
    assert isinstance(schema, StructType)  # as the runner checks
    phase("unpickle source")
    reader = _streamReader(source, schema)
    phase("stream reader")

    def framed(*texts: str) -> io.BytesIO:
        stream = io.BytesIO()
        for text in texts:
            write_with_length(text.encode("utf-8"), stream)
        stream.seek(0)
        return stream

    def answer(call: Any, *args: Any) -> str:
        out = io.BytesIO()
        call(*args, out)
        return out.getvalue()[4:].decode("utf-8")  # after the length

    limit = reader.getDefaultReadLimit()
    limit_json = json.dumps(dataclasses.asdict(limit) | {"_type": type(limit).__name__})  # type: ignore[call-overload]
    runner.prepare_for_trigger_available_now_func(reader, io.BytesIO())
    phase("prepareForTriggerAvailableNow")
    start = answer(runner.initial_offset_func, reader)
    phase("initialOffset")
    triggers = 0
    while True:
        end = answer(runner.latest_offset_admission_control_func, reader, framed(start, limit_json))
        runner.report_latest_offset_func(reader, io.BytesIO())
        phase("latestOffset and reportLatestOffset")
        if json.loads(end) == json.loads(start):
            break
        triggers += 1
        runner.partitions_func(reader, source, schema, 10_000, framed(start, end), io.BytesIO())
        phase("partitions")
        time.sleep(pause_s)
        phase("pauses (background threads)")
        runner.commit_func(reader, framed(end), io.BytesIO())
        phase("commit")
        start = end
    reader.stop()
    phase("stop")
    phases["floor"] = phases["interpreter"] + phases["runner imports"] + phases["invalidate_caches"]
    phases["total"] = last[0]
    phases["triggers"] = triggers
    print(json.dumps(phases))


def measure(bootstrap: str, topic: str, records: int, runs: int, pause_s: float) -> dict[str, Any]:
    """Per read (uncapped, capped at an eighth), the median of each phase over ``runs`` runners."""
    import statistics

    from benchmarks.backlog_read import CAPPED_SHARE
    from benchmarks.harness.spark import READ_COMMITTED

    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
               "max.task.idle.ms": "0", **READ_COMMITTED}
    reads = {"uncapped": options, "capped": {**options, "maxOffsetsPerTrigger": str(int(records * CAPPED_SHARE))}}
    results: dict[str, Any] = {"records": records, "runs": runs, "pause_s": pause_s}
    for name, read in reads.items():
        measured = [run_child(read, pause_s) for _ in range(runs)]
        results[name] = {phase: round(statistics.median(run[phase] for run in measured), 4) for phase in measured[0]}
        results[name]["kafkasync"] = round(results[name]["total"] - results[name]["floor"], 4)
    return results


def main(argv: Optional[list[str]] = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runners per read (the median is printed)")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between triggers, as executors read")
    parser.add_argument("--records-per-partition", type=int, default=None)
    args = parser.parse_args(argv)
    from benchmarks.harness.backlogs import PARTITIONS, RECORDS_PER_PARTITION, produce_backlog
    from kafkasync_dev.testing.local_broker import real_broker

    per_partition = args.records_per_partition or RECORDS_PER_PARTITION
    with real_broker() as (bootstrap, why_not):
        if bootstrap is None:
            raise SystemExit(why_not)
        topic = f"runner-cpu-{int(time.time())}"
        produce_backlog(bootstrap, topic, per_partition)
        print(json.dumps(measure(bootstrap, topic, PARTITIONS * per_partition, args.runs, args.pause), indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == [_CHILD]:  # before argparse: the child's own imports count as the runner's start
        _child(float(sys.argv[2]))
    else:
        main()
