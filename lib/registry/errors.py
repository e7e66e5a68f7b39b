"""Confluent Schema Registry's errors: HTTP status, `error_code` and message, as its REST API
answers them (io.confluent.kafka.schemaregistry.rest.exceptions.Errors), so clients that match
on codes or messages behave the same against us."""

from __future__ import annotations


class RegistryError(Exception):
    """An answer the REST API gives as `{"error_code": code, "message": message}`."""

    def __init__(self, http_status: int, error_code: int, message: str):
        super().__init__(message)
        self.http_status = http_status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict:
        return {"error_code": self.error_code, "message": self.message}


class InvalidSchemaError(RegistryError):
    """The schema (or one of its references) does not parse: 422 / 42201."""

    def __init__(self, message: str):
        super().__init__(422, 42201, message)


class StoreConflict(Exception):
    """The `_schemas` log moved while a write was being planned: replay and plan again."""


# -- 404
def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version) -> RegistryError:
    return RegistryError(404, 40406, f"Subject '{subject}' Version {version} was soft deleted."
                                     "Set permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version) -> RegistryError:
    return RegistryError(404, 40407, f"Subject '{subject}' Version {version} was not deleted first before "
                                     "being permanently deleted")


def subject_compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def subject_mode_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")


# -- 409
def incompatible_schema(subject: str, details: list[str]) -> RegistryError:
    return RegistryError(409, 409, f'Schema being registered is incompatible with an earlier schema for subject '
                                   f'"{subject}", details: [{", ".join(details)}]')


# -- 422
def invalid_schema(detail: str) -> InvalidSchemaError:
    return InvalidSchemaError(f"Invalid schema: {detail}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(422, 42202, f"The specified version '{version}' is not a valid version id. Allowed values "
                                     'are between [1, 2^31-1] and the string "latest"')


def invalid_compatibility(level) -> RegistryError:
    return RegistryError(422, 42203, f"Invalid compatibility level {level!r}. Valid values are none, backward, "
                                     "forward, full, backward_transitive, forward_transitive, and full_transitive")


def invalid_mode(mode) -> RegistryError:
    return RegistryError(422, 42204, f"Invalid mode {mode!r}. Valid values are readwrite, readonly, readonly_override "
                                     "and import")


def operation_not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def reference_exists(message: str) -> RegistryError:
    return RegistryError(422, 42206, message)


def id_does_not_match(message: str) -> RegistryError:
    return RegistryError(422, 42207, message)


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(422, 42208, f"The specified subject '{subject}' is not valid.")


def bad_request(message: str) -> RegistryError:
    """A body that is not the JSON the endpoint takes (Confluent answers 422 for these too)."""
    return RegistryError(422, 422, message)


# -- 500
def store_error(message: str) -> RegistryError:
    return RegistryError(500, 50001, message)


def store_timeout(message: str) -> RegistryError:
    return RegistryError(500, 50002, message)
