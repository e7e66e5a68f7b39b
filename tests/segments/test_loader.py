import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from topiclake.segments import filenames as fn
from topiclake.segments.checkpoints import RECOVERY_POINT_CHECKPOINT
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log
from topiclake.segments.loader import load_log

from tests.segments.segment_logs import make_batch, read_all


def fill(directory: Path, config: LogConfig, counts: list[int]) -> list[bytes]:
    """Append batches, flush, and let go without a clean shutdown; returns the stored batches."""
    log = Log.open(directory, config)
    for i, count in enumerate(counts):
        log.append(make_batch(count, timestamp=1_000 + i, value_size=20 + 7 * (i % 5)))
    log.flush()
    stored = read_all(log)
    log.close_handlers()
    return stored


CORPUS_CASES = [
    ("codecrafters-kafka-tester-e856b9a", "foo-0", 3, 2),
    ("codecrafters-kafka-tester-e856b9a", "__cluster_metadata-0", 116, 109),
    ("codecrafters-kafka-tester-510714e", "foo-0", 1, 1),
    ("codecrafters-kafka-tester-510714e", "__cluster_metadata-0", 129, 123),
]


@pytest.mark.parametrize("snapshot, partition_dir, log_end, batch_count", CORPUS_CASES)
def test_kafka_log_dirs_load_and_read_back(corpus_copy, snapshot, partition_dir, log_end, batch_count):
    directory = corpus_copy(snapshot, partition_dir)
    original = (directory / "00000000000000000000.log").read_bytes()
    log = Log.open(directory)  # no marker in the partition dir: every segment is recovered
    assert (log.log_start_offset, log.log_end_offset) == (0, log_end)
    assert log.load_result.truncated_bytes == 0
    batches = read_all(log)
    assert len(batches) == batch_count and b"".join(batches) == original
    log.close()
    assert (directory / "00000000000000000000.log").read_bytes() == original
    assert (directory / fn.CLEAN_SHUTDOWN_FILE).exists()
    assert (directory / "00000000000000000129.snapshot").exists() or "510714e" not in snapshot \
        or partition_dir != "__cluster_metadata-0"


def test_recovering_e856b9a_from_scratch_gives_the_documented_index(corpus_copy):
    directory = corpus_copy("codecrafters-kafka-tester-e856b9a", "__cluster_metadata-0")
    Log.open(directory).close()
    index = (directory / "00000000000000000000.index").read_bytes()
    assert index == bytes.fromhex("00000038 0000101b 0000006f 00002053".replace(" ", ""))  # (56,4123),(111,8275)


@pytest.mark.parametrize("snapshot", ["codecrafters-kafka-tester-e856b9a", "codecrafters-kafka-tester-510714e"])
def test_clean_kafka_dir_keeps_its_index_files(corpus_copy, snapshot):
    directory = corpus_copy(snapshot, "__cluster_metadata-0")
    (directory / fn.CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":6}')
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix in (".index", ".timeindex")}
    log = Log.open(directory)
    assert log.load_result.had_clean_shutdown and log.load_result.recovered == ()
    assert (directory / "00000000000000000000.index").stat().st_size == 10 * 1024 * 1024  # active: preallocated
    log.close()
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix in (".index", ".timeindex")} == before


DAMAGE = st.sampled_from(["cut", "garbage", "flip"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(1, 6), min_size=3, max_size=40), damage=DAMAGE, where=st.floats(0, 1),
       seed=st.integers(0, 2**32))
