"""kafkasync: event-time-synchronized Kafka micro-batches for PySpark."""
