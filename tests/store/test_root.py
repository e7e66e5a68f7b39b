"""parse_root: every accepted form, every refused one (one line saying what is supported), where
the endpoint and keys come from, and that secrets never print."""

from __future__ import annotations

from pathlib import Path

import pytest

from topiclake.store.errors import RootError
from topiclake.store.root import LocalRoot, S3Root, is_url, parse_root

ENV = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "AKIAENVKEY0001",
       "AWS_SECRET_ACCESS_KEY": "env-secret-value", "AWS_REGION": "eu-west-1"}


@pytest.mark.parametrize("text, path", [
    ("data", Path("data")),
    ("./data/root", Path("data/root")),
    ("/srv/topiclake", Path("/srv/topiclake")),
    ("file:///srv/topiclake", Path("/srv/topiclake")),
    ("file://localhost/srv/my%20root", Path("/srv/my root")),
    ("data:1", Path("data:1")),  # a colon without // is part of a file name
])
def test_paths_are_local_roots(text, path):
    assert parse_root(text, env=ENV) == LocalRoot(path)
    assert not isinstance(parse_root(Path(text), env=ENV), S3Root)


@pytest.mark.parametrize("text, bucket, prefix", [
    ("s3://bars", "bars", ""),
    ("s3://bars/", "bars", ""),
    ("s3://bars/root", "bars", "root"),
    ("s3://bars/a/b/c/", "bars", "a/b/c"),
    ("s3a://bars/a/b", "bars", "a/b"),
    ("S3://my.bucket-1/x=1", "my.bucket-1", "x=1"),
])
def test_s3_urls(text, bucket, prefix):
    root = parse_root(text, env=ENV)
    assert (root.bucket, root.prefix) == (bucket, prefix)
    assert root.uri() == f"s3://{bucket}" + (f"/{prefix}" if prefix else "")


@pytest.mark.parametrize("text, says", [
    ("gs://bars/root", "gs:// roots are not supported"),
    ("abfss://c@acct.dfs.core.windows.net/x", "abfss:// roots are not supported"),
    ("hdfs://namenode:8020/x", "hdfs:// roots are not supported"),
    ("http://127.0.0.1:9000/bars", "http:// roots are not supported"),
    ("s3://", "names no bucket"),
    ("s3:///root", "names no bucket"),
    ("s3://ab/x", "'ab' is not a valid bucket name"),
    ("s3://Bars/x", "'Bars' is not a valid bucket name"),
    ("s3://bar_s/x", "'bar_s' is not a valid bucket name"),
    ("s3://-bars/x", "'-bars' is not a valid bucket name"),
    ("s3://b..ars/x", "'b..ars' is not a valid bucket name"),
    ("s3://192.168.1.1/x", "'192.168.1.1' is not a valid bucket name"),
    ("s3://bars:9000/x", "'bars:9000' is not a valid bucket name"),
    ("s3://bars/a/../b", "the prefix"),
    ("s3://bars/..", "the prefix"),
    ("s3://bars/a/./b", "the prefix"),
    ("s3://bars/a//b", "the prefix"),
    ("s3://bars/a b", "the prefix"),
    ("s3://bars/x?versionId=1", "no ?query"),
    ("file://otherhost/srv", "file:///absolute/path"),
])
def test_refused_in_one_line_saying_what_is_supported(text, says):
    with pytest.raises(RootError) as caught:
        parse_root(text, env=ENV)
    message = str(caught.value)
    assert says in message
    assert "\n" not in message
    if "not supported" in says or "no bucket" in says:
        assert "s3://bucket[/prefix]" in message


def test_keys_in_the_url_are_refused_and_not_printed():
    with pytest.raises(RootError) as caught:
        parse_root("s3://AKIAX:sekrit@bars/root", env=ENV)
    assert "sekrit" not in str(caught.value) and "AKIAX" not in str(caught.value)
    assert "keys never go in the URL" in str(caught.value)
    with pytest.raises(RootError) as caught:
        parse_root("gs://user:sekrit@bars/root", env=ENV)
    assert "sekrit" not in str(caught.value)


