"""Errors of reading Kafka that either side of a query may raise."""


class KafkaSyncDataLossError(RuntimeError):
    """Records a batch needs are gone from Kafka (retention, truncation, a deleted topic) and
    failOnDataLoss=true."""
