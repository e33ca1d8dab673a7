"""What a query reports: the listener that turns kafkasync's offsets and live report into metrics."""
