"""What the lake jobs did and how fresh the tables are, for Prometheus and the console."""
