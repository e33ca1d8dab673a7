"""An executor whose Python cannot import kafkasync says so plainly (executor_import.py), instead
of failing inside Spark's deserializer. The objects Spark pickles into read tasks are pickled
here as Spark does (cloudpickle), and unpickled by a Python that has PySpark but not kafkasync."""

from __future__ import annotations

import os
import subprocess
import sys

import pyspark
from pyspark import cloudpickle

from kafkasync_source.config.options import parse_options
from kafkasync_source.spark.schema import kafka_schema
from kafkasync_source.spark.source import KafkaSyncBatchReader, KafkaSyncDataSource
from kafkasync_source.spark.stream_reader import KafkaSyncStreamReader

OPTIONS = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders", "kafka.sasl.password": "pw-7731"}


def shipped_objects():
    options = parse_options(OPTIONS, streaming=True)
    return [KafkaSyncDataSource(OPTIONS), KafkaSyncStreamReader(options, kafka_schema(False)),
            KafkaSyncBatchReader(parse_options(OPTIONS, streaming=False), kafka_schema(False))]


def test_what_spark_ships_comes_back_whole_where_kafkasync_imports():
    for shipped in shipped_objects():
        back = cloudpickle.loads(cloudpickle.dumps(shipped))
        assert type(back) is type(shipped)
        assert cloudpickle.dumps(back.__dict__) == cloudpickle.dumps(shipped.__dict__)


def test_an_executor_without_kafkasync_is_told_so_plainly(tmp_path):
    """The unpickling Python runs without site-packages processing (-S: no .pth file puts this
    checkout on its path) and gets PySpark's directory only, as an executor does from Spark."""
    pyspark_parent = os.path.dirname(os.path.dirname(pyspark.__file__))
    for index, shipped in enumerate(shipped_objects()):
        payload = tmp_path / f"task-{index}.pickle"
        payload.write_bytes(cloudpickle.dumps(shipped))
        script = (f"import sys; sys.path.append({pyspark_parent!r}); import pickle; "
                  f"pickle.loads(open({str(payload)!r}, 'rb').read())")
        result = subprocess.run([sys.executable, "-S", "-c", script], cwd=tmp_path, capture_output=True,
                                text=True, timeout=120, env={"PATH": os.environ.get("PATH", "")})
        last_line = result.stderr.strip().splitlines()[-1]
        assert result.returncode != 0
        assert last_line.startswith("ImportError: kafkasync cannot be imported on this executor: "
                                    "No module named 'kafkasync_source'."), result.stderr[-2000:]
        assert sys.executable in last_line and "spark.archives" in last_line
        assert "pw-7731" not in result.stderr