def test_is_url():
    assert is_url("s3://b/r") and is_url("gs://x") and is_url("file:///x")
    assert not is_url("data") and not is_url("data:1") and not is_url(Path("s3://b/r"))


def test_endpoint_region_and_keys_from_the_environment():
    root = parse_root("s3://bars/root", env=ENV)
    assert root.endpoint == "http://127.0.0.1:9000"
    assert root.region == "eu-west-1"
    assert (root.credentials.access_key_id, root.credentials.secret_access_key) == ("AKIAENVKEY0001", "env-secret-value")
    assert root.credentials.session_token is None
    assert root.allow_http, "an http:// endpoint says plain http is meant"


def test_s3_specific_endpoint_and_default_region_variables():
    env = {**ENV, "AWS_ENDPOINT_URL_S3": "https://s3.example.test/", "AWS_REGION": "",
           "AWS_DEFAULT_REGION": "ap-south-1"}
    root = parse_root("s3://bars", env=env)
    assert root.endpoint == "https://s3.example.test"  # the S3 one wins over AWS_ENDPOINT_URL
    assert root.region == "ap-south-1"
    assert not root.allow_http


def test_nothing_set_means_aws_itself_with_its_own_credential_chain():
    root = parse_root("s3://bars/root", env={})
    assert (root.endpoint, root.region, root.credentials, root.allow_http) == (None, "us-east-1", None, False)
    assert root.hadoop_conf() == {"fs.s3a.endpoint.region": "us-east-1"}


def test_settings_override_the_environment_key_by_key():
    settings = {"endpoint": "https://minio.internal:9000", "region": "us-west-2"}
    root = parse_root("s3://bars/root", settings, env=ENV)
    assert (root.endpoint, root.region) == ("https://minio.internal:9000", "us-west-2")
    assert root.credentials.access_key_id == "AKIAENVKEY0001", "keys not in the settings still come from the env"
    assert not root.allow_http


def test_settings_keys_replace_the_environment_keys_as_a_set():
    settings = {"access_key_id": "AKIASETTINGS01", "secret_access_key": "settings-secret", "session_token": "tok"}
    root = parse_root("s3://bars", settings, env={**ENV, "AWS_SESSION_TOKEN": "env-token"})
    assert (root.credentials.access_key_id, root.credentials.secret_access_key,
            root.credentials.session_token) == ("AKIASETTINGS01", "settings-secret", "tok")
    with pytest.raises(RootError, match=r"\[storage.s3\] secret_access_key is missing"):
        parse_root("s3://bars", {"access_key_id": "AKIASETTINGS01"}, env=ENV)  # never paired with the env's secret


@pytest.mark.parametrize("env, message", [
    ({"AWS_ACCESS_KEY_ID": "AKIA1"}, r"\$AWS_SECRET_ACCESS_KEY is missing"),
    ({"AWS_SECRET_ACCESS_KEY": "s"}, r"\$AWS_ACCESS_KEY_ID is missing"),
    ({"AWS_SESSION_TOKEN": "t"}, r"\$AWS_SESSION_TOKEN is set without an access key"),
    ({"AWS_ALLOW_HTTP": "maybe"}, r"\$AWS_ALLOW_HTTP must be true or false"),
    ({"AWS_ENDPOINT_URL": "127.0.0.1:9000"}, "must be an http:// or https:// URL"),
    ({"AWS_ENDPOINT_URL": "http://k:s@127.0.0.1:9000"}, "keys never go in the URL"),
])
def test_inconsistent_environment_is_refused(env, message):
    with pytest.raises(RootError, match=message):
        parse_root("s3://bars", env=env)


