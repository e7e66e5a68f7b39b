"""topiclake.console: a web console over one storage root and its broker (`topiclake console`).

Server-rendered HTML (aiohttp + Jinja2, inline SVG plots): the cluster and its brokers, topics
and a record browser, consumer and share groups with their lag, the Delta tables of the root,
the schema registry's subjects, and throughput and lag plots sampled while the console runs.

It is its own process, above the broker's protocol client and the lake, below the CLI: the
broker process never loads the lake (Delta, pandas), and the console never loads the broker's
server. What it asks the broker, it asks over the Kafka protocol as the logged-in user (SASL),
so it shows only what that user's ACLs let them describe (docs/CONSOLE.md).
"""
