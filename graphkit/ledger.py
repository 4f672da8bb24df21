"""Exactly-once decisions and per-thread leases: the compare-and-set LangGraph's `BaseStore`
does not offer.

Two processes deciding the same approval at the same moment must not both win, and two
processes resuming the same thread must not both run it. Both rest on a primary key in the same
database as the checkpoints (SQLite file or PostgreSQL): the first `INSERT` of a decision wins;
a lease row names the one process that may advance a thread, and expires if that process dies.
Everything else (the inbox index, the audit log) lives in LangGraph's store.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

__all__ = ["LEASE_SECONDS", "Ledger", "RunBusyError"]

LEASE_SECONDS = 30.0
"""A lease outlives a crashed holder by at most this long; live holders renew it."""
WAIT_SECONDS = 120.0
"""How long a process waits for another one to finish advancing the same thread."""

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS graphkit_decisions (
        approval_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        decision TEXT NOT NULL,
        decided_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE INDEX IF NOT EXISTS graphkit_decisions_thread
        ON graphkit_decisions (thread_id)""",
    """CREATE TABLE IF NOT EXISTS graphkit_leases (
        thread_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
)


class RunBusyError(TimeoutError):
    """Another process kept advancing this thread for longer than we were willing to wait."""


class _Sql(Protocol):
    """The few statements the ledger needs, in one SQL dialect."""

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int: ...

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...


class _Sqlite:
    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, check_same_thread=False, timeout=30.0,
                                    isolation_level=None)
        if path != ":memory:":
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
        self.lock = threading.Lock()

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        with self.lock:
            return self.conn.execute(sql, params).rowcount

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            return list(self.conn.execute(sql, params).fetchall())


class _Postgres:
    def __init__(self, pool: Any) -> None:
        self.pool = pool

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        with self.pool.connection() as conn:
            return int(conn.execute(self._sql(sql), params).rowcount)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.pool.connection() as conn:
            rows = conn.execute(self._sql(sql), params).fetchall()
        return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]


class Ledger:
    """Decisions claimed exactly once, and leases on threads, in one SQL database."""

    def __init__(self, sql: _Sql) -> None:
        self._sql = sql
        for statement in SCHEMA:
            sql.execute(statement)

    @classmethod
    def sqlite(cls, path: str = ":memory:") -> Ledger:
        return cls(_Sqlite(path))

    @classmethod
    def postgres(cls, pool: Any) -> Ledger:
        return cls(_Postgres(pool))

    # ------------------------------------------------------------------ decisions

    def claim(self, approval_id: str, thread_id: str, decision: dict[str, Any]) -> bool:
        """Record `decision` unless one is recorded already; True when this call won."""
        won = self._sql.execute(
            "INSERT INTO graphkit_decisions (approval_id, thread_id, decision, decided_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (approval_id) DO NOTHING",
            (approval_id, thread_id, json.dumps(decision, default=str), time.time()),
        )
        return won == 1

    def decision(self, approval_id: str) -> dict[str, Any] | None:
        return self.decisions([approval_id]).get(approval_id)

    def decisions(self, approval_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The recorded decisions among `approval_ids` (chunked, for long inbox pages)."""
        ids = list(dict.fromkeys(approval_ids))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            rows = self._sql.query(
                f"SELECT approval_id, decision FROM graphkit_decisions "
                f"WHERE approval_id IN ({marks})",
                tuple(chunk),
            )
            found.update({str(r[0]): json.loads(r[1]) for r in rows})
        return found

    # ------------------------------------------------------------------ leases

    def _take(self, thread_id: str, owner: str) -> bool:
        now = time.time()
        taken = self._sql.execute(
            "INSERT INTO graphkit_leases (thread_id, owner, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
            "expires_at = excluded.expires_at "
            "WHERE graphkit_leases.expires_at < ? OR graphkit_leases.owner = ?",
            (thread_id, owner, now + LEASE_SECONDS, now, owner),
        )
        return taken == 1 or self._take_from_dead(thread_id, owner)

    def _take_from_dead(self, thread_id: str, owner: str) -> bool:
        """A lease held by a process of this host that no longer exists is free now, not
        when it expires: a worker restarted after a crash need not wait."""
        rows = self._sql.query("SELECT owner FROM graphkit_leases WHERE thread_id = ?",
                               (thread_id,))
        if not rows or not _dead_here(str(rows[0][0])):
            return False
        taken = self._sql.execute(
            "UPDATE graphkit_leases SET owner = ?, expires_at = ? "
            "WHERE thread_id = ? AND owner = ?",
            (owner, time.time() + LEASE_SECONDS, thread_id, rows[0][0]))
        return taken == 1

    def _release(self, thread_id: str, owner: str) -> None:
        self._sql.execute("DELETE FROM graphkit_leases WHERE thread_id = ? AND owner = ?",
                          (thread_id, owner))

    @contextlib.contextmanager
    def lease(self, thread_id: str, *, wait: float = WAIT_SECONDS) -> Iterator[str]:
        """Hold the thread while the body advances it; renewed in the background."""
        owner = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex}"
        deadline = time.monotonic() + wait
        pause = 0.005
        while not self._take(thread_id, owner):
            if time.monotonic() > deadline:
                msg = f"thread {thread_id!r} is being advanced by another process"
                raise RunBusyError(msg)
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        _KEEPER.hold(self, thread_id, owner)
        try:
            yield owner
        finally:
            _KEEPER.drop(thread_id, owner)
            self._release(thread_id, owner)


_HOST = socket.gethostname()


def _dead_here(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != _HOST or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


class _LeaseKeeper:
    """One daemon thread per process renews every lease this process holds, so a lease costs
    no thread of its own and still outlives a slow run (but not a dead process)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], Ledger] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, ledger: Ledger, thread_id: str, owner: str) -> None:
        with self._lock:
            self._held[(thread_id, owner)] = ledger
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="graphkit-leases",
                                                daemon=True)
                self._thread.start()

    def drop(self, thread_id: str, owner: str) -> None:
        with self._lock:
            self._held.pop((thread_id, owner), None)

    def _run(self) -> None:
        while True:
            time.sleep(LEASE_SECONDS / 3)
            with self._lock:
                held = list(self._held.items())
            for (thread_id, owner), ledger in held:
                with contextlib.suppress(Exception):  # retried on the next round
                    ledger._take(thread_id, owner)


_KEEPER = _LeaseKeeper()
