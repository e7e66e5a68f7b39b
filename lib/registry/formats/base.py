"""What a parsed schema of any type is (ParsedSchema: the stored form, the normalized form and the
backward-compatibility check), and a reference resolved to the schema it names; each type's module
(avro.py, json_schema.py, protobuf.py) implements them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


class ParsedSchema(ABC):
    schema_type: str
    canonical: str  # what is stored in `_schemas` and served back

    @abstractmethod
    def normalized(self) -> str:
        """The form two schemas are compared in when a client asks to normalize."""

    @abstractmethod
    def backward_errors(self, old: "ParsedSchema", labels: tuple[str, str] = ("new", "old")) -> list[str]:
        """Confluent's incompatibility messages for reading `old`'s data with this schema; `labels`
        name this schema and `old` in the messages."""

    def formatted(self, fmt: str | None) -> str:
        """The schema in a requested output format (`?format=`); the stored form by default."""
        return self.canonical


@dataclass(frozen=True, slots=True)
class ResolvedReference:
    """A reference of the schema being parsed, resolved to the referenced version's schema."""

    name: str
    subject: str
    version: int
    schema: ParsedSchema