@pytest.mark.parametrize("settings, message", [
    ({"endpiont": "http://x"}, r"unknown \[storage.s3\] settings: endpiont"),
    ({"allow_http": "yes"}, r"\[storage.s3\] allow_http must be true or false"),
    ({"region": 1}, r"\[storage.s3\] region must be a string"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(RootError, match=message):
        parse_root("s3://bars", settings, env={})


def test_http_only_when_the_endpoint_says_so_or_it_is_allowed():
    https = parse_root("s3://bars", {"endpoint": "https://s3.internal"}, env={})
    assert not https.allow_http
    assert parse_root("s3://bars", {"endpoint": "https://s3.internal", "allow_http": True}, env={}).allow_http
    assert parse_root("s3://bars", {"endpoint": "https://s3.internal"}, env={"AWS_ALLOW_HTTP": "true"}).allow_http
    assert parse_root("s3://bars", {"endpoint": "http://s3.internal"}, env={}).allow_http
    with pytest.raises(RootError, match="plain http but allow_http is false"):
        parse_root("s3://bars", {"endpoint": "http://s3.internal", "allow_http": False}, env={})
    with pytest.raises(RootError, match="plain http but allow_http is false"):
        parse_root("s3://bars", env={"AWS_ENDPOINT_URL": "http://s3.internal", "AWS_ALLOW_HTTP": "false"})


def test_secrets_never_in_str_or_repr():
    settings = {"access_key_id": "AKIAVISIBLE0042", "secret_access_key": "very-secret-value",
                "session_token": "secret-session-token"}
    root = parse_root("s3://bars/root", settings, env=ENV)
    for text in (str(root), repr(root), repr(root.credentials), str(root.credentials)):
        assert "very-secret-value" not in text and "secret-session-token" not in text
    assert str(root) == "s3://bars/root"
    assert "0042" in repr(root) and "AKIAVISIBLE0042" not in repr(root), "the key id is shown masked"


def test_keys_and_uris_under_the_prefix():
    root = parse_root("s3://bars/topiclake/prod", env=ENV)
    assert root.key() == "topiclake/prod"
    assert root.key("tables", "t") == root.key("tables/t") == "topiclake/prod/tables/t"
    assert root.uri("tables", "t") == "s3://bars/topiclake/prod/tables/t"
    assert root.pyarrow_path("tables/t") == "bars/topiclake/prod/tables/t"
    assert parse_root("s3://bars", env=ENV).key("a") == "a"
    for bad in ("../x", "a/../../x", "a//b", "/a", "a/", ".", "a b", "a\nb"):
        with pytest.raises(RootError):
            root.key(bad)


def test_delta_storage_options():
    root = parse_root("s3://bars/root", env={**ENV, "AWS_SESSION_TOKEN": "tok"})
    assert root.delta_storage_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIAENVKEY0001",
        "AWS_SECRET_ACCESS_KEY": "env-secret-value", "AWS_SESSION_TOKEN": "tok", "AWS_ALLOW_HTTP": "true",
        "AWS_CONDITIONAL_PUT": "etag"}
    assert parse_root("data", env=ENV).delta_storage_options() == {}


def test_hadoop_conf():
    assert parse_root("s3a://bars/root", env=ENV).hadoop_conf() == {
        "fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.endpoint.region": "eu-west-1",
        "fs.s3a.path.style.access": "true", "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": "AKIAENVKEY0001", "fs.s3a.secret.key": "env-secret-value",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}
    https = parse_root("s3://bars", {"endpoint": "https://s3.internal"}, env={})
    assert https.hadoop_conf()["fs.s3a.connection.ssl.enabled"] == "true"
    assert "fs.s3a.aws.credentials.provider" not in https.hadoop_conf()


def test_pyarrow_filesystem_reads_what_the_store_wrote(s3_root):
    from topiclake.store.objects import ObjectStore

    root = s3_root.root
    ObjectStore(root).put("dir/hello.txt", b"hello from obstore")
    filesystem = root.pyarrow_filesystem()
    with filesystem.open_input_stream(root.pyarrow_path("dir/hello.txt")) as stream:
        assert stream.read() == b"hello from obstore"
