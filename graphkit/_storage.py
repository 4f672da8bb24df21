"""Checkpointer and store from one storage URL: memory, SQLite or PostgreSQL.

LangGraph's SQLite saver and store are synchronous and its async ones are bound to one event
loop, while `agent.graph` must serve both `invoke` and `ainvoke`. The savers here are
LangGraph's own, with their async methods running the sync ones in a worker thread (the
saver serialises access with its own lock), so one graph works from threads and event loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.base import BaseStore, Op, Result
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from graphkit._fence import FencedWrites
from graphkit._latest import ServesLatest
from graphkit._ledger import PAGE_SIZE, Ledger
from graphkit._review import withdraw_thread
from graphkit._secrets import MASK

__all__ = ["Storage", "open_storage", "serve_agent", "served_agents", "served_storage"]

logger = logging.getLogger("graphkit")

UNKNOWN_URL = (
    "unsupported checkpointer {value!r}; expected 'memory', 'sqlite:///path/to/file.db', "
    "'postgresql://user@host/db', or a BaseCheckpointSaver instance"
)


class ThreadedAsyncSaver(BaseCheckpointSaver[Any]):
    """Mixin for a sync saver: its async methods run the sync ones in a worker thread."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        # The saver's one query for the messages' history; BaseCheckpointSaver's async
        # default reads every checkpoint back to the channel's last snapshot instead (up to
        # 100 reads as a thread grows, each a thread hop), on every async run's first step.
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels))


class WithdrawsDeleted(BaseCheckpointSaver[Any]):
    """Mixin for graphkit's savers: LangGraph's `delete_thread` also withdraws, in the ledger
    beside the saver, what waits on a decision in the thread (declined as superseded; an
    inbox would show it for ever, and a decision on it would queue a resume that fails for
    ever) and the thread's runs queued to be continued."""

    graphkit_ledger: Ledger | None = None

    def delete_thread(self, thread_id: str) -> None:
        held = self._holds(thread_id)
        super().delete_thread(thread_id)
        # only a thread this saver held and holds no more (not one it never had, as a LangGraph
        # server's on a shared database; not one LangGraph's InMemorySaver kept because the id
        # came as, say, a UUID object, while the ledger knows it by its text)
        if self.graphkit_ledger is not None and held and not self._holds(thread_id):
            withdraw_thread(self.graphkit_ledger, str(thread_id))

    def _holds(self, thread_id: str) -> bool:
        return bool(thread_id) and self.get_tuple(
            {"configurable": {"thread_id": str(thread_id), "checkpoint_ns": ""}}) is not None

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)


_Saver = TypeVar("_Saver", bound=WithdrawsDeleted)


def _beside(saver: _Saver, ledger: Ledger) -> _Saver:
    saver.graphkit_ledger = ledger
    return saver


class ThreadedSqliteSaver(WithdrawsDeleted, FencedWrites, ServesLatest, ThreadedAsyncSaver,
                          SqliteSaver):
    """LangGraph's `SqliteSaver`, usable from async runs too."""


class MemorySaver(WithdrawsDeleted, ServesLatest, InMemorySaver):
    """LangGraph's `InMemorySaver`, serving a run the checkpoint it read as it began."""


class ThreadedSqliteStore(SqliteStore):
    """`SqliteStore` whose async batch runs the sync one in a worker thread."""

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))


@dataclass(frozen=True, slots=True)
class Storage:
    """Where an agent keeps its paused runs."""

    checkpointer: BaseCheckpointSaver[Any]
    store: BaseStore
    description: str
    """Human-readable, for error messages ("sqlite file /tmp/x.db")."""
    ledger: Ledger
    """Exactly-once decisions and thread leases, in the same database."""
    url: str = "memory"
    """The URL it was opened from (`memory` for memory or an instance)."""


def _sqlite_path(url: str) -> str:
    path = url.removeprefix("sqlite://")
    if path.startswith("/"):
        path = path[1:]  # sqlite:///rel.db -> rel.db ; sqlite:////abs.db -> /abs.db
    if not path:
        msg = f"sqlite URL {url!r} names no file; expected 'sqlite:///path/to/file.db'"
        raise ValueError(msg)
    return path


