"""What Spark's Python source runner imports of kafkasync, and what the executors still get.

Spark starts ``pyspark.sql.streaming.python_streaming_source_runner`` as a new Python process for
every streaming query; it unpickles the data source (importing its module and, first, the
``kafkasync_source`` package), makes the stream reader and plans batches. Whatever kafkasync
imports there is paid again by every query: code only tasks run (the range reader), only some
options need (a JSONPath's msgspec) or only the user's own process uses (async enrichment, the
listener) is imported where it is used instead. The executors' tasks still import the range
reader where a reader lands, so that an executor lacking something says so plainly
(:mod:`kafkasync_source.spark.executor_import`).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pyspark import cloudpickle

from kafkasync_source.config.options import parse_options
from kafkasync_source.spark.executor_import import RebuiltAfterImport, rebuild
from kafkasync_source.spark.schema import kafka_schema
from kafkasync_source.spark.source import KafkaSyncDataSource
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

OPTIONS = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "startingOffsets": "earliest",
           "maxOffsetsPerTrigger": "1000"}
NOT_FOR_THE_RUNNER = ("kafkasync_source.executor", "kafkasync_source.enrich", "kafkasync_source.event_time.json_path",
                      "msgspec", "kafkasync_source.driver.fetcher")

_LANDING = """
import json, pickle, sys
import pyspark.sql.streaming.python_streaming_source_runner  # what the runner imports before the source
source, reader = open(sys.argv[1], "rb"), open(sys.argv[2], "rb")
data_source = pickle.loads(source.read())
stream_reader = data_source.streamReader(data_source.schema())
runner = sorted(name for name in sys.modules if name.startswith(("kafkasync_source", "msgspec")))
pickle.loads(reader.read())  # as an executor's task lands
executor = sorted(name for name in sys.modules if name.startswith("kafkasync_source"))
print(json.dumps({"runner": runner, "executor": executor}))
"""


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, list[str]]:
    """The modules imported in a new Python by the runner's steps, then by a task's landing."""
    folder = tmp_path_factory.mktemp("runner")
    source, reader = folder / "source.pickle", folder / "reader.pickle"
    source.write_bytes(cloudpickle.dumps(KafkaSyncDataSource(OPTIONS)))
    reader.write_bytes(cloudpickle.dumps(KafkaSyncStreamReader(parse_options(OPTIONS, streaming=True),
                                                               kafka_schema(False))))
    result = subprocess.run([sys.executable, "-c", _LANDING, str(source), str(reader)], capture_output=True,
                            text=True, timeout=120, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_runner_imports_the_driver_and_not_what_only_tasks_or_some_options_need(imported):
    runner = imported["runner"]
    assert "kafkasync_source.driver.sync_driver" in runner  # the check sees what it judges
    assert [name for name in runner if name.startswith(NOT_FOR_THE_RUNNER)] == []


def test_a_task_landing_on_an_executor_imports_the_range_reader(imported):
    assert "kafkasync_source.executor.range_reader" in imported["executor"]


class _NeedsWhatIsMissing(RebuiltAfterImport):
    EXECUTOR_MODULES = ("kafkasync_source.executor.no_such_module",)


def test_an_executor_module_that_cannot_be_imported_is_named_plainly():
    with pytest.raises(ImportError, match="kafkasync cannot be imported on this executor: No module named "
                                          "'kafkasync_source.executor.no_such_module'"):
        rebuild(__name__, _NeedsWhatIsMissing.__qualname__, cloudpickle.dumps({}))


def test_the_package_still_offers_its_names():
    import kafkasync_source

    for name in kafkasync_source.__all__:
        assert getattr(kafkasync_source, name) is not None, name
    assert set(kafkasync_source.__all__) == {*kafkasync_source._EXPORTS, "__version__"}
    assert set(kafkasync_source.__all__) <= set(dir(kafkasync_source))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        kafkasync_source.nothing_here  # noqa: B018
