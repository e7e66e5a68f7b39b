"""The topic's Delta table as its archive (issue 32, docs/ARCHIVE.md): what the table holds of a
partition, and its rows back as record batches. Below the broker and the lake, which both use it:
the broker answers a fetch below the log's start from it, segment retention keeps what it lacks."""
