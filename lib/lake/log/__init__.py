"""Reading the log (driver and executors): partitions' segment files, header scans, read plans, offset
specs, decoding a task's byte range."""
