"""The few SQL statements the ledger needs, in SQLite's and PostgreSQL's dialects, and the
JSON and path encodings of its columns."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

__all__ = ["PAGE_SIZE", "Batch", "Postgres", "PostgresTx", "RunBusyError", "Sql", "Sqlite",
           "SqliteTx", "Statement", "Tx", "dumps", "iso_now_ms", "loads", "path_text"]

PAGE_SIZE = 8192
"""Bytes per page of a SQLite file graphkit creates: a checkpoint row of about 2.5 KB left 40%
of each 4 KiB page empty (about 8% of the file), and 16 KiB pages cost one page per table and
index."""


class RunBusyError(TimeoutError):
    """Another process kept advancing this thread for longer than we were willing to wait."""


class Tx(Protocol):
    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int: ...

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]: ...


Statement = tuple[str, tuple[Any, ...]]

_WRITES = re.compile(r"\s*(?:INSERT INTO|UPDATE|DELETE FROM)\s+(\w+)")


class Batch:
    """A `Tx` that keeps the writes it is given, for `Sql.write_all` to run together (their
    row counts are not known until then: what a batch writes is never read back)."""

    def __init__(self) -> None:
        self.statements: list[Statement] = []

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        self.statements.append((sql, params))
        return 0

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        msg = "a batch only writes: what it read would not be written yet"
        raise TypeError(msg)


class Sql(Tx, Protocol):
    """The few statements the ledger needs, in one SQL dialect."""

    now: str
    """An SQL expression: the database's clock, in seconds since the epoch."""
    greatest: str
    """The function that gives the greatest of its arguments."""
    serial: str
    skip_locked: str
    keyed: str
    first_segment: str
    """An SQL expression (with `{c}` for a column): the first segment of an agent path."""
    has_column: str
    """A query's tail (table, column as parameters) that yields a row if the column exists."""
    notify: str | None
    xact_lock: str | None
    """An SQL expression (with `{key}` for a text) that takes a lock on that key until the
    transaction ends; None where a write transaction holds the whole database (SQLite)."""
    writes_with: bool
    """Whether a statement may carry others as data-modifying `WITH` parts (PostgreSQL): two
    writes in one round trip and one commit, where SQLite runs them one after the other."""

    def transaction(self) -> contextlib.AbstractContextManager[Tx]: ...

    @contextlib.contextmanager
    def durable(self) -> Iterator[None]:
        """What commits inside is on disk when it returns (`sync` once it committed)."""
        yield
        self.sync()

    def write_all(self, statements: Sequence[Statement]) -> None:
        """Run writes whose row counts nobody reads, all or none: on PostgreSQL as one
        statement (each but the last a `WITH` part: one round trip, one commit) where each
        writes a table of its own (parts of one statement that wrote one row twice would leave
        either write), else in one transaction."""
        if len(statements) <= 1:
            for statement in statements:
                self.execute(*statement)
            return
        tables = [m.group(1) if (m := _WRITES.match(sql)) else None for sql, _ in statements]
        if self.writes_with and None not in tables and len(set(tables)) == len(tables):
            *parts, (last, _) = statements
            sql = "WITH " + ", ".join(f"w{i} AS ({part})" for i, (part, _) in
                                      enumerate(parts)) + f" {last}"
            self.execute(sql, tuple(p for _, params in statements for p in params))
            return
        with self.transaction() as tx:
            for statement in statements:
                tx.execute(*statement)

    def sync(self) -> None:
        """Every commit this process made so far is on disk when it returns (SQLite files:
        one sync of the WAL; PostgreSQL: a synchronous commit, where commits are not; in-memory
        commits need none)."""
        ...

    def execute_apart(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """`execute` for the lease keeper, never behind a lock another component may hold
        while it waits on its caller (a checkpoint list being read lazily)."""
        ...

    def away(self, exc: BaseException) -> bool:
        """Whether `exc` says the database is away for now (down, unreachable, locked past the
        wait): a write may land if tried again, unlike a statement that is wrong."""
        ...


class SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        return self.conn.execute(sql, params).rowcount

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, params).fetchall())


_sync_file = getattr(os, "fdatasync", os.fsync)
"""What SQLite itself calls to sync its WAL on Linux (fdatasync: the data and the size, not
the times); `os.fsync` where there is none."""


