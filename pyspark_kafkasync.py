"""Spark data source discovery hook for kafkasync.

PySpark imports top-level modules named ``pyspark_*`` that expose a
``DefaultSource`` and registers it under ``DefaultSource.name()``
("kafkasync"), so after ``pip install`` users can write
``spark.readStream.format("kafkasync")`` without calling
``spark.dataSource.register``.
"""

from kafkasync_source.spark.source import KafkaSyncDataSource as DefaultSource

__all__ = ["DefaultSource"]
