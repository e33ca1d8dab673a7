"""How long a test waits for what it waits for before it fails."""

PATIENCE_S = 300.0
"""The deadline of a condition a test waits for — a batch planned, rows in a sink, a query
ended, a listener's report — before it fails. Long enough that only a defect reaches it, however
loaded the machine: a 2-core runner beside other jobs took minutes where an idle one takes
seconds (issue 64); a passing test never waits it out, as it stops waiting when the condition
holds. How fast something ran is ``make bench``'s to measure, never a deadline's."""
