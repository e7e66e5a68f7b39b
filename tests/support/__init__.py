"""Helpers the tests share that are more than a fixture: real servers to run against."""
