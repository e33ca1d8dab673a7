"""The driver side: runs in Spark's long-lived Python planning runner for the query's life.

The synchronization driver, its Kafka clients (the record fetcher, the time index, the offset
reader, group commits) and bounded runs. Holds threads and consumers; never pickled into tasks.
"""
