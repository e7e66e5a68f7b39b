"""The console's web app (aiohttp): routes, login, and the pages rendered with Jinja2.

Every page runs its cluster calls (topiclake.client: each request at the broker that serves it)
and file reads on a worker thread (the client and delta-rs block), as the request's identity; a
cluster that fails or refuses is the page's error banner (HTTP 502, 403 or 404), never a crash
of the console. Pages that need no broker (the tables and schemas, without logins) ask none.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import jinja2
from aiohttp import web

from topiclake.client import ClientError, admin, groups

from . import object_store, plots, records, root, tables
from .storage import BucketRoot, DirectoryRoot, topic_bytes
from .access import Access, Identity, LoginRefused
from .sampler import Sampler, group_lag_series, rates, topic_records, topic_size


COOKIE = "topiclake_console"
MAX_RECORDS = 500  # a record browser page
DEFAULT_RECORDS = 50
IDENTITY = web.AppKey("identity", object)
ACCESS = web.AppKey("access", Access)
SAMPLER = web.AppKey("sampler", Sampler)
ROOT: web.AppKey[DirectoryRoot | BucketRoot] = web.AppKey("root")  # what the pages read of the storage root
TEMPLATES = web.AppKey("templates", jinja2.Environment)
BROKER_METRICS = web.AppKey("broker_metrics", tuple)  # /metrics URLs given; empty: the registered ones
OPEN_PATHS = ("/login", "/static/", "/healthz")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("topiclake.console", "templates"),
                             autoescape=jinja2.select_autoescape(("html",)), trim_blocks=True, lstrip_blocks=True)
    env.filters["bytes"] = root.human_bytes
    env.filters["age"] = tables.age
    env.filters["iso_ms"] = tables.iso
    env.filters["thousands"] = lambda n: "-" if n is None else f"{n:,}"
    return env


def create_app(storage_root: DirectoryRoot | BucketRoot, access: Access, *, sample_interval_s: float = 5.0,
               broker_metrics: tuple[str, ...] = ()) -> web.Application:
    """`broker_metrics`: the brokers' /metrics URLs for the object store's figures (default: the
    URLs the live brokers register)."""
    app = web.Application(middlewares=[_authenticate, _errors])
    app[BROKER_METRICS] = tuple(broker_metrics)
    app[ROOT] = storage_root
    app[ACCESS] = access
    app[SAMPLER] = Sampler(access, storage_root, interval_s=sample_interval_s)
    app[TEMPLATES] = _environment()
    app.add_routes([
        web.get("/", cluster_page), web.get("/healthz", healthz),
        web.get("/login", login_page), web.post("/login", login), web.post("/logout", logout),
        web.get("/topics", topics_page), web.get("/topics/{topic}", topic_page),
        web.get("/topics/{topic}/records", records_page),
        web.get("/groups", groups_page), web.get("/groups/{group}", group_page),
        web.get("/tables", tables_page), web.get("/tables/{table}", table_page),
        web.get("/schemas", schemas_page), web.get("/schemas/{subject}", subject_page),
        web.get("/quality/{path:.*}", quality_file),
        web.static("/static", Path(__file__).parent / "static"),
    ])
    app.on_startup.append(_start_sampler)
    app.on_cleanup.append(_stop)
    return app


async def _start_sampler(app: web.Application) -> None:
    app[SAMPLER].start()


async def _stop(app: web.Application) -> None:
    await asyncio.to_thread(app[SAMPLER].stop)
    await asyncio.to_thread(app[ACCESS].close)


# ------------------------------------------------------------------------------- middlewares
@web.middleware
async def _authenticate(request: web.Request, handler):
    identity = request.app[ACCESS].identity(request.cookies.get(COOKIE))
    if identity is None and not request.path.startswith(OPEN_PATHS):
        raise web.HTTPSeeOther(f"/login?next={request.path_qs}" if request.path != "/" else "/login")
    request[IDENTITY] = identity
    return await handler(request)


@web.middleware
async def _errors(request: web.Request, handler):
    try:
        return await handler(request)
    except ClientError as exc:
        message = str(exc)
        status = 403 if "AUTHORIZATION_FAILED" in message else 404 if "UNKNOWN_" in message else 502
        return _render(request, "error.html", {"message": message}, status=status)
    except OSError as exc:
        return _render(request, "error.html", {"message": f"the broker at {request.app[ACCESS].bootstrap} "
                                                          f"did not answer: {exc}"}, status=502)


def _render(request: web.Request, template: str, context: dict, *, status: int = 200) -> web.Response:
    identity = request.get(IDENTITY)
    body = request.app[TEMPLATES].get_template(template).render(
        user=identity.name if identity is not None else None, login_required=request.app[ACCESS].login_required,
        path=request.path, **context)
    return web.Response(text=body, content_type="text/html", status=status)


async def _call(request: web.Request, work):
    """`work(client)` on a worker thread with the request's identity's broker connection."""
    identity: Identity = request[IDENTITY]

    def run():
        with identity.client() as client:
            return work(client)

    return await asyncio.to_thread(run)


def _not_found(request: web.Request, what: str) -> web.Response:
    return _render(request, "error.html", {"message": what}, status=404)


# ------------------------------------------------------------------------------------ login
async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def login_page(request: web.Request) -> web.Response:
    if not request.app[ACCESS].login_required:
        raise web.HTTPSeeOther("/")
    return _render(request, "login.html", {"error": None, "username": None, "next": request.query.get("next", "/")})


async def login(request: web.Request) -> web.Response:
    form = await request.post()
    access = request.app[ACCESS]
    target = str(form.get("next") or "/")
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    username = str(form.get("username", ""))
    try:
        token, _identity = await asyncio.to_thread(access.login, username, str(form.get("password", "")),
                                                   str(form.get("mechanism", "SCRAM-SHA-256")))
    except LoginRefused as exc:
        return _render(request, "login.html", {"error": str(exc), "username": username, "next": target}, status=401)
    response = web.HTTPSeeOther(target)
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
    return response


async def logout(request: web.Request) -> web.Response:
    identity = request.app[ACCESS].logout(request.cookies.get(COOKIE))
    if identity is not None:
        request.app[SAMPLER].forget(identity)
    response = web.HTTPSeeOther("/login" if request.app[ACCESS].login_required else "/")
    response.del_cookie(COOKIE, path="/")
    return response


# ---------------------------------------------------------------------------------- cluster
async def cluster_page(request: web.Request) -> web.Response:
    at = request.app[ROOT]
    registered = at.registrations()
    given = request.app[BROKER_METRICS]
    urls = list(given) or [r.metrics_url for r in registered if r.alive and r.metrics_url]
    stores_read = asyncio.create_task(asyncio.to_thread(object_store.read_all, urls))
    described, topic_list, listed = await _call(request, lambda c: (admin.describe_cluster(c), admin.topics(c),
                                                                   groups.list_groups(c)))
    stores = await stores_read
    # Shown when a broker reports an object store (a bucket root), or for the URLs asked for.
    show_stores = bool(given) or any(s.operations for s in stores)
    samples = request.app[SAMPLER].history(request[IDENTITY])
    throughput = plots.line_chart({"records/s": rates(samples, topic_records(None))}, unit="/s",
                                  title="Produced records per second, all topics")
    bytes_plot = plots.line_chart({"bytes/s": rates(samples, topic_size(None))}, unit=" B/s",
                                  title="Log bytes written per second, all topics")
    return _render(request, "cluster.html", {
        "cluster": described, "root": at.root, "root_cluster_id": at.cluster_id(),
        "registrations": registered, "bootstrap": request.app[ACCESS].bootstrap,
        "object_stores": stores if show_stores else [],
        "topic_count": sum(1 for t in topic_list if not t.internal),
        "internal_count": sum(1 for t in topic_list if t.internal),
        "partition_count": sum(len(t.partitions) for t in topic_list),
        "group_count": len(listed), "throughput": throughput, "bytes_plot": bytes_plot})


# ----------------------------------------------------------------------------------- topics
async def topics_page(request: web.Request) -> web.Response:
    at = request.app[ROOT]
    topic_list = await _call(request, lambda c: admin.topics(c, offsets=True))
    sizes = await asyncio.to_thread(lambda: {
        t.name: topic_bytes(at, t.name, [p.partition for p in t.partitions]) for t in topic_list})
    show_internal = request.query.get("internal") == "1"
    shown = [t for t in topic_list if show_internal or not t.internal]
    return _render(request, "topics.html", {"topics": shown, "sizes": sizes,
                                            "hidden_internal": len(topic_list) - len(shown),
                                            "show_internal": show_internal})


async def topic_page(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    at = request.app[ROOT]
    topic, configs = await _call(request, lambda c: (admin.topics(c, [name], offsets=True)[0],
                                                     admin.topic_configs(c, name)))
    sizes = await asyncio.to_thread(lambda: {p.partition: at.partition_bytes(name, p.partition)
                                             for p in topic.partitions})
    samples = request.app[SAMPLER].history(request[IDENTITY])
    throughput = plots.line_chart({name: rates(samples, topic_records(name))}, unit="/s",
                                  title=f"Produced records per second, {name}")
    return _render(request, "topic.html", {"topic": topic, "configs": configs, "sizes": sizes,
                                           "throughput": throughput, "records_shown": DEFAULT_RECORDS})


def _int_query(request: web.Request, name: str, default: int | None) -> int | None:
    text = request.query.get(name, "")
    if text.strip() == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer, not {text!r}\n") from None


async def records_page(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    partition = _int_query(request, "partition", 0)
    start = _int_query(request, "from", None)
    end = _int_query(request, "to", None)
    at = request.app[ROOT]

    def browse(client):
        topic = admin.topics(client, [name], offsets=True)[0]
        p = next((p for p in topic.partitions if p.partition == partition), None)
        if p is None:
            raise ClientError(f"topic {name} has no partition {partition}: UNKNOWN_TOPIC_OR_PARTITION")
        first = max(p.start, end - DEFAULT_RECORDS if start is None and end is not None else
                    (p.end - DEFAULT_RECORDS if start is None else start))
        last = min(p.end, end if end is not None else first + DEFAULT_RECORDS, first + MAX_RECORDS)
        return topic, p, first, last, admin.fetch_records(client, name, partition, first, last) if last > first else []

    topic, p, first, last, fetched = await _call(request, browse)
    shown = await asyncio.to_thread(records.decode, at.registry, name, fetched)
    return _render(request, "records.html", {"topic": topic, "partition": p, "first": first, "last": last,
                                             "records": shown, "page": DEFAULT_RECORDS, "max_records": MAX_RECORDS})


# ----------------------------------------------------------------------------------- groups
async def groups_page(request: web.Request) -> web.Response:
    described = await _call(request, lambda client: groups.group_reports(client, groups.list_groups(client)))
    return _render(request, "groups.html", {"groups": described})


async def group_page(request: web.Request) -> web.Response:
    group_id = request.match_info["group"]
    detail = await _call(request, lambda client: groups.group(client, group_id))
    if detail is None:
        return _not_found(request, f"no group {group_id!r} (or you may not describe it)")
    samples = request.app[SAMPLER].history(request[IDENTITY])
    lag_plot = plots.line_chart(group_lag_series(samples, group_id), title=f"Lag of {group_id} per topic (records)")
    return _render(request, "group.html", {"group": detail, "lag_plot": lag_plot})


# ----------------------------------------------------------------------------------- tables
async def _visible_tables(request: web.Request) -> list[tables.TableSummary]:
    """The root's tables, without those fed by a topic this user may not describe."""
    at = request.app[ROOT]
    summaries = await asyncio.to_thread(lambda: [tables.summary(at, n) for n in at.table_names()])
    if not request.app[ACCESS].login_required:
        return summaries  # one identity sees every table: no broker needed
    allowed = await _call(request, admin.topic_names)
    return [s for s in summaries if (s.topics or {_fed_by(s.name)}) <= allowed]


