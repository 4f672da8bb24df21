"""Shared fixtures: storage URLs on real SQLite files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def postgres_url(postgres_server: object, request: pytest.FixtureRequest) -> str:
    """A fresh database on the session's server, per test."""
    import re
    import uuid

    name = re.sub(r"\W", "_", request.node.name)[:40] + "_" + uuid.uuid4().hex[:6]
    return str(postgres_server.create_database(name.lower()))  # type: ignore[attr-defined]


@pytest.fixture(params=["sqlite", "postgres"])
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each durable storage graphkit supports: a SQLite file, a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'graphkit.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(autouse=True)
def no_blocking_calls_on_an_event_loop() -> Iterator[None]:
    """Every test runs under the blocking-call detector (tests/blocking.py): graphkit's async
    API, its web app and its nodes in an async run never block an event loop."""
    from tests.blocking import no_blocking

    with no_blocking():
        yield
