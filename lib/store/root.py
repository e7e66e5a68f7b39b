"""Storage roots: a local directory, or a bucket and prefix on an S3-compatible object store.

    data/  /srv/topiclake  file:///srv/topiclake      -> LocalRoot
    s3://bucket[/prefix]   s3a://bucket[/prefix]       -> S3Root (s3a: Hadoop's name for the same)

Where the server is and who we are come from the standard AWS environment, as boto3 and delta-rs
read it, or from the settings file's [storage.s3] table, whose keys win key by key (the keys as a
set: an access key from one place and its secret from another would never make a pair). A plain
http endpoint is allowed when the endpoint URL says http:// (or allow_http is set); otherwise
https. Anything else is refused in one line that says what is supported.

A root prints without secrets: str() is the URL, repr() names the access key id masked.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit

from .errors import RootError

SUPPORTED = "a directory, file:///path, s3://bucket[/prefix] or s3a://bucket[/prefix]"
DEFAULT_REGION = "us-east-1"  # what boto3 and object_store assume for a custom endpoint too
S3_SETTINGS = ("endpoint", "region", "access_key_id", "secret_access_key", "session_token", "allow_http")
_KEY_SETTINGS = ("access_key_id", "secret_access_key", "session_token")
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # S3's rules for new buckets
# S3's "safe" key characters (and `=`, for hive-style partition names): a key made of them passes
# unchanged through every URL parser between here and delta-rs, Spark and pyarrow.
_KEY_SEGMENT = re.compile(r"[A-Za-z0-9!_.*'()=-]+")


def is_url(text: str | os.PathLike) -> bool:
    """`scheme://...`: a URL rather than a path (a Path object never is one)."""
    return isinstance(text, str) and _URL.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class LocalRoot:
    path: Path

    def __str__(self) -> str:
        return str(self.path)

    def uri(self, *parts: str) -> str:
        """The local path of `parts` under the root (what deltalake takes for a local table)."""
        return str(self.path.joinpath(*split_key(*parts)))

    def delta_storage_options(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        masked = "*" * max(len(self.access_key_id) - 4, 0) + self.access_key_id[-4:]
        token = ", session token" if self.session_token else ""
        return f"Credentials(access_key_id={masked!r}, secret hidden{token})"


@dataclass(frozen=True, slots=True)
class S3Root:
    bucket: str
    prefix: str  # "" or "a/b": no leading or trailing slash
    endpoint: str | None = None  # None: AWS itself
    region: str = DEFAULT_REGION
    credentials: Credentials | None = None  # None: the AWS SDKs' own chain (instance roles, ...)
    allow_http: bool = False

    def __str__(self) -> str:
        return self.uri()

    def key(self, *parts: str) -> str:
        """The object key of `parts` (each may hold `/`) under the prefix; RootError for a part
        that would escape it (`..`) or that S3 tools disagree on (`.`, empty, unsafe characters)."""
        return "/".join(([self.prefix] if self.prefix else []) + split_key(*parts))

    def uri(self, *parts: str) -> str:
        key = self.key(*parts)
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"

    def delta_storage_options(self) -> dict[str, str]:
        """deltalake's storage_options for a table under this root. Commits PUT `_delta_log/N.json`
        with If-None-Match (conditional_put=etag), so concurrent writers are safe with no lock table."""
        options = {"AWS_REGION": self.region, "AWS_ALLOW_HTTP": "true" if self.allow_http else "false",
                   "AWS_CONDITIONAL_PUT": "etag"}
        if self.endpoint:
            options["AWS_ENDPOINT_URL"] = self.endpoint
        if self.credentials:
            options["AWS_ACCESS_KEY_ID"] = self.credentials.access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.credentials.secret_access_key
            if self.credentials.session_token:
                options["AWS_SESSION_TOKEN"] = self.credentials.session_token
        return options

    def hadoop_conf(self) -> dict[str, str]:
        """The s3a settings a Spark session needs (give each as `spark.hadoop.<name>`)."""
        conf = {"fs.s3a.endpoint.region": self.region}
        if self.endpoint:
            conf["fs.s3a.endpoint"] = self.endpoint
            conf["fs.s3a.path.style.access"] = "true"  # a bucket as a host name needs DNS a test server lacks
            conf["fs.s3a.connection.ssl.enabled"] = "false" if self.endpoint.startswith("http://") else "true"
        if self.credentials:
            conf["fs.s3a.access.key"] = self.credentials.access_key_id
            conf["fs.s3a.secret.key"] = self.credentials.secret_access_key
            if self.credentials.session_token:
                conf["fs.s3a.session.token"] = self.credentials.session_token
                conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            else:
                conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        return conf

    def pyarrow_filesystem(self):
        """pyarrow's S3FileSystem for this server; its paths are `bucket/key` (see pyarrow_path)."""
        from pyarrow import fs

        options: dict[str, Any] = {"region": self.region, "force_virtual_addressing": False}
        if self.endpoint:
            endpoint = urlsplit(self.endpoint)
            options.update(endpoint_override=endpoint.netloc, scheme=endpoint.scheme)
        if self.credentials:
            options.update(access_key=self.credentials.access_key_id,
                           secret_key=self.credentials.secret_access_key,
                           session_token=self.credentials.session_token)
        return fs.S3FileSystem(**options)

    def pyarrow_path(self, *parts: str) -> str:
        key = self.key(*parts)
        return f"{self.bucket}/{key}" if key else self.bucket


