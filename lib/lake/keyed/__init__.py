"""Keyed tables: upsert tables (key buckets, staging, merge, tombstones), table kinds, and CDC tables
from Debezium events."""