class _WalSync:
    """Group commit for one SQLite file in WAL mode. `sync` syncs the WAL file, which is all that
    a synchronous=FULL commit adds to a NORMAL one, but outside the ledger's lock (which the
    saver may share), and once for every commit marked before it began: calls that finish
    together wait for one sync, not for one each in turn. Where the WAL cannot be synced
    apart (a platform whose fsync needs a writable handle, say), `full_write` does it: a
    synchronous=FULL commit, whose sync covers every commit before it."""

    def __init__(self, path: str, full_write: Callable[[], None]) -> None:
        self.path = path + "-wal"
        self.full_write = full_write
        self.marks = 0
        """Sync points taken, each after its caller's commits (under the ledger's lock)."""
        self.synced = 0
        """The marks that the last sync covered."""
        self.lock = threading.Lock()
        self.fd: int | None = None

    def mark(self) -> int:
        self.marks += 1
        return self.marks

    def sync(self, mark: int) -> None:
        with self.lock:
            if self.synced >= mark:
                return  # a sync that began after this mark covered it
            covered = self.marks  # each taken after its commits were written to the WAL
            try:
                _sync_file(self._fd())
            except OSError:
                pass
            else:
                self.synced = covered
                return
        self.full_write()  # outside this lock: it takes the ledger's

    def _fd(self) -> int:
        """The WAL file, opened once (again if it was replaced)."""
        found = os.stat(self.path)
        if self.fd is not None:
            held = os.fstat(self.fd)
            if (held.st_ino, held.st_dev) == (found.st_ino, found.st_dev):
                return self.fd
            os.close(self.fd)
            self.fd = None
        self.fd = os.open(self.path, os.O_RDONLY)
        return self.fd

    def __del__(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


_SQLITE_AWAY = frozenset({5, 6, 10, 14, 15})
"""SQLite's busy, locked, I/O error, cannot open and protocol codes (the primary code: its low
byte): the file is held or away for now."""


class Sqlite(Sql):
    now = "((julianday('now') - 2440587.5) * 86400.0)"
    greatest = "MAX"
    serial = "INTEGER"  # an INTEGER PRIMARY KEY is SQLite's rowid: increasing
    keyed = " WITHOUT ROWID"
    """Tables looked up by their text key are that key's b-tree alone: a write changes one
    page, not a table page and its key index's page (each page is a WAL frame to write)."""
    skip_locked = ""  # one writer at a time: the UPDATE is atomic as it is
    first_segment = "substr({c}, 1, instr({c} || '/', '/') - 1)"
    has_column = "1 FROM pragma_table_info(?) WHERE name = ?"
    notify: str | None = None
    xact_lock: str | None = None  # (one writer at a time)
    writes_with = False  # in-process: a statement costs no round trip, nor its own sync

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, check_same_thread=False, timeout=30.0,
                                    isolation_level=None)
        self._wal: _WalSync | None = None
        self._full = False
        if path != ":memory:":
            self.conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file only
            wal = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
            # NORMAL, but the commits `durable()` and `sync()` cover (a decision, an execution
            # claim, a result, a once-result) are on disk before the tool starts, with every
            # commit before them (one WAL), so a power loss cannot make a payment that ran run
            # again. A lost lease or checkpoint only means a wait or a replay the ledger answers.
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self._wal = _WalSync(path, self._full_write) if wal else None
            self._full = not wal  # another journal: each sync is a synchronous=FULL write
        self.path = path
        self.lock = threading.RLock()
        """Reentrant: it may be shared with the saver and store of the same file, whose list
        cursors hold it while the thread that iterates them reads the ledger."""
        self._tx = SqliteTx(self.conn)
        self._apart: sqlite3.Connection | None = None
        self._apart_lock = threading.Lock()

    def execute_apart(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        if self.path == ":memory:":  # a private database: nobody else holds its lock
            return self.execute(sql, params)
        with self._apart_lock:
            if self._apart is None:
                self._apart = sqlite3.connect(self.path, check_same_thread=False,
                                              timeout=30.0, isolation_level=None)
                self._apart.execute("PRAGMA synchronous=NORMAL")  # lease renewals only
            return self._apart.execute(sql, params).rowcount

    def away(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and (
            getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _SQLITE_AWAY

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        with self.lock:
            return self._tx.execute(sql, params)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            return self._tx.query(sql, params)

    def sync(self) -> None:
        if self._wal is not None:
            with self.lock:  # after this thread's commits: the mark covers them
                mark = self._wal.mark()
            self._wal.sync(mark)
        elif self._full:
            self._full_write()

    def _full_write(self) -> None:
        """One synchronous=FULL commit, whose sync makes every commit before it durable. It
        writes a new value: SQLite writes nothing for a row left as it was, and a commit that
        wrote nothing syncs nothing."""
        with self.lock:
            self.conn.execute("PRAGMA synchronous=FULL")
            try:
                self.conn.execute(
                    "INSERT INTO graphkit_meta (key, value) VALUES ('durable', '1') "
                    "ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(graphkit_meta.value "
                    "AS INTEGER) + 1 AS TEXT)")
            finally:
                self.conn.execute("PRAGMA synchronous=NORMAL")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._tx
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")


class PostgresTx:
    """Statements on one connection, whose rows come as tuples whatever the connection's own
    row factory (a saver's pool makes dicts, which cost a dict per row and merge columns of
    one name)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def _cursor(self, sql: str, params: tuple[Any, ...]) -> Any:
        from psycopg.rows import tuple_row

        return self.conn.cursor(row_factory=tuple_row).execute(self._sql(sql), params)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        return int(self._cursor(sql, params).rowcount)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self._cursor(sql, params).fetchall())


_FLUSH = ("INSERT INTO graphkit_meta (key, value) VALUES ('flush ' || pg_backend_pid(), '1') "
          "ON CONFLICT (key) DO UPDATE SET value = (CAST(graphkit_meta.value AS BIGINT) + 1)::TEXT")
"""A write for a synchronous commit to flush (a transaction that writes nothing commits
without a WAL record, and so flushes nothing): one row per server process, which one
connection uses at a time, so that connections flushing together never wait on a row."""


class Postgres(Sql):
    now = "EXTRACT(EPOCH FROM clock_timestamp())::DOUBLE PRECISION"
    greatest = "GREATEST"
    serial = "BIGSERIAL"
    keyed = ""
    skip_locked = " FOR UPDATE SKIP LOCKED"
    first_segment = "split_part({c}, '/', 1)"
    has_column = ("1 FROM information_schema.columns WHERE table_schema = current_schema() "
                  "AND table_name = ? AND column_name = ?")
    notify: str | None = "SELECT pg_notify('graphkit_ready', '')"
    """Workers LISTEN on this channel; a notification is sent when the transaction commits."""
    xact_lock: str | None = "pg_advisory_xact_lock(hashtextextended({key}, 0))"
    writes_with = True

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._flush = False
        """Whether a session the ledger commits in returns from a commit before its WAL is
        flushed (`synchronous_commit = off`, for the server, the database or the role), so
        that `sync` must flush it. Each session is asked once, as the ledger first uses it: a
        setting changed later (`ALTER ROLE`, a restarted server) holds for new sessions."""
        self._asked: weakref.WeakSet[Any] = weakref.WeakSet()

    def away(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.OperationalError)  # (a lost connection, a pool's wait)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        with self.pool.connection() as conn:
            if conn not in self._asked:
                (setting,), = PostgresTx(conn).query(
                    "SELECT current_setting('synchronous_commit')")
                self._flush = self._flush or setting == "off"
                self._asked.add(conn)
            yield conn

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        with self._connection() as conn:
            return PostgresTx(conn).execute(sql, params)

    def execute_apart(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        # A pool lends another connection; one connection lent by a saver (under its lock)
        # says how a renewal gets past whoever holds it (`apart`).
        apart = getattr(self.pool, "apart", None)
        if apart is not None:
            return int(apart(lambda conn: PostgresTx(conn).execute(sql, params)))
        return self.execute(sql, params)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._connection() as conn:
            return PostgresTx(conn).query(sql, params)

    def sync(self) -> None:
        """Nothing to do where a commit is durable as it returns (`synchronous_commit` on, the
        server's default). Where it is off, one synchronous commit: it returns once the WAL
        up to it is on disk, which holds every commit made before it, by any connection."""
        if self._flush:
            with self.transaction() as tx:
                tx.execute("SET LOCAL synchronous_commit = on")
                tx.execute(_FLUSH)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Tx]:
        with self._connection() as conn, conn.transaction():
            yield PostgresTx(conn)


def iso_ms(seconds: float) -> str:
    """A time in seconds since the epoch (the ledger's columns), as every record shows one:
    ISO 8601, milliseconds, UTC with Z."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def iso_now_ms() -> str:
    """Now, as an audit entry's `at` says it (`_validate.now_iso`: ISO 8601, milliseconds,
    UTC with Z)."""
    return iso_ms(datetime.now(UTC).timestamp())


def dumps(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def loads(text: Any) -> Any:
    return json.loads(text) if text else None


def path_text(agent_path: Sequence[str]) -> str:
    return "/".join(agent_path)