def sqlite_file(url: str) -> str | None:
    """The file a `sqlite:///` URL names (None for any other URL, or an in-memory one)."""
    if not url.startswith("sqlite://"):
        return None
    path = _sqlite_path(url)
    return None if path == ":memory:" else path


def _connect(path: str, *, autocommit: bool = False) -> sqlite3.Connection:
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # A long busy timeout: several processes may decide and resume runs in one file.
    conn = sqlite3.connect(
        path, check_same_thread=False, timeout=30.0,
        isolation_level=None if autocommit else "DEFERRED",  # the store runs its own BEGIN/COMMIT
    )
    if path != ":memory:":
        conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file only
        # WAL with synchronous=NORMAL for checkpoints and the store: every commit is atomic
        # and survives a killed process; a power loss can drop the last ones, which only
        # means a replay the ledger answers (its own records are synced: `Sql.sync`).
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    return conn


_SERVED: Storage | None = None


DEV_LEDGER = os.path.join(".langgraph_api", "graphkit.sqlite")
"""Where the agents served by `langgraph dev` keep their ledger without `GRAPHKIT_DB`: beside
the threads its in-memory runtime saves to `.langgraph_api/` (in the directory it runs from)
and loads again when it restarts, on every code change too. A ledger in memory was forgotten
then, while the threads were not: replaying a checkpoint from before a call ran (Studio's time
travel) asked it again as new, and approved, it ran twice (helper-72)."""


def served_storage() -> Storage:
    """The one storage of the agents a LangGraph server serves in this process: the server
    keeps their checkpoints; their ledger is shared here, so the web inbox
    mounted in the same server (`graphkit.web:app`) decides in them. With `GRAPHKIT_DB` set
    (`postgresql://...` or `sqlite:///...`) they live in that database, where `Inbox`, the CLI
    and every process of the deployment share them; under `langgraph dev` in `DEV_LEDGER`;
    else in this process's memory."""
    global _SERVED
    if _SERVED is None:
        url = os.environ.get("GRAPHKIT_DB")
        if url:
            _SERVED = open_storage(url)
        else:
            dev = os.environ.get("LANGGRAPH_RUNTIME_EDITION") == "inmem"
            if dev:
                os.makedirs(os.path.dirname(DEV_LEDGER), exist_ok=True)
            ledger = _set_up(lambda: Ledger.sqlite(os.path.abspath(DEV_LEDGER))) if dev else (
                Ledger.sqlite())
            where = f"the LangGraph server of this process ({DEV_LEDGER})" if dev else (
                "the LangGraph server of this process")
            if not dev:
                logger.warning(
                    "graphkit: no GRAPHKIT_DB: the served agents' approvals and what ran are "
                    "kept in this process's memory, while the server keeps their threads; a "
                    "restart or another server process forgets them (a replayed checkpoint "
                    "asks again, and a call that ran may run again). Set GRAPHKIT_DB to the "
                    "deployment's database.")
            _SERVED = Storage(InMemorySaver(), InMemoryStore(), where, ledger,
                              "langgraph-server")
        _SERVED.ledger.serves = True
    return _SERVED


_SERVED_AGENTS: list[Any] = []
"""Agents built under the LangGraph server of this process, oldest first. Held strongly: a
graph module may keep only an agent's graph (`graph = Agent(...).graph`), and the inbox needs
the agent for its tools and policies (a reload of the module builds it again: the latest of a
name is the one served)."""


def serve_agent(agent: Any) -> None:
    """Note an agent the LangGraph server of this process serves, so that the web inbox
    mounted in the server judges decisions with its tools and policy."""
    _SERVED_AGENTS.append(agent)


def _subagents(agent: Any) -> Iterator[Any]:
    for sub in getattr(agent, "agents", {}).values():
        yield sub
        yield from _subagents(sub)


