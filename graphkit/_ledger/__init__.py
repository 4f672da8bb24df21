"""What graphkit keeps where a client cannot write it: planned calls, decisions, executions,
grants, the audit log, and per-thread leases, in SQL beside the checkpoints.

A LangGraph server lets its clients write a thread's state and the store; it never lets them
write these tables. So the approval gate and the tools node trust only what is here: a call
runs when its row says it needs no approval, or when its approval row holds a decision for
exactly the arguments that run, and only the first process to claim its execution runs it.
Each claim and its audit entry commit in one transaction; expiry is judged by the database's
clock inside the claim itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from graphkit._ledger._calls import Executions
from graphkit._ledger._decisions import Decisions, Decline, NewRun, QueuedFor, Stop
from graphkit._ledger._leases import Leases, RunToRecord
from graphkit._ledger._messages import Messages, Queued, queued_id, same_queued
from graphkit._ledger._outbox import Notifications
from graphkit._ledger._plans import Plans, TurnReading
from graphkit._ledger._rows import (
    ApprovalRow,
    AuditRow,
    CallRow,
    Claimed,
    Clearance,
    GrantRow,
    OutboxEvent,
    PendingTurn,
    Start,
)
from graphkit._ledger._schema import (
    DONE,
    LATE,
    LEASE_SECONDS,
    MIGRATIONS,
    NOTIFY_EVENTS,
    SCHEMA,
    SCHEMA_DIGEST,
    SERVER_AGENT,
    SERVER_THREAD,
    WAIT_SECONDS,
)
from graphkit._ledger._sql import (
    PAGE_SIZE,
    Batch,
    Postgres,
    RunBusyError,
    Sql,
    Sqlite,
    Tx,
    iso_ms,
)
from graphkit._ledger._waiting import Waiting, WaitingRow
from graphkit._state import TurnPlan

__all__ = [
    "DONE",
    "LEASE_SECONDS",
    "NOTIFY_EVENTS",
    "PAGE_SIZE",
    "SERVER_AGENT",
    "SERVER_THREAD",
    "WAIT_SECONDS",
    "ApprovalRow",
    "AuditRow",
    "CallRow",
    "Claimed",
    "Clearance",
    "Decline",
    "GrantRow",
    "Ledger",
    "NewRun",
    "OutboxEvent",
    "PendingTurn",
    "Queued",
    "QueuedFor",
    "RunBusyError",
    "RunToRecord",
    "Start",
    "Stop",
    "TurnReading",
    "WaitingRow",
    "iso_ms",
    "queued_id",
    "same_queued",
]


def _create(sql: Sql, run: Sql | Tx) -> None:
    """The ledger's tables, columns and indexes where they are missing (`run`: `sql` itself,
    or a transaction of it)."""
    for statement in SCHEMA:
        run.execute(statement.format(serial=sql.serial, keyed=sql.keyed))
    for table, column, kind in MIGRATIONS:
        if not run.query(f"SELECT {sql.has_column} ", (table, column)):
            run.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    for statement in LATE:
        run.execute(statement)


class Ledger(Plans, Decisions, Executions, Leases, Messages, Notifications, Waiting):
    """graphkit's trusted records and leases, in one SQL database: each concept's statements
    are in a module of their own (`_plans`, `_decisions`, `_calls`, `_leases`, `_messages`,
    `_outbox`, `_waiting`), on the connection, audit and outbox of `_base`."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql
        self._holds = {}
        self._recorded = {}
        if sql.xact_lock is None:  # (SQLite: DDL takes the file's one write lock)
            _create(sql, sql)
            return
        # PostgreSQL: made already, its statements are not run: `CREATE INDEX IF NOT EXISTS`
        # takes a SHARE lock on its table all the same, to the transaction's end, and every
        # process that opened the ledger deadlocked with writers in progress (helper-142)
        if sql.query("SELECT to_regclass('graphkit_meta') IS NOT NULL") == [(True,)] and (
                sql.query("SELECT value FROM graphkit_meta WHERE key = 'schema'")
                == [(SCHEMA_DIGEST,)]):
            return
        # processes that set up one database at once met in its catalog, and one failed on
        # "type ... already exists" despite IF NOT EXISTS; one at a time (on the connection
        # it has: a saver's role may be allowed just one), the later finds them
        with sql.transaction() as tx:
            tx.query(f"SELECT {sql.xact_lock.format(key='?')}", ("graphkit ledger schema",))
            _create(sql, tx)
            tx.execute("INSERT INTO graphkit_meta (key, value) VALUES ('schema', ?) ON "
                       "CONFLICT (key) DO UPDATE SET value = excluded.value", (SCHEMA_DIGEST,))

    def record_pass(self, thread_id: str, agent_path: Sequence[str], *, run_id: str | None,
                    scope: str, waiting: Mapping[str, int], done: Iterable[str] = (),
                    strays: bool = False, turn: TurnPlan | None = None,
                    cleared: Mapping[str, Clearance] | None = None) -> None:
        """A gate pass's writes, all or none (one statement on PostgreSQL): what its run now
        waits on (`mark_waiting`), its plan of the turn as it now stands (`save_turn`), and
        the approvals it verified and lets run (`clear`), before any of its Sends leaves."""
        batch = Batch()
        if cleared:
            self._clear(batch, cleared)
        if turn is not None:
            self._save_turn(batch, thread_id, agent_path, turn)
        self._sql.write_all([*batch.statements, *self._marks(
            thread_id, agent_path, run_id=run_id, scope=scope, waiting=waiting, done=done,
            strays=strays)])

    @classmethod
    def sqlite(cls, path: str = ":memory:") -> Ledger:
        return cls(Sqlite(path))

    @property
    def in_memory(self) -> bool:
        """A private in-memory database (memory storage): nothing else shares it."""
        return isinstance(self._sql, Sqlite) and self._sql.path == ":memory:"

    @property
    def lock(self) -> Any:
        """The in-process lock around this ledger's SQLite connection (None on PostgreSQL)."""
        return getattr(self._sql, "lock", None)

    @classmethod
    def postgres(cls, pool: Any) -> Ledger:
        return cls(Postgres(pool))