def _fed_by(table: str) -> str:
    """The topic a table with no ingest commit is taken to hold: its name (the ingest's default),
    without the quarantine suffix."""
    return table.removesuffix(tables.QUARANTINE_SUFFIX)


async def tables_page(request: web.Request) -> web.Response:
    return _render(request, "tables.html", {"tables": await _visible_tables(request),
                                            "data_docs": await _data_docs_index(request)})


async def table_page(request: web.Request) -> web.Response:
    name = request.match_info["table"]
    if name not in {s.name for s in await _visible_tables(request)}:
        return _not_found(request, f"no table {name!r} (or you may not describe its topics)")
    detail = await asyncio.to_thread(tables.detail, request.app[ROOT], name)
    return _render(request, "table.html", {"table": detail, "s": detail.summary,
                                           "data_docs": await _data_docs_index(request)})


async def _data_docs_index(request: web.Request) -> bool:
    """Whether to link the Data Docs index: built, and no logins (it lists every table)."""
    site = await asyncio.to_thread(request.app[ROOT].quality_site)  # a bucket's is fetched
    return not request.app[ACCESS].login_required and site is not None and (site / "index.html").is_file()


async def quality_file(request: web.Request) -> web.StreamResponse:
    """The Data Docs site under <root>/quality, as static files. With logins, only the pages of
    tables the user may see (and the site's assets): the index lists every table's validations."""
    site = await asyncio.to_thread(request.app[ROOT].quality_site)
    relative = request.match_info["path"] or "index.html"
    target = root.safe_join(site, relative) if site is not None else None
    if target is not None and target.is_dir():
        target = target / "index.html"
    if site is None or target is None or not target.is_file():
        return _not_found(request, f"no file {relative!r} in the Data Docs site (build it with `topiclake data-docs`)")
    if request.app[ACCESS].login_required:
        suite = tables.data_docs_suite(target.relative_to(site.resolve()))
        visible = {s.name for s in await _visible_tables(request)}
        if (suite not in visible) if suite is not None else not tables.is_data_docs_asset(relative):
            return _render(request, "error.html", {"message": "with logins, Data Docs pages are shown from the "
                                                              "pages of the tables you may see"}, status=403)
    return web.FileResponse(target)