def served_agents() -> list[Any]:
    """The agents this process serves under a LangGraph server, one per name (approvals name
    their agent first in their path): of each name, the latest that no served supervisor
    holds as a subagent, else the latest. A subagent named like a top-level agent (of
    another graph) never stands for it; an agent served and also held by a supervisor is
    served."""
    held = {id(sub) for agent in _SERVED_AGENTS for sub in _subagents(agent)}
    chosen: dict[str, tuple[bool, int, Any]] = {}
    for order, agent in enumerate(_SERVED_AGENTS):
        rank = (id(agent) not in held, order)
        name = str(agent.name)
        if name not in chosen or rank >= chosen[name][:2]:
            chosen[name] = (*rank, agent)
    return [agent for *_, agent in chosen.values()]


_IN_MEMORY: weakref.WeakKeyDictionary[BaseCheckpointSaver[Any], Ledger] = (
    weakref.WeakKeyDictionary())
"""The in-memory ledger of each checkpointer instance graphkit keeps no database beside: every
agent over one saver shares it, as they share its checkpoints."""


def _ledger_beside(saver: BaseCheckpointSaver[Any]) -> Ledger:
    """The ledger for a checkpointer passed as an instance: in the same database when it is
    LangGraph's SQLite or PostgreSQL saver, so that a restarted process still knows which
    calls ran and which approvals wait; else in this process's memory, one per saver (as the
    saver's own memory, for `InMemorySaver`)."""
    if isinstance(saver, InMemorySaver):
        return _memory_ledger(saver)
    if isinstance(saver, SqliteSaver):
        rows = saver.conn.execute("PRAGMA database_list").fetchall()
        path = next((str(r[2]) for r in rows if r[1] == "main"), "")
        return Ledger.sqlite(path) if path else Ledger.sqlite()
    ledger = _sqlite_async(saver) or _postgres(saver)
    if ledger is not None:
        return ledger
    logger.warning(
        "graphkit: %s keeps its checkpoints where graphkit cannot keep its ledger; which calls "
        "ran and which approvals wait is kept in this process's memory and lost when it ends. "
        "Pass a sqlite:/// or postgresql:// URL to keep both in one database.",
        type(saver).__name__)
    return _memory_ledger(saver)


_IN_MEMORY_LOCK = threading.Lock()


def _memory_ledger(saver: BaseCheckpointSaver[Any]) -> Ledger:
    try:
        with _IN_MEMORY_LOCK:
            ledger = _IN_MEMORY.get(saver)
            if ledger is None:
                ledger = _IN_MEMORY[saver] = Ledger.sqlite()
    except TypeError:  # a saver that cannot be weakly referenced: one ledger per agent
        return Ledger.sqlite()
    return ledger


def _sqlite_async(saver: BaseCheckpointSaver[Any]) -> Ledger | None:
    """`AsyncSqliteSaver`: its aiosqlite connection names its file only in its connector."""
    try:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError:  # pragma: no cover - aiosqlite is not installed
        return None
    if not isinstance(saver, AsyncSqliteSaver):
        return None
    connector = getattr(saver.conn, "_connector", None)
    database = inspect.getclosurevars(connector).nonlocals.get("database") if callable(
        connector) else None
    if isinstance(database, bytes):
        database = database.decode("utf-8")
    if not isinstance(database, str | Path) or str(database) in ("", ":memory:") or str(
            database).startswith("file::memory:"):
        return None if database is None else Ledger.sqlite()
    return Ledger.sqlite(str(database))


def _postgres(saver: BaseCheckpointSaver[Any]) -> Ledger | None:
    """LangGraph's PostgreSQL savers: the ledger on the same pool, or on the one connection
    of a sync saver (under its lock), or on a pool of the async saver's own database."""
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import AsyncConnection
        from psycopg.conninfo import make_conninfo
        from psycopg_pool import AsyncConnectionPool, ConnectionPool
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        return None
    conn = saver.conn if isinstance(saver, PostgresSaver | AsyncPostgresSaver) else None
    if conn is None:
        return None
    if isinstance(conn, ConnectionPool):
        return Ledger.postgres(conn)
    if isinstance(saver, PostgresSaver):
        return Ledger.postgres(_Shared(conn, _reentrant(saver)))
    # an async pool or connection: a small sync pool of its own on the same database
    if isinstance(conn, AsyncConnection):
        conninfo = make_conninfo(conn.info.dsn, password=conn.info.password)
    elif isinstance(conn, AsyncConnectionPool):
        conninfo = str(conn.conninfo)
    else:  # pragma: no cover - no other connection kind is a saver's
        return None
    return Ledger.postgres(ConnectionPool(
        conninfo, min_size=1, max_size=2, open=True,
        kwargs={"autocommit": True, "prepare_threshold": 0}))


