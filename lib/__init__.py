"""topiclake: Kafka's log, made batch-native."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # The version is written once, in pyproject.toml; the installed distribution's metadata carries
    # it. Looked up on first use only: importing topiclake stays free of importlib.metadata.
    if name == "__version__":
        from importlib.metadata import version

        return version("topiclake")
    raise AttributeError(f"module 'topiclake' has no attribute {name!r}")
