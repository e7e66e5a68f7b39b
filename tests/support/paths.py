"""Where the tests find the checkout and the shared conformance data."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# shared/ sits beside the project checkout (in CI too); tests read it in place, never copy it in.
# A checkout elsewhere names it with TOPICLAKE_SHARED.
SHARED = Path(os.environ.get("TOPICLAKE_SHARED") or REPO.parent / "shared")
CONFORMANCE = SHARED / "conformance"
KAFKA_38_SEGMENTS = CONFORMANCE / "kafka-3.8-segments"
