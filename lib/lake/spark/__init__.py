"""Spark in the lake jobs: the session, Delta's jars, the driver JVM's start-up, Python workers, job
progress, the executors' zip."""