_SET_UP_LOCK = "hashtextextended('graphkit set-up', 0)"


@contextlib.contextmanager
def _one_set_up_at_a_time(conn: Any) -> Iterator[None]:
    """Set up a PostgreSQL database's tables one process at a time (a session advisory lock,
    held on `conn`, an autocommit connection of its own, until it closes): processes that
    set up one new database at once (a worker started before its server, then the app) met
    in its catalog and failed, despite IF NOT EXISTS: the ledger's `type ... already exists`
    (its own set-up is one at a time too, `Ledger`, where a saver's role may be allowed one
    connection), LangGraph's migrations' duplicate keys, a deadlock of their concurrent index
    builds (seen in CI). The later set-up finds the tables made. The lock is tried, not
    waited for in a statement: LangGraph's migrations build indexes CONCURRENTLY, which wait
    for every statement in progress, a waiter's included, and the two waited on each other
    for good."""
    pause = 0.01
    while conn.execute(f"SELECT pg_try_advisory_lock({_SET_UP_LOCK})").fetchone() != (True,):
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
    yield  # (the lock goes with the session, closed however this ends)


def _reentrant(saver: Any) -> Any:
    """The saver's lock, made reentrant: the ledger shares the saver's one connection under it,
    and may be read while a lazily listed checkpoint holds it on the same thread. Swapped while
    held, so no statement of the saver is under way."""
    lock = saver.lock
    if not isinstance(lock, type(threading.RLock())):
        with lock:
            saver.lock = threading.RLock()
    return saver.lock


class _Shared:
    """One PostgreSQL connection (a saver's own) lent to the ledger as a pool of one, under
    the saver's lock."""

    def __init__(self, conn: Any, lock: Any) -> None:
        self.conn = conn
        self.lock = lock

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        with self.lock:
            yield self.conn

    def apart(self, statement: Callable[[Any], int]) -> int:
        """Run a lease renewal. On the saver's connection when its lock comes free soon (its
        session, schema and role; no connection more); else (someone holds the lock: a
        checkpoint list read lazily, as long as its reader likes) on a connection of its own
        for this statement, opened with a timeout and closed after; failing that, not now
        (the keeper tries again well before the lease lapses)."""
        if self.lock.acquire(timeout=APART_WAIT):
            try:
                return statement(self.conn)
            finally:
                self.lock.release()
        from psycopg import Connection
        from psycopg.conninfo import make_conninfo

        info = self.conn.info
        with Connection.connect(make_conninfo(info.dsn, password=info.password),
                                autocommit=True, connect_timeout=APART_CONNECT,
                                prepare_threshold=0) as conn:
            return statement(conn)


APART_WAIT = 1.0
"""Seconds a lease renewal waits for a single-connection saver's lock before it goes apart."""
APART_CONNECT = 3
"""Seconds (libpq's `connect_timeout`) a renewal's own connection may take to open."""


_T = TypeVar("_T")


