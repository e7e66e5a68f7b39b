"""What the tests share beyond fixtures (the conftest files hold those and call these): real
servers and processes to run against, raw wire requests, real clients, topics, waits, test data
and paths. A module here imports nothing from the test directories."""