def test_recovery_ends_at_last_valid_batch_of_active_segment(counts, damage, where, seed):
    config = LogConfig(segment_bytes=700, index_interval_bytes=150)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        stored = fill(directory, config, counts)
        bases = sorted(fn.offset_from_name(p) for p in directory.glob("*.log"))
        active = fn.log_file(directory, bases[-1])
        data = active.read_bytes()
        in_active = [b for b in stored if int.from_bytes(b[:8], "big") >= bases[-1]]
        before = stored[: len(stored) - len(in_active)]
        bounds = [0]
        for b in in_active:
            bounds.append(bounds[-1] + len(b))
        rng = random.Random(seed)
        if damage == "cut":
            cut = int(where * len(data))
            os.truncate(active, cut)
            kept = max(i for i, end in enumerate(bounds) if end <= cut)
        elif damage == "garbage":
            with open(active, "ab") as f:
                f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
            kept = len(in_active)
        else:
            if not data:
                return
            pos = min(int(where * len(data)), len(data) - 1)
            hit = max(i for i, start in enumerate(bounds[:-1]) if start <= pos)
            if pos - bounds[hit] < 8:
                pos = bounds[hit] + 8  # a flipped base offset is out of the CRC: covered elsewhere
            blob = bytearray(data)
            blob[pos] ^= 0xFF
            active.write_bytes(bytes(blob))
            # The leader epoch is outside the CRC too: a flip there is not detected (as in Kafka).
            kept = len(in_active) if 12 <= pos - bounds[hit] < 16 else hit
        log = Log.open(directory, config)
        try:
            survivors = read_all(log)
            assert survivors[: len(before)] == before  # nothing before the active segment is lost
            assert len(survivors) == len(before) + kept
            for got, want in zip(survivors[len(before):], in_active):
                if damage != "flip":
                    assert got == want
            assert os.path.getsize(active) == bounds[kept]
        finally:
            log.close()


def test_truncated_early_segment_deletes_later_segments(tmp_path):
    config = LogConfig(segment_bytes=600)
    directory = tmp_path / "t-0"
    stored = fill(directory, config, [2] * 30)
    bases = sorted(fn.offset_from_name(p) for p in directory.glob("*.log"))
    assert len(bases) >= 4
    (directory / RECOVERY_POINT_CHECKPOINT).unlink()  # recover from the start
    second = fn.log_file(directory, bases[1])
    blob = bytearray(second.read_bytes())
    blob[-5] ^= 1  # corrupt the last batch of the second segment
    second.write_bytes(bytes(blob))
    result = load_log(directory, config, topic="t", partition=0)
    assert [s.base_offset for s in result.segments] == bases[:2]
    assert set(result.deleted) == set(bases[2:])
    assert result.truncated_bytes > 0
    for s in result.segments:
        s.close()
    log = Log.open(directory, config)
    assert read_all(log) == stored[: len(read_all(log))]
    assert not any(fn.log_file(directory, b).exists() for b in bases[2:])
    log.close()


def test_missing_or_corrupt_index_is_rebuilt_and_orphans_removed(tmp_path):
    config = LogConfig(segment_bytes=600, index_interval_bytes=100)
    directory = tmp_path / "t-0"
    log = Log.open(directory, config)
    for _ in range(30):
        log.append(make_batch(2))
    log.close()
    bases = sorted(fn.offset_from_name(p) for p in directory.glob("*.log"))
    expected = fn.index_file(directory, bases[0]).read_bytes()
    assert expected
    fn.index_file(directory, bases[0]).unlink()
    fn.time_index_file(directory, bases[1]).write_bytes(b"\x00" * 13)  # not a multiple of 12
    fn.index_file(directory, 999_999).write_bytes(b"")
    fn.time_index_file(directory, 999_999).write_bytes(b"")
    log = Log.open(directory, config)
    assert set(log.load_result.recovered) == {bases[0], bases[1]}
    assert fn.index_file(directory, bases[0]).read_bytes() == expected
    assert not fn.index_file(directory, 999_999).exists() and not fn.time_index_file(directory, 999_999).exists()
    log.close()


def test_the_load_keeps_its_listing_only_while_nothing_it_did_changed_the_directory(tmp_path):
    """LoadResult.names (what a start reads snapshots, .txnindex files and the marker by instead of
    listing again) is the directory's listing, or None once the load removed or created a file."""
    config = LogConfig(segment_bytes=600, index_interval_bytes=100)
    directory = tmp_path / "t-0"
    fill(directory, config, [2] * 30)
    first = min(fn.offset_from_name(p) for p in directory.glob("*.log"))

    def listing() -> frozenset[str] | None:
        result = load_log(directory, config, topic="t", partition=0)
        for segment in result.segments:
            segment.close()
        return result.names

    assert listing() == frozenset(os.listdir(directory))
    fn.index_file(directory, 999_999).write_bytes(b"")  # an orphan index: the load removes it
    assert listing() is None
    fn.time_index_file(directory, first).unlink()  # a missing index: the load creates and rebuilds it
    assert listing() is None
    (directory / "00000000000000999999.snapshot").write_bytes(b"")  # above the log end: the load removes it
    assert listing() is None
    assert listing() == frozenset(os.listdir(directory))