Root = LocalRoot | S3Root


def parse_root(text: str | os.PathLike, s3_settings: Mapping[str, Any] | None = None,
               env: Mapping[str, str] = os.environ) -> Root:
    """The root `text` names (a path, file:///abs, s3://bucket[/prefix], s3a://...), or RootError."""
    if not is_url(text):
        return LocalRoot(Path(text))
    match = _URL.fullmatch(text)
    scheme = match.group(1).lower()
    if scheme == "file":
        return LocalRoot(_file_path(text))
    if scheme not in ("s3", "s3a"):
        raise RootError(f"{scheme}:// roots are not supported ({_shown(text)}): use {SUPPORTED}")
    bucket, prefix = _bucket_and_prefix(text)
    return _s3_root(bucket, prefix, dict(s3_settings or {}), env)


def split_key(*parts: str) -> list[str]:
    """The segments of a key made of `parts`; RootError for any that is not a plain name."""
    segments = [segment for part in parts for segment in part.split("/")]
    for segment in segments:
        if segment in ("", ".", ".."):
            raise RootError(f"object key {'/'.join(parts)!r}: empty, '.' and '..' segments are not allowed")
        if not _KEY_SEGMENT.fullmatch(segment):
            raise RootError(f"object key {'/'.join(parts)!r}: use letters, digits and !_.*'()=- only")
    return segments


def _shown(text: str) -> str:
    """The URL as it may be printed: any user:password@ in it dropped."""
    parts = urlsplit(text)
    if "@" not in parts.netloc:
        return text
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def _file_path(text: str) -> Path:
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/") or parts.query or parts.fragment:
        raise RootError(f"{_shown(text)}: a file root is file:///absolute/path; or use {SUPPORTED}")
    return Path(unquote(parts.path))


def _bucket_and_prefix(text: str) -> tuple[str, str]:
    parts = urlsplit(text)
    shown = _shown(text)
    if "@" in parts.netloc:
        raise RootError(f"{shown}: keys never go in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                        "or [storage.s3]")
    if parts.query or parts.fragment:
        raise RootError(f"{shown}: a root URL has no ?query or #fragment; use {SUPPORTED}")
    bucket = parts.netloc
    if not bucket:
        raise RootError(f"{shown} names no bucket: use {SUPPORTED}")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket or _is_ip_address(bucket):
        raise RootError(f"{shown}: {bucket!r} is not a valid bucket name (3-63 characters of a-z, 0-9, "
                        "'.' and '-', starting and ending with a letter or digit)")
    path = parts.path.strip("/")
    try:
        prefix = "/".join(split_key(path)) if path else ""
    except RootError as exc:
        raise RootError(f"{shown}: the prefix {str(exc).partition(': ')[2]}") from None
    return bucket, prefix


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def _s3_root(bucket: str, prefix: str, settings: dict[str, Any], env: Mapping[str, str]) -> S3Root:
    unknown = set(settings) - set(S3_SETTINGS)
    if unknown:
        raise RootError(f"unknown [storage.s3] settings: {', '.join(sorted(unknown))} "
                        f"(known: {', '.join(S3_SETTINGS)})")
    for name, value in settings.items():
        wanted = bool if name == "allow_http" else str
        if not isinstance(value, wanted):
            raise RootError(f"[storage.s3] {name} must be {'true or false' if wanted is bool else 'a string'}, "
                            f"not {value!r}")
    endpoint = settings.get("endpoint") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
    region = settings.get("region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    if "allow_http" in settings:
        allow_http: bool | None = settings["allow_http"]
    else:
        allow_http = _env_flag(env, "AWS_ALLOW_HTTP")
    if endpoint is not None:
        endpoint = _checked_endpoint(endpoint, allow_http)
        allow_http = allow_http or endpoint.startswith("http://")
    return S3Root(bucket, prefix, endpoint, region, _credentials(settings, env), bool(allow_http))


def _env_flag(env: Mapping[str, str], name: str) -> bool | None:
    value = env.get(name)
    if value is None or value == "":
        return None
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise RootError(f"${name} must be true or false, not {value!r}")


def _checked_endpoint(endpoint: str, allow_http: bool | None) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RootError(f"S3 endpoint {endpoint!r} must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise RootError("S3 endpoint: keys never go in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                        "or [storage.s3]")
    if parts.scheme == "http" and allow_http is False:
        raise RootError(f"S3 endpoint {endpoint} is plain http but allow_http is false: use https or allow it")
    return endpoint.rstrip("/")


def _credentials(settings: Mapping[str, Any], env: Mapping[str, str]) -> Credentials | None:
    """From [storage.s3] when it names any key, else from the environment; None when neither does."""
    if any(name in settings for name in _KEY_SETTINGS):
        access, secret, token = (settings.get(name) or None for name in _KEY_SETTINGS)
        named = {name: f"[storage.s3] {name}" for name in _KEY_SETTINGS}
    else:
        access, secret, token = (env.get(f"AWS_{name.upper()}") or None for name in _KEY_SETTINGS)
        named = {name: f"$AWS_{name.upper()}" for name in _KEY_SETTINGS}
    if not access and not secret:
        if token:
            raise RootError(f"{named['session_token']} is set without an access key and secret")
        return None
    if not (access and secret):
        missing = named["secret_access_key" if access else "access_key_id"]
        raise RootError(f"{missing} is missing: an access key and its secret go together")
    return Credentials(access, secret, token)
