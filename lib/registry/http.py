"""Confluent Schema Registry's REST API on aiohttp, over a SchemaRegistry.

The app runs on whatever loop serves it: the broker's own (the broker's `[registry] listen`), or
a standalone registry's. Bodies and answers are Confluent's (`application/vnd.schemaregistry.v1+json`);
errors are `{"error_code", "message"}` with Confluent's codes.

Authentication seam: `make_app(registry, authenticate=...)` takes an async callable that receives
the request and returns normally to let it through, or raises a RegistryError (401) to refuse it.
The broker plugs its SASL users in here as HTTP basic auth (basic_auth.py) when it has a SASL
listener; without an authenticator, every request passes.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from . import errors as E
from .service import SchemaRegistry, SchemaRequest, check_subject, parse_version, version_json

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 16 * 1024 * 1024
REGISTRY_KEY = web.AppKey("registry", SchemaRegistry)

Authenticator = Callable[[web.Request], Awaitable[None]]


def _reply(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type=CONTENT_TYPE)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


def _registry(request: web.Request) -> SchemaRegistry:
    return request.app[REGISTRY_KEY]


def _subject(request: web.Request) -> str:
    return check_subject(request.match_info["subject"])


def _schema_id(request: web.Request) -> int:
    text = request.match_info["id"]
    try:
        return int(text)
    except ValueError:
        raise E.schema_not_found() from None


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw.strip():
        raise E.bad_request("the request has no body")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise E.RegistryError(400, 400, f"the request body is not JSON: {exc}") from None


def _middlewares(authenticate: Authenticator | None):
    @web.middleware
    async def errors(request: web.Request, handler):
        try:
            if authenticate is not None:
                await authenticate(request)
            await _registry(request).sync()
            return await handler(request)
        except E.RegistryError as exc:
            if exc.http_status >= 500:
                log.error("%s %s: %s", request.method, request.path, exc.message)
            return _reply(exc.body(), exc.http_status)
        except web.HTTPException as exc:
            return _reply({"error_code": exc.status, "message": f"HTTP {exc.status} {exc.reason}"}, exc.status)
        except Exception as exc:  # a bad request must never take the server down
            log.exception("%s %s failed", request.method, request.path)
            return _reply({"error_code": 50001, "message": f"{type(exc).__name__}: {exc}"}, 500)

    return [errors]


# ==================================================================== schemas
async def root(request):
    return _reply({})


async def schema_types(request):
    return _reply(_registry(request).schema_types())


async def schemas(request):
    return _reply(_registry(request).schemas(prefix=request.query.get("subjectPrefix", ""),
                                              deleted=_flag(request, "deleted"),
                                              latest_only=_flag(request, "latestOnly")))


async def schema_by_id(request):
    registry = _registry(request)
    value = registry.schema_by_id(_schema_id(request))
    text = await registry.formatted(value, request.query.get("format"))
    body = registry.schema_json(value, text)
    if _flag(request, "fetchMaxId"):
        body["maxId"] = registry.state.max_id
    return _reply(body)


async def schema_text_by_id(request):
    registry = _registry(request)
    value = registry.schema_by_id(_schema_id(request))
    return web.Response(text=await registry.formatted(value, request.query.get("format")), content_type=CONTENT_TYPE)


async def subjects_of_id(request):
    return _reply(_registry(request).subjects_of(_schema_id(request), deleted=_flag(request, "deleted")))


async def versions_of_id(request):
    return _reply(_registry(request).versions_of(_schema_id(request), deleted=_flag(request, "deleted")))


# ==================================================================== subjects
async def subjects(request):
    return _reply(_registry(request).subjects(deleted=_flag(request, "deleted"),
                                               prefix=request.query.get("subjectPrefix", "")))


async def versions(request):
    return _reply(_registry(request).versions(_subject(request), deleted=_flag(request, "deleted")))


async def version(request):
    registry = _registry(request)
    value = registry.version(_subject(request), parse_version(request.match_info["version"]),
                             deleted=_flag(request, "deleted"))
    return _reply(version_json(value, await registry.formatted(value, request.query.get("format"))))


async def version_schema(request):
    registry = _registry(request)
    value = registry.version(_subject(request), parse_version(request.match_info["version"]),
                             deleted=_flag(request, "deleted"))
    return web.Response(text=await registry.formatted(value, request.query.get("format")), content_type=CONTENT_TYPE)


async def referenced_by(request):
    return _reply(_registry(request).referenced_by(_subject(request), parse_version(request.match_info["version"])))


async def register(request):
    schema = SchemaRequest.from_body(await _body(request))
    return _reply(await _registry(request).register(_subject(request), schema, normalize=_flag(request, "normalize")))


async def lookup(request):
    registry = _registry(request)
    subject = _subject(request)
    body = await _body(request)
    registry.versions(subject, deleted=_flag(request, "deleted"))  # 40401 before the schema is judged
    value = await registry.lookup(subject, SchemaRequest.from_body(body), normalize=_flag(request, "normalize"),
                                  deleted=_flag(request, "deleted"))
    return _reply(version_json(value, await registry.formatted(value, request.query.get("format"))))


async def delete_subject(request):
    return _reply(await _registry(request).delete_subject(_subject(request), permanent=_flag(request, "permanent")))


async def delete_version(request):
    return _reply(await _registry(request).delete_version(_subject(request),
                                                           parse_version(request.match_info["version"]),
                                                           permanent=_flag(request, "permanent")))


async def compatibility(request):
    version = request.match_info.get("version")
    schema = SchemaRequest.from_body(await _body(request))
    return _reply(await _registry(request).check_compatibility(
        _subject(request), None if version is None else parse_version(version), schema,
        verbose=_flag(request, "verbose")))


# ==================================================================== config and mode
def _config_subject(request) -> str | None:
    subject = request.match_info.get("subject")
    return None if subject is None else check_subject(subject)


async def get_config(request):
    return _reply(_registry(request).get_config(_config_subject(request),
                                                default_to_global=_flag(request, "defaultToGlobal")))


async def put_config(request):
    return _reply(await _registry(request).set_config(_config_subject(request), await _body(request)))


async def delete_config(request):
    return _reply(await _registry(request).delete_config(_config_subject(request)))


async def get_mode(request):
    return _reply(_registry(request).get_mode(_config_subject(request),
                                              default_to_global=_flag(request, "defaultToGlobal")))


async def put_mode(request):
    return _reply(await _registry(request).set_mode(_config_subject(request), await _body(request),
                                                    force=_flag(request, "force")))


async def delete_mode(request):
    return _reply(await _registry(request).delete_mode(check_subject(request.match_info["subject"])))


async def contexts(request):
    return _reply(["."])


def make_app(registry: SchemaRegistry, *, authenticate: Authenticator | None = None) -> web.Application:
    app = web.Application(middlewares=_middlewares(authenticate), client_max_size=MAX_BODY_BYTES)
    app[REGISTRY_KEY] = registry
    # Subjects may hold '/' (protobuf reference subjects are file names): match it, encoded or not.
    subject = "{subject:.+?}"
    version_ = "{version:[^/]+}"
    app.router.add_get("/", root)
    app.router.add_get("/schemas/types", schema_types)
    app.router.add_get("/schemas", schemas)
    app.router.add_get("/schemas/ids/{id}", schema_by_id)
    app.router.add_get("/schemas/ids/{id}/schema", schema_text_by_id)
    app.router.add_get("/schemas/ids/{id}/subjects", subjects_of_id)
    app.router.add_get("/schemas/ids/{id}/versions", versions_of_id)
    app.router.add_get("/subjects", subjects)
    app.router.add_get(f"/subjects/{subject}/versions", versions)
    app.router.add_post(f"/subjects/{subject}/versions", register)
    app.router.add_get(f"/subjects/{subject}/versions/{version_}", version)
    app.router.add_delete(f"/subjects/{subject}/versions/{version_}", delete_version)
    app.router.add_get(f"/subjects/{subject}/versions/{version_}/schema", version_schema)
    app.router.add_get(f"/subjects/{subject}/versions/{version_}/referencedby", referenced_by)
    app.router.add_post(f"/subjects/{subject}", lookup)
    app.router.add_delete(f"/subjects/{subject}", delete_subject)
    app.router.add_post(f"/compatibility/subjects/{subject}/versions", compatibility)
    app.router.add_post(f"/compatibility/subjects/{subject}/versions/{version_}", compatibility)
    for path in ("/config", f"/config/{subject}"):
        app.router.add_get(path, get_config)
        app.router.add_put(path, put_config)
        app.router.add_delete(path, delete_config)
    app.router.add_get("/mode", get_mode)
    app.router.add_put("/mode", put_mode)
    app.router.add_get(f"/mode/{subject}", get_mode)
    app.router.add_put(f"/mode/{subject}", put_mode)
    app.router.add_delete(f"/mode/{subject}", delete_mode)
    app.router.add_get("/contexts", contexts)
    return app


async def serve(registry: SchemaRegistry, host: str, port: int, *,
                authenticate: Authenticator | None = None) -> tuple[web.AppRunner, int]:
    """Start the REST API on the running loop; returns the runner (cleanup() stops it) and the port."""
    runner = web.AppRunner(make_app(registry, authenticate=authenticate), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # the real port when asked for 0
    return runner, bound
