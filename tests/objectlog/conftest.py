from __future__ import annotations

import pytest

from topiclake.store.objects import ObjectStore


@pytest.fixture
def bucket_store(s3_root) -> ObjectStore:
    """An object store on the test server's fresh bucket root."""
    return ObjectStore(s3_root.root)
