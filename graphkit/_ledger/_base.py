"""What every part of the ledger shares: its SQL connection, the database's clock, durable
commits, and the audit log with its notifications (every audited event a receiver is told of
is written to the outbox in the same transaction)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from graphkit._ledger._rows import (
    ApprovalRow,
    AuditRow,
    CallRow,
    Clearance,
)
from graphkit._ledger._schema import (
    NOTIFY_EVENTS,
    NOTIFY_RECHECK,
)
from graphkit._ledger._sql import Sql, Tx, iso_now_ms, loads
from graphkit._ledger._values import stowed, unstowed

__all__ = ["LedgerBase"]


class LedgerBase:
    """What every part of the ledger shares: its SQL connection, the database's clock, durable"""

    _sql: Sql
    _holds: dict[tuple[str, str], float]
    """(run id, owner) of the runs this process queued held for itself (`hold_ready`), and
    when (monotonic)."""
    _recorded: dict[str, tuple[str, str]]
    """The runs this process recorded (`Leases.run`: their thread and agent, which never
    change), so that it reads none of them back."""

    def now(self) -> float:
        """The database's clock (seconds since the epoch)."""
        return float(self._sql.query(f"SELECT {self._sql.now}")[0][0])

    def _audit(self, tx: Tx, rows: Iterable[AuditRow]) -> None:
        for row in rows:
            written = tx.execute(
                "INSERT INTO graphkit_audit (thread_id, approval_id, dedupe, entry) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (dedupe) DO NOTHING",
                (row.thread_id, row.approval_id, row.dedupe, stowed(tx, row.entry)))
            if written == 1 and row.entry.get("event") in NOTIFY_EVENTS:
                self._outbox(tx, row)

    def audit(self, rows: Sequence[AuditRow]) -> None:
        if rows:
            with self._sql.transaction() as tx:
                self._audit(tx, rows)

    def read_audit(self, *, thread_id: str | None = None, approval_id: str | None = None
                   ) -> list[dict[str, Any]]:
        """Audit entries in the order they were written."""
        where, params = [], []
        if thread_id is not None:
            where.append("thread_id = ?")
            params.append(thread_id)
        if approval_id is not None:
            where.append("approval_id = ?")
            params.append(approval_id)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._sql.query(f"SELECT entry FROM graphkit_audit{clause} ORDER BY seq",
                               tuple(params))
        return [unstowed(self._sql.query, r[0]) for r in rows]

    def _flush(self) -> None:
        """Make every commit so far durable (`Sql.sync`)."""
        self._sql.sync()

    _notify_cache: tuple[float, int, bool, str | None] | None = None
    """(when read, epoch, outbox on, review URL): the `notify` row, re-read every few seconds."""

    _notify_epoch: ClassVar[int] = 0
    """Bumped when a ledger of this process turns notifications on: every cache re-reads."""

    _outbox_listeners: ClassVar[list[Callable[[], None]]] = []
    """Dispatchers of this process, woken when an outbox row is written (a hint: they poll)."""

    def _notifying(self, tx: Tx) -> tuple[bool, str | None]:
        """Whether some process notifies (so events go to the outbox), cached per ledger: no
        process notifying costs one small read every `NOTIFY_RECHECK` seconds."""
        cache = self._notify_cache
        moment = time.monotonic()
        if (cache is None or moment - cache[0] > NOTIFY_RECHECK
                or cache[1] != LedgerBase._notify_epoch):
            rows = tx.query("SELECT value FROM graphkit_meta WHERE key = 'notify'")
            value = loads(rows[0][0]) if rows else None
            link = value.get("review_url") if isinstance(value, dict) else None
            cache = (moment, LedgerBase._notify_epoch, bool(rows),
                     str(link) if isinstance(link, str) and link else None)
            self._notify_cache = cache
        return cache[2], cache[3]

    def _outbox(self, tx: Tx, row: AuditRow, *, kind: str | None = None,
                extra: Mapping[str, Any] | None = None, replaces: str | None = None) -> None:
        """The notification of an audit entry (of type `kind`, else its event's), in the
        transaction that writes the entry. `replaces` names the type of the approval's earlier
        event this one corrects: a receiver that keeps the last event per approval holds the
        truth."""
        on, review_url = self._notifying(tx)
        if not on:
            return
        payload: dict[str, Any] = {"approval": row.entry, **(extra or {})}
        if review_url and row.approval_id:
            payload["link"] = f"{review_url.rstrip('/')}/approvals/{row.approval_id}"
        if replaces is not None and row.approval_id:
            earlier = tx.query(
                "SELECT event_id FROM graphkit_outbox WHERE approval_id = ? AND type = ? "
                "ORDER BY created_at DESC LIMIT 1", (row.approval_id, replaces))
            payload["replaces"] = str(earlier[0][0]) if earlier else None
        tx.execute(
            "INSERT INTO graphkit_outbox (event_id, type, thread_id, approval_id, created_at, "
            f"payload) VALUES (?, ?, ?, ?, {self._sql.now}, ?)",
            (str(uuid.uuid4()), kind or NOTIFY_EVENTS[str(row.entry["event"])], row.thread_id,
             row.approval_id, stowed(tx, payload)))
        for listener in list(LedgerBase._outbox_listeners):
            with contextlib.suppress(Exception):
                listener()

    def _call_finished(self, tx: Tx, call_key: str, outcome: Mapping[str, Any],
                       result: str) -> None:
        """`run.finished` for a call that needed a decision: whether it ran, failed, will never
        run, or was stopped after it started (`result`), with the tool's own words."""
        if not self._notifying(tx)[0]:
            return
        rows = tx.query("SELECT approval_id, thread_id, agent_path, tool_name, tool_call_id "
                        "FROM graphkit_calls WHERE call_key = ? AND approval_id IS NOT NULL",
                        (call_key,))
        if not rows:
            return
        approval_id, thread_id, path, tool_name, tool_call_id = rows[0]
        entry = {"event": result, "approval_id": approval_id, "thread_id": thread_id,
                 "agent_path": str(path).split("/"), "tool_name": tool_name,
                 "tool_call_id": tool_call_id, "at": iso_now_ms()}
        content = str(outcome.get("content", ""))
        self._outbox(tx, AuditRow(thread_id=str(thread_id), approval_id=str(approval_id),
                                  entry=entry),
                     kind="run.finished", extra={"outcome": result, "result": content[:2000]})

    serves = False
    """Whether this is the ledger of the agents a LangGraph server serves in this process
    (`graphkit._storage.served_storage`): the threads of what they ask are the server's."""

    # implemented by `Leases`, called by decisions in their own transaction
    def _enqueue(self, tx: Tx, approval_id: str, *, held_by: str | None = None) -> str | None:
        raise NotImplementedError

    def hold_ready(self, run_id: str, owner: str) -> None:
        raise NotImplementedError

    def _hold_new_run(self, tx: Tx, run_id: str, agent: str, thread_id: str,
                      options: Mapping[str, Any], owner: str) -> None:
        raise NotImplementedError

    # implemented by `Messages`
    def _queue(self, tx: Tx, thread_id: str, agent: str, ai_message_id: str,
               messages: Sequence[Mapping[str, Any]], *, vouched: bool = False) -> None:
        raise NotImplementedError

    # implemented by `Executions`
    def call(self, call_key: str) -> CallRow | None:
        raise NotImplementedError

    def _settle(self, tx: Tx, outcomes: Mapping[str, Mapping[str, Any]], thread_id: str
                ) -> None:
        raise NotImplementedError

    # implemented by `Plans`
    def _clear(self, tx: Tx, cleared: Mapping[str, Clearance]) -> None:
        raise NotImplementedError

    def _insert_approval(self, tx: Tx, row: ApprovalRow, *, live_grant: str | None = None
                         ) -> bool:
        raise NotImplementedError

    # implemented by `Leases`
    def _renew(self, thread_id: str, owner: str) -> bool:
        raise NotImplementedError

    def _renew_ready(self, run_id: str, owner: str) -> None:
        raise NotImplementedError

    # implemented by `Executions`
    def _renew_call(self, call_key: str, owner: str) -> None:
        raise NotImplementedError
