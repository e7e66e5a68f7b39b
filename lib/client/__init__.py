"""The Kafka client of the tools (the CLI, the console), layered as aiokafka's is:

    conn.py     one blocking connection to one broker: socket, framing, TLS and SASL login
    client.py   the cluster: bootstrap, metadata, a connection per broker, routing each request
                to the partition's leader or the group's coordinator, retries
    admin.py    what the tools ask, one function each (groups.py: groups; security.py: ACLs, users)

Above admin nothing sees a kio response: answers are results.py's dataclasses, refusals are
errors.py's KafkaError. See docs/CONTRACTS.md.
"""

from .client import ClusterClient, parse_bootstrap
from .conn import AuthenticationError, BrokerConnection
from .errors import CannotConnect, ClientError, KafkaError

__all__ = ["AuthenticationError", "BrokerConnection", "CannotConnect", "ClientError", "ClusterClient", "KafkaError",
           "parse_bootstrap"]
