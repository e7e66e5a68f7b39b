"""The seam between ingest and typed tables: kept light (no schema library is imported until a
topic has subjects), so a plain ingest pays nothing for it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import pyarrow as pa  # annotations

    from .plan import TypedSpec  # noqa: F401  (ingest's annotations)


@dataclass(frozen=True, slots=True)
class RegistrySource:
    """`[registry]` of the settings file, as ingest uses it."""

    url: str | None = None  # an external registry's REST API; None: replay _schemas from the root
    record_subjects: Mapping[str, tuple[str, ...]] | None = None  # RecordNameStrategy subjects per topic

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "RegistrySource":
        from topiclake.registry.config import RegistryConfig

        config = RegistryConfig.from_settings(settings)
        subjects = {str(t): tuple(str(s) for s in (names if isinstance(names, list) else [names]))
                    for t, names in (config.record_subjects or {}).items()}
        return cls(config.url, subjects)


class RunSchemaRegistry:
    """The schema registry as one ingest or backfill run sees it: its state loaded once, and only
    when a table might use it."""

    def __init__(self, root: Path, source: RegistrySource | None):
        self.root = root
        self.source = source or RegistrySource()
        self._state = None

    @property
    def state(self):
        if self._state is None:
            from .plan import RegistryState, load_registry

            if self.source.url is None and not isinstance(self.root, (str, Path)):
                self._state = RegistryState()  # an object-store root: no _schemas log to replay there yet
            else:
                self._state = load_registry(self.root, self.source.url)
        return self._state

    def typed_pipeline(self, pipeline, table):
        """The pipeline with its typed columns (`table`: the Delta table or None). A table with a
        conf/schemas declaration keeps it: the registry is not asked."""
        if pipeline.value_schema is not None or not self.state.subjects:
            return pipeline
        import pyarrow as pa

        from .plan import plan_typed

        existing = pa.schema(table.schema().to_arrow()) if table is not None else None
        spec = plan_typed(self.state, pipeline.topics, existing=existing,
                          record_subjects=self.source.record_subjects)
        return dataclasses.replace(pipeline, typed=spec) if spec is not None else pipeline


def specs_of(tables) -> dict:
    """table uri -> TypedSpec, for the executors."""
    return {t.pipeline.table_uri: t.pipeline.typed for t in tables if t.pipeline.typed is not None}


def backfill_spec(root: Path, table, topics: tuple[str, ...], source: RegistrySource | None = None):
    """The typed spec a backfill rewrites a registry-typed table with (one with a `*_schema_id`
    column); None for other tables."""
    names = {f.name for f in table.schema().fields}
    if not names & {"value_schema_id", "key_schema_id"}:
        return None
    registry = RunSchemaRegistry(root, source)
    from .plan import plan_typed
    import pyarrow as pa

    return plan_typed(registry.state, topics, existing=pa.schema(table.schema().to_arrow()),
                      record_subjects=registry.source.record_subjects)


def full_schema(spec, partition_by) -> "pa.Schema":
    """The table schema with a spec's typed columns (built-in, typed, partition columns)."""
    import pyarrow as pa

    from ..table.schema import DATA_SCHEMA, PARTITION_COLUMNS

    return pa.schema(list(DATA_SCHEMA) + list(spec.columns) + [pa.field(n, PARTITION_COLUMNS[n]) for n in partition_by])
