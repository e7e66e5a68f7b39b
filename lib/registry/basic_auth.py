"""HTTP basic auth for the REST API (Confluent's `basic.auth.credentials.source=USER_INFO`):
the `authenticate` seam of http.make_app, checking user and password with `verify(user,
password)` (the broker passes its SASL credential store's check, so the registry takes the same
users as the Kafka listeners). A missing or wrong Authorization header is 401 Unauthorized."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from typing import Callable

from aiohttp import web

from .errors import RegistryError

log = logging.getLogger(__name__)


def basic_auth(verify: Callable[[str, str], bool]):
    async def authenticate(request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        user = password = None
        if scheme.lower() == "basic":
            try:
                user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
                if not sep:
                    user = None
            except (binascii.Error, UnicodeDecodeError):
                user = None
        if user is None or not await asyncio.to_thread(verify, user, password):
            log.warning("schema registry: failed authentication from %s%s", request.remote,
                        f" (user {user!r})" if user else " (no basic auth credentials)")
            raise RegistryError(401, 401, "Unauthorized")
    return authenticate