def test_checkpointed_start_beyond_the_end_empties_the_log(tmp_path):
    directory = tmp_path / "t-0"
    fill(directory, LogConfig(), [3])
    (directory / "log-start-offset-checkpoint").write_text("0\n1\nt 0 50\n")
    log = Log.open(directory)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert [s.base_offset for s in log.segments()] == [50]
    assert log.append(make_batch(1)).first_offset == 50
    log.close()


def _write_segment(directory: Path, base: int, counts: list[int], suffix: str = "") -> int:
    data, offset = b"", base
    for count in counts:
        data += make_batch(count, base_offset=offset)
        offset += count
    fn.log_file(directory, base, suffix).write_bytes(data)
    return offset


SWAP_STATES = {
    # name: (files present for the old segment 0 and the new (cleaned) segment 0, expect new?)
    "cleaned only": ({".log", ".index", ".timeindex"}, {".log.cleaned", ".index.cleaned"}, False),
    "swap, old intact": ({".log", ".index", ".timeindex"}, {".log.swap", ".index.swap", ".timeindex.swap"}, True),
    "swap, old half deleted": ({".log.deleted", ".index", ".timeindex"}, {".log.swap", ".index.swap"}, True),
    "swap, old deleted": ({".log.deleted", ".index.deleted", ".timeindex.deleted"}, {".log.swap"}, True),
    "log renamed, index swap left": ({".log.deleted"}, {".log", ".index.swap", ".timeindex.swap"}, True),
    "done, deleted left": ({".log.deleted", ".index.deleted"}, {".log", ".index", ".timeindex"}, True),
}


@pytest.mark.parametrize("state", list(SWAP_STATES))
def test_swap_crash_states_are_repaired(tmp_path, state):
    old_files, new_files, expect_new = SWAP_STATES[state]
    directory = tmp_path / "t-0"
    directory.mkdir()
    config = LogConfig()
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir(), new_dir.mkdir()
    # old segment 0: offsets 0..9 in five batches; cleaned: only the last two batches kept
    _write_segment(old_dir, 0, [2] * 5)
    for d in (old_dir,):
        log = Log.open(d, config, topic="t", partition=0)
        log.close()
    new_data = make_batch(2, base_offset=6) + make_batch(2, base_offset=8)
    (new_dir / "00000000000000000000.log").write_bytes(new_data)
    log = Log.open(new_dir, config, topic="t", partition=0)
    log.close()
    _write_segment(directory, 10, [3])  # the active segment
    for suffixes, source in ((old_files, old_dir), (new_files, new_dir)):
        for suffix in suffixes:
            kind = "." + suffix.split(".")[1]
            (directory / ("00000000000000000000" + suffix)).write_bytes(
                (source / ("00000000000000000000" + kind)).read_bytes())
    log = Log.open(directory, config)
    names = sorted(os.listdir(directory))
    assert not [n for n in names if n.endswith((".swap", ".cleaned", ".deleted"))]
    batches = read_all(log)
    offsets = [int.from_bytes(b[:8], "big") for b in batches]
    assert offsets == ([6, 8, 10] if expect_new else [0, 2, 4, 6, 8, 10])
    assert log.log_end_offset == 13
    log.close()


def test_unfinished_split_swaps_are_dropped(tmp_path):
    # replace_segments renames .cleaned -> .swap highest base first (as Kafka does), so a crash in
    # that step leaves a .cleaned below every .swap: the loader drops them all, the old data stays.
    directory = tmp_path / "t-0"
    directory.mkdir()
    _write_segment(directory, 0, [2] * 5)
    _write_segment(directory, 10, [1])
    _write_segment(directory, 0, [2, 2], suffix=".cleaned")
    _write_segment(directory, 4, [2] * 3, suffix=".swap")
    log = Log.open(directory)
    offsets = [int.from_bytes(b[:8], "big") for b in read_all(log)]
    assert offsets == [0, 2, 4, 6, 8, 10]
    assert not [n for n in os.listdir(directory) if n.endswith((".swap", ".cleaned"))]
    log.close()
