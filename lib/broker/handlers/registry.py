"""The handler registry: api key -> (version range, handler). It is also ApiVersions' answer, so
what the broker advertises is exactly what it serves.

A handler is `async def handle(broker: BrokerContext, request: Request[JoinGroupRequest]) ->
response | None` where `request` is a `wire.Request` (kio body + header fields; typed with the kio
class of the newest version served) and the response is an instance of the kio response class
for the request's version (`request.response_type`); None sends nothing (acks=0). Each API family
registers the same way from its own module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..wire import Request, has_request_schema

Handler = Callable[[BrokerContext, Request[Any]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Route:
    api_key: ApiKey
    min_version: int
    max_version: int
    handler: Handler

    @property
    def name(self) -> str:
        return self.handler.__module__.rsplit(".", 1)[-1] + "." + self.handler.__name__


class HandlerRegistry:
    def __init__(self) -> None:
        self._routes: dict[ApiKey, Route] = {}

    def route(self, api_key: ApiKey, versions: tuple[int, int]) -> Callable[[Handler], Handler]:
        """Decorator: serve `api_key` for versions min..max (inclusive); each version must exist in kio."""
        try:
            api_key = ApiKey(api_key)
        except ValueError:
            raise ValueError(f"api key {api_key} is not one of Kafka's") from None
        low, high = versions

        def register(handler: Handler) -> Handler:
            if api_key in self._routes:
                raise ValueError(f"api key {api_key} is already served by {self._routes[api_key].name}")
            missing = [v for v in range(low, high + 1) if not has_request_schema(api_key, v)]
            if missing:
                raise ValueError(f"kio has no schema for api key {api_key} versions {missing}")
            self._routes[api_key] = Route(api_key, low, high, handler)
            return handler

        return register

    def supports(self, api_key: int, version: int) -> bool:
        route = self._routes.get(api_key)
        return route is not None and route.min_version <= version <= route.max_version

    def get(self, api_key: int) -> Route:
        return self._routes[api_key]

    def routes(self) -> list[Route]:
        return sorted(self._routes.values(), key=lambda r: r.api_key)


REGISTRY = HandlerRegistry()
