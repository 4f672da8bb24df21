"""The blocking-call detector the suite runs under: blockbuster, as `langgraph dev` runs it.

It raises `BlockingError` when graphkit's code (anything with a graphkit frame on the stack)
makes a blocking call on a thread that runs an event loop: SQLite, sockets, sleeps, file
reads, and psycopg's sync driver (which blocks inside libpq, out of blockbuster's own sight).
Sync runs, and graphkit's work in worker threads, are not its concern.
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from contextlib import contextmanager

from blockbuster import BlockBuster, BlockBusterFunction

import graphkit

SCANNED = [graphkit]
PSYCOPG = [("psycopg", "Connection", ("execute", "commit", "rollback", "cursor")),
           ("psycopg", "Cursor", ("execute", "executemany", "fetchone", "fetchall", "fetchmany")),
           ("psycopg_pool", "ConnectionPool", ("getconn", "connection"))]
RELAXED = ("os.stat", "os.path.abspath", "io.TextIOWrapper.write", "io.BufferedWriter.write")
"""What the detector lets pass as `langgraph dev` does: stat calls of importlib and inspect,
and log lines written to the console."""
MAY_BLOCK: list[tuple[str, Container[str]]] = [("graphkit/_storage.py", {"open_storage"})]
"""Opening storage (a file, its schema, a pool) is an `Agent`'s or an app's construction, done
once and synchronously, as LangGraph's own savers do in `setup()`: never a run's work."""


class _TestBodies:
    """Every test function's name: with Playwright's sync API a test's body runs on an event
    loop (Playwright's own), so the test's own calls of graphkit's sync API would look like
    graphkit blocking it. The app under test serves from a thread of its own, where the
    detector still sees everything."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.startswith("test_")


BROWSER_TESTS = ("tests/test_web.py", "tests/test_notebook_render.py")
"""Test modules driving Chromium through Playwright's sync API."""
MAY_BLOCK += [(module, _TestBodies()) for module in BROWSER_TESTS]


def detector() -> BlockBuster:
    found = BlockBuster(SCANNED)
    for name in RELAXED:
        found.functions.pop(name).deactivate()
    for function in found.functions.values():
        for filename, name in MAY_BLOCK:
            function.can_block_in(filename, name)
    for module_name, class_name, methods in PSYCOPG:
        try:
            module = __import__(module_name)
        except ImportError:  # pragma: no cover - the postgres extra is not installed
            continue
        cls = getattr(module, class_name)
        for method in methods:
            added = BlockBusterFunction(cls, method, scanned_modules=SCANNED)
            for filename, name in MAY_BLOCK:
                added.can_block_in(filename, name)
            found.functions[f"{module_name}.{class_name}.{method}"] = added
    return found


@contextmanager
def no_blocking() -> Iterator[BlockBuster]:
    """Raise on a blocking call graphkit makes on an event loop, while this block runs."""
    found = detector()
    found.activate()
    try:
        yield found
    finally:
        found.deactivate()
