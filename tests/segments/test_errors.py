"""One type per kind of failure (segments/errors.py): CorruptRecordError means bad bytes and
nothing else; a closed log and a refused maintenance step have types of their own, and every
error that names a place formats it the same way."""

from __future__ import annotations

import pickle

import pytest

from topiclake.segments.errors import CorruptRecordError, LocatedError, LogClosedError, TopiclakeError
from topiclake.segments.maintenance import MaintenanceError


@pytest.mark.parametrize("kind", [CorruptRecordError, MaintenanceError])
def test_located_errors_name_their_place_and_keep_their_type(kind):
    bare = kind("bad length")
    assert str(bare) == "bad length" and (bare.source, bare.position) == (None, None)
    placed = bare.at(source="t-0/00000000000000000000.log", position=61)
    assert type(placed) is kind and placed.reason == "bad length"
    assert str(placed) == "t-0/00000000000000000000.log, position 61: bad length"
    assert placed.at(source="elsewhere", position=0).position == 61  # a known place is kept


def test_each_failure_has_one_type():
    assert issubclass(CorruptRecordError, LocatedError) and issubclass(MaintenanceError, LocatedError)
    assert not issubclass(MaintenanceError, CorruptRecordError)
    assert not issubclass(LogClosedError, CorruptRecordError)
    assert all(issubclass(kind, TopiclakeError) for kind in (CorruptRecordError, MaintenanceError, LogClosedError))


def test_errors_cross_process_boundaries():
    """Spark executors raise them back to the driver: they must survive pickling."""
    for error in (CorruptRecordError("crc mismatch", source="s", position=3), LogClosedError("log t-0 is closed")):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
