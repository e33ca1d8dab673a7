"""What every measurement shares, in one place: measurements import it, it imports no measurement.

=====================  ===============================================================================
``brokers``            the real broker, Spark's Kafka connector's jars, the Schema Registry
``spark``              a Spark session; reading a topic with either source, ``availableNow`` into ``noop``
``samplers``           while a read runs: broker bytes, CPU seconds by process, the source runner's RSS
``queries``            streaming queries run until read, their progress, a live query's batches
``backlogs``           the data: backlogs on the embedded cluster or a real broker, live paced producers
``debezium``           Debezium change events in Confluent-framed Avro
``children``           a measurement in a process (a new Spark) of its own
``results``            ``benchmarks/results.json``, the log, medians and targets
``floor_source``       a Python streaming source that reads nothing: Spark's floor for any Python source
``runner_trace``       where a Python source's batch time goes, traced inside Spark's Python processes
``traced_kafkasync``   kafkasync itself, traced by ``runner_trace``
=====================  ===============================================================================

``tests/test_layout.py`` checks that no module here imports a measurement, that the benchmarks
import one another without a circle, and that no private name (``_x``) crosses a file.
"""
