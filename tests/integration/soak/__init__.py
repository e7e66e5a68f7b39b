"""A bounded fault-injection soak on loopback (Jepsen-style): real clients, a real broker process
and a real Spark lake process, kill -9 at random moments, then a checker over the log, the Delta
tables and the soak's own ledger. `run.run_soak` is shared by bench/soak.py and
tests/integration/test_soak.py."""