def _set_up(make: Callable[[], _T]) -> _T:
    """Run a table set-up that other processes may run on the same new file at the same time:
    LangGraph's savers and stores (and the ledger) check then migrate, so the loser of the race
    finds the column or table the winner just added. Its set-up is then done: run it again."""
    for attempt in range(5):
        try:
            return make()
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if attempt == 4 or not ("duplicate column" in text or "already exists" in text):
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def open_storage(spec: BaseCheckpointSaver[Any] | str | None) -> Storage:
    """Open the checkpointer (and a store beside it) described by `spec`."""
    if spec is None or spec == "memory":
        ledger = Ledger.sqlite()
        return Storage(_beside(MemorySaver(), ledger), InMemoryStore(),
                       "memory (this process only)", ledger)
    if isinstance(spec, BaseCheckpointSaver):
        return Storage(spec, InMemoryStore(), f"{type(spec).__name__} instance",
                       _ledger_beside(spec))
    if not isinstance(spec, str):
        raise TypeError(UNKNOWN_URL.format(value=spec))  # (not text: no password in it)
    if spec.startswith("sqlite://"):
        path = _sqlite_path(spec)
        saver = ThreadedSqliteSaver(_connect(path))
        _set_up(saver.setup)
        store = ThreadedSqliteStore(_connect(path, autocommit=True))
        _set_up(store.setup)
        ledger = _set_up(lambda: Ledger.sqlite(path))
        # SQLite takes one writer per file; the three connections of this process take turns
        # on one (reentrant) lock instead of meeting on the file's lock, where a loser sleeps
        # (1, 2, 5, 10 ms... SQLite's busy backoff) long after the winner is done. Lease
        # renewals keep a connection of their own: a lazily read checkpoint list holds this
        # lock, and must not starve them.
        saver.lock = store.lock = ledger.lock  # type: ignore[misc]
        return Storage(_beside(saver, ledger), store, f"sqlite file {path}", ledger, spec)
    if spec.startswith(("postgresql://", "postgres://")):
        return _open_postgres(spec)
    raise ValueError(UNKNOWN_URL.format(value=masked_url(spec)))


# ---------------------------------------------------------------- PostgreSQL
# (langgraph-checkpoint-postgres and psycopg are imported only when a URL asks for them)

MISSING = (
    "checkpointer {url!r} needs PostgreSQL support: pip install 'graphkit-hitl[postgres]' "
    "(langgraph-checkpoint-postgres and psycopg)"
)
POOL_SIZE = 8
CONNECT_TIMEOUT = 10
"""Seconds (libpq's `connect_timeout`) the first connection to a database may take."""


def _without_password(text: str, url: str) -> str:
    """`text` with the passwords `url` holds (in its user info, up to the host's `@`, and as
    a `password=` parameter; as written, and decoded) shown as the mask."""
    found = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*:(.*)@[^@]*$", url)
    passwords = [found.group(1)] if found else []
    passwords += re.findall(r"[?&]password=([^&#]*)", url)
    # (libpq ends a password at its first raw "@" and reads the rest as the host: each
    # part of one is said in its errors)
    parts = [part for p in passwords for part in p.split("@") if len(part) >= 4]
    forms = {form for p in [*passwords, *parts] for form in (p, unquote(p))} - {""}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, MASK)
    return text


def masked_url(url: str) -> str:
    """`url` as graphkit's messages may say it: every password it holds shown as the mask."""
    return _without_password(url, url)


def shown_url(url: str) -> str:
    """Where a storage URL points, for banners and messages: a PostgreSQL URL's host and
    database (no user info, a `password=` parameter masked); any other URL masked."""
    masked = masked_url(url)
    return masked.split("@")[-1] if masked.startswith(("postgresql://", "postgres://")) else (
        masked)


def _open_postgres(url: str) -> Storage:
    """LangGraph's PostgresSaver and PostgresStore on one connection pool, once one
    connection opened: a database that cannot be reached is psycopg's own error at once (a
    pool would retry for 30 s, logging each failure, and then time out saying less)."""
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise ImportError(MISSING.format(url=masked_url(url))) from exc
    refused: psycopg.Error | None = None
    try:  # (the connection the set-up then holds its lock on)
        first = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
    except psycopg.Error as exc:  # (libpq quotes a URL it cannot parse, password and all)
        refused = type(exc)(_without_password(str(exc), url))
    if refused is not None:
        raise refused  # (outside the handler: the original is not kept as its context)

    class ThreadedPostgresSaver(WithdrawsDeleted, FencedWrites, ServesLatest,
                                ThreadedAsyncSaver, PostgresSaver):
        """LangGraph's `PostgresSaver`, usable from async runs too."""

    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0,
                              "row_factory": dict_row}
    with first, _one_set_up_at_a_time(first):
        pool: ConnectionPool[Any] = ConnectionPool(url, min_size=1, max_size=POOL_SIZE,
                                                   kwargs=kwargs, open=True)
        saver = ThreadedPostgresSaver(pool)
        store = PostgresStore(pool)
        saver.setup()
        store.setup()
        ledger = Ledger.postgres(pool)
    return Storage(_beside(saver, ledger), store, f"postgresql {shown_url(url)}", ledger, url)
