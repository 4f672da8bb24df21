"""Shared fixtures: storage URLs on real SQLite files."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'graphkit.db'}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    from tests.postgres_server import PostgresServer

    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


_POOLS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every psycopg connection pool this process opened (`_track_pools`)."""


def _track_pools() -> None:
    from psycopg_pool import ConnectionPool

    init = ConnectionPool.__init__
    if getattr(init, "tracked", False):
        return

    def tracked(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _POOLS.add(self)

    tracked.tracked = True  # type: ignore[attr-defined]
    ConnectionPool.__init__ = tracked  # type: ignore[method-assign]


@pytest.fixture
def postgres_url(postgres_server: object, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database on the session's server, per test. The pools a test opened on it are
    closed as it ends: one left to the garbage collector joins its threads wherever that runs
    (a later test's event loop, where the blocking detector reports it)."""
    import re
    import uuid

    _track_pools()
    name = re.sub(r"\W", "_", request.node.name)[:40] + "_" + uuid.uuid4().hex[:6]
    database = name.lower()
    yield str(postgres_server.create_database(database))  # type: ignore[attr-defined]
    for pool in list(_POOLS):
        conninfo = str(pool.conninfo)
        if not pool.closed and (conninfo.endswith(f"/{database}")
                                or f"dbname={database}" in conninfo.split()):
            pool.close()


@pytest.fixture(params=["sqlite", "postgres"])
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each durable storage graphkit supports: a SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'graphkit.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(autouse=True)
def no_blocking_calls_on_an_event_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test runs under the blocking-call detector (tests/blocking.py): graphkit's async
    API, its web app and its nodes in an async run never block an event loop. A test marked
    `blocks_its_loop` calls the blocking API where a loop runs on purpose, as a notebook cell
    does."""
    from tests.blocking import no_blocking

    if request.node.get_closest_marker("blocks_its_loop") is not None:
        yield
        return
    with no_blocking():
        yield
