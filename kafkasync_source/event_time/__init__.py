"""A record's event time: the one seam every reader of time shares (driver and executors)."""
