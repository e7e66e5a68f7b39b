"""Spark SQL over the topic tables, and the `topiclake sql` shell."""
