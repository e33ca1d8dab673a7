"""What the driver and the executors share of Kafka: metadata questions both ask, and the error
of records gone from the log, which either side may find. So ``driver/`` and ``executor/`` never
import each other (tests/test_layout.py)."""
