"""Development support for kafkasync, kept out of the wheel users install on every executor.

* :mod:`kafkasync_dev.testing`: the embedded Kafka cluster, Apache Kafka from Maven Central,
  certificates and Java stores, Spark launchers (local, standalone), data sets of the tests;
* :mod:`kafkasync_dev.demo`: ``make demo``.

It is importable from a checkout (``make venv`` installs the checkout in compat editable mode,
which puts its root on ``sys.path``), by the tests, ``integration/``, the benchmarks and the demo.
"""
