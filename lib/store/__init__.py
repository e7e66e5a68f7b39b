"""Storage roots and the object-store client: the bottom layer every part of topiclake that reads
or writes a bucket builds on (docs/OBJECT-STORAGE.md). It imports nothing else of topiclake.

    root.py     parse_root: a directory or s3://bucket/prefix, with the server's address and keys
    objects.py  ObjectStore: get, ranges, head, conditional put, list, delete (sync and async)
    errors.py   one error per failure an object store reports
    metrics.py  requests, bytes, errors and latency per operation, for /metrics and the console
"""
