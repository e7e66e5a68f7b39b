"""Tables and commits: the table schema, typed values, Delta commits with group offsets (delta-rs and
delta-spark), type widening."""
