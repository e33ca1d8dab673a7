"""Spark glue: what Spark calls. The data source and its readers (on the driver), the input
partitions handed to tasks, and what a reader does on landing in an executor's Python worker.
"""
