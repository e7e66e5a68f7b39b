"""The transaction coordinator (KIP-98): pure state, `__transaction_state` records, the
coordinator facade the handlers call, and the per-partition view of open/aborted transactions."""
