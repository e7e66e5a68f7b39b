"""Plain HTTP to a schema registry (urllib: what any REST client sends), for the registry tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

# `broker start` flags that serve the registry on a free loopback port
REGISTRY_ARGS = ("--registry-listen", "127.0.0.1:0")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryHTTP:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
             **query: Any) -> tuple[int, Any]:
        """(status, decoded JSON body) of one request; query values True/False become "true"/"false"."""
        qs = urllib.parse.urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()})
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}{'?' + qs if qs else ''}", data=data, method=method,
                                         headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as error:
            return error.code, _decode(error.read())

    def ok(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        status, answer = self.call(method, path, body, **query)
        assert status == 200, (method, path, status, answer)
        return answer

    def error(self, method: str, path: str, body: Any = None, **query: Any) -> tuple[int, int, str]:
        """(HTTP status, Confluent error_code, message) of a request that must fail."""
        status, answer = self.call(method, path, body, **query)
        assert status >= 400, (method, path, status, answer)
        return status, answer["error_code"], answer["message"]


def subject_path(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")

