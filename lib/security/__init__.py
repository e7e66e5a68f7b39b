"""topiclake.security: what the broker, the CLI, the lake and the registry share about security.

Imports only topiclake.segments (import-linter holds it), so every other package can use it:
- `scram`: SCRAM-SHA-256/512 (RFC 5802/7677), Kafka's credential format, server and client side;
- `credentials`: the user store, <root>/cluster/credentials.json (salted, never plain);
- `acls`: Kafka's ACL model (resource patterns, entries, filters) and <root>/cluster/acls.json;
- `client_config`: how a client authenticates (a Kafka client-properties file, `--command-config`,
  or `[client]` of the settings file), for the CLI's protocol client and confluent-kafka.

The broker side (listeners, TLS, SASL, the authorizer, which API needs which operation) lives in
topiclake.broker.security.
"""