# ---------------------------------------------------------------------------------- schemas
def _registry(request: web.Request):
    return request.app[ROOT].registry()


async def schemas_page(request: web.Request) -> web.Response:
    state = await asyncio.to_thread(_registry, request)
    allowed = await _allowed_topics(request)
    subjects = [(s, state.versions(s)) for s in state.subject_names() if _subject_visible(request, s, allowed)]
    return _render(request, "schemas.html", {"subjects": subjects})


async def _allowed_topics(request: web.Request) -> set[str]:
    """The topics the user may describe; without logins nothing is hidden (no broker asked)."""
    return await _call(request, admin.topic_names) if request.app[ACCESS].login_required else set()


def _subject_visible(request: web.Request, subject: str, allowed: set[str]) -> bool:
    """With logins, a subject is shown when it belongs to a topic the user may describe
    (<topic>-value, <topic>-key, <topic>-<record name>); RecordNameStrategy subjects, which name
    no topic, only without logins."""
    if not request.app[ACCESS].login_required:
        return True
    return any(subject.startswith(f"{topic}-") for topic in allowed)


async def subject_page(request: web.Request) -> web.Response:
    subject = request.match_info["subject"]
    state = await asyncio.to_thread(_registry, request)
    allowed = await _allowed_topics(request)
    versions = state.versions(subject, deleted=True)
    if not versions or not _subject_visible(request, subject, allowed):
        return _not_found(request, f"no subject {subject!r}")
    return _render(request, "subject.html", {"subject": subject, "versions": versions,
                                             "compatibility": state.compatibility(subject)})
