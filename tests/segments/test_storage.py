import json
import multiprocessing
from pathlib import Path

import pytest

from topiclake.segments.checkpoints import format_checkpoint, parse_checkpoint, read_checkpoint, write_checkpoint
from topiclake.segments.errors import (CorruptRecordError, InvalidConfigError, InvalidPartitionsError,
                                       InvalidTopicError, StorageRootError, TopicAlreadyExistsError,
                                       UnknownTopicError)
from topiclake.segments.storage import StorageLayout, TopicRegistry, new_base64_uuid, validate_topic_name


@pytest.mark.parametrize("name", ["../x", "a/b", ".", "..", "", "a" * 250, "a b", "tópico", "x\n", "a:b", "/abs"])
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["a", "a" * 249, "my-topic_1.v2", "__consumer_offsets", "..."])
def test_legal_topic_names(name):
    assert validate_topic_name(name) == name


def test_layout_paths(tmp_path):
    layout = StorageLayout(str(tmp_path))
    assert layout.log_dir("t", 3) == tmp_path / "log" / "t-3"
    assert layout.topic_file("t") == tmp_path / "topics" / "t.json"
    assert layout.tables_dir == tmp_path / "tables" and layout.cluster_dir == tmp_path / "cluster"
    with pytest.raises(InvalidTopicError):
        layout.log_dir("../etc", 0)
    with pytest.raises(InvalidPartitionsError):
        layout.log_dir("t", -1)


def test_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TOPICLAKE_ROOT", str(tmp_path))
    assert StorageLayout.from_env().root == tmp_path
    monkeypatch.delenv("TOPICLAKE_ROOT")
    assert str(StorageLayout.from_env().root) == "data"


@pytest.mark.parametrize("source", ["explicit", "env", "settings"])
def test_url_roots_are_refused_in_one_line_until_served(monkeypatch, tmp_path, source):
    from topiclake.segments.settings import storage_root

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOPICLAKE_ROOT", raising=False)
    explicit, settings = None, {}
    if source == "explicit":
        explicit = "s3://bars/root"
    elif source == "env":
        monkeypatch.setenv("TOPICLAKE_ROOT", "s3://bars/root")
    else:
        settings = {"storage": {"root": "s3://bars/root"}}
    with pytest.raises(StorageRootError) as caught:
        storage_root(settings, explicit)
    assert str(caught.value) == ("object-store roots (s3://bars/root) are not served by this command yet: "
                                 "give a directory as the storage root")
    if source != "settings":
        with pytest.raises(StorageRootError):
            StorageLayout.from_env(explicit)
    with pytest.raises(StorageRootError, match="gs:// roots are not supported"):
        storage_root({}, "gs://bars/root")
    assert list(tmp_path.iterdir()) == []


def test_storage_location_takes_storage_s3_over_the_environment(monkeypatch):
    """For commands that serve a bucket (topiclake sql): [storage.s3] reaches parse_root, and its
    keys win over the AWS environment's; the environment fills in what it leaves out."""
    from topiclake.segments.settings import storage_location
    from topiclake.store.root import LocalRoot, S3Root

    monkeypatch.delenv("TOPICLAKE_ROOT", raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    settings = {"storage": {"root": "s3://lake-bucket/root", "s3": {
        "endpoint": "http://127.0.0.1:7070", "access_key_id": "from-settings", "secret_access_key": "s"}}}
    location = storage_location(settings)
    assert isinstance(location, S3Root)
    assert (location.bucket, location.prefix, location.endpoint, location.region, location.allow_http) == (
        "lake-bucket", "root", "http://127.0.0.1:7070", "eu-west-1", True)
    assert location.credentials.access_key_id == "from-settings"
    assert storage_location({}, "some/dir") == LocalRoot(Path("some/dir"))
    with pytest.raises(StorageRootError, match=r"unknown \[storage.s3\] settings: bucket"):
        storage_location({"storage": {"root": "s3://lake-bucket", "s3": {"bucket": "x"}}})


def test_file_url_roots_are_directories(tmp_path):
    from topiclake.segments.settings import storage_root

    assert storage_root({}, tmp_path.as_uri()) == tmp_path
    assert StorageLayout.from_env(tmp_path.as_uri()).root == tmp_path


def test_cluster_id_created_once(tmp_path):
    layout = StorageLayout(tmp_path)
    first = layout.cluster_id()
    assert len(first) == 22 and first == StorageLayout(tmp_path).cluster_id()
    assert json.loads(layout.cluster_meta_file.read_text())["cluster_id"] == first


def test_uuid_format():
    for _ in range(200):
        text = new_base64_uuid()
        assert len(text) == 22 and not text.startswith("-")
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_registry_lifecycle(tmp_path):
    layout = StorageLayout(tmp_path)
    registry = TopicRegistry(layout)
    meta = registry.create("orders", 3, {"segment.bytes": 1000, "cleanup.policy": "compact"})
    assert meta.config == {"cleanup.policy": "compact", "segment.bytes": "1000"}
    assert len(meta.topic_id) == 22 and meta.log_config.segment_bytes == 1000
    assert registry.get("orders") == meta
    with pytest.raises(TopicAlreadyExistsError):
        registry.create("orders", 1)
    with pytest.raises(InvalidPartitionsError):
        registry.create("zero", 0)
    with pytest.raises(InvalidConfigError):
        registry.create("bad", 1, {"segment.bytes": "x"})
    assert not registry.exists("bad")
    altered = registry.alter_config("orders", {"retention.ms": "5", "segment.bytes": None})
    assert altered.config == {"cleanup.policy": "compact", "retention.ms": "5"}
    assert registry.add_partitions("orders", 5).partitions == 5
    with pytest.raises(InvalidPartitionsError):
        registry.add_partitions("orders", 5)
    assert [t.name for t in registry.list()] == ["orders"]
    layout.log_dir("orders", 1).mkdir(parents=True)
    registry.delete("orders")
    assert not layout.log_dir("orders", 1).exists()
    with pytest.raises(UnknownTopicError):
        registry.get("orders")
    assert not list(layout.topics_dir.glob("*.tmp")) and not list(layout.topics_dir.glob(".*.tmp"))


def _create(root, results):
    try:
        TopicRegistry(StorageLayout(root)).create("race", 1)
        results.put("ok")
    except TopicAlreadyExistsError:
        results.put("exists")


def test_concurrent_create_has_one_winner(tmp_path):
    results = multiprocessing.get_context("fork").Queue()
    procs = [multiprocessing.get_context("fork").Process(target=_create, args=(tmp_path, results)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    outcomes = sorted(results.get() for _ in procs)
    assert outcomes == ["exists", "exists", "exists", "ok"]


def test_checkpoint_format(tmp_path):
    assert format_checkpoint({("foo", 0): 3}) == b"0\n1\nfoo 0 3\n"
    assert parse_checkpoint(b"0\n0\n") == {} and parse_checkpoint(b"") == {}
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_checkpoint(path, {("t", 1): 9, ("a", 0): 1})
    assert read_checkpoint(path) == {("a", 0): 1, ("t", 1): 9}
    assert read_checkpoint(tmp_path / "missing") == {}
    with pytest.raises(CorruptRecordError, match="line 3"):
        parse_checkpoint(b"0\n1\nfoo zero 3\n")
    with pytest.raises(CorruptRecordError, match="declared"):
        parse_checkpoint(b"0\n2\nfoo 0 3\n")
