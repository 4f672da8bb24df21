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

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from graphkit._ledger._keeper import KEEPER
from graphkit._ledger._rows import (
    APPROVAL_COLUMNS,
    APPROVAL_READ,
    GRANT_COLUMNS,
    ApprovalRow,
    AuditRow,
    CallRow,
    GrantRow,
    OutboxEvent,
    Start,
    allowed_text,
    approval_row,
    grant_row,
)
from graphkit._ledger._schema import (
    ADMITTED,
    DONE,
    LEASE_SECONDS,
    MIGRATIONS,
    NOTIFY_EVENTS,
    NOTIFY_RECHECK,
    SCHEMA,
    SERVER_AGENT,
    SERVER_THREAD,
    WAIT_SECONDS,
)
from graphkit._ledger._sql import (
    PAGE_SIZE,
    Postgres,
    RunBusyError,
    Sql,
    Sqlite,
    Tx,
    dumps,
    iso_now,
    loads,
    path_text,
)
from graphkit._owner import holder_is_dead, new_owner
from graphkit._state import TurnPlan
from graphkit.types import ApprovalRecord

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
    "GrantRow",
    "Ledger",
    "OutboxEvent",
    "RunBusyError",
    "Start",
]


class Ledger:
    """graphkit's trusted records and leases, in one SQL database."""

    def __init__(self, sql: Sql) -> None:
        self._sql = sql
        for statement in SCHEMA:
            sql.execute(statement.format(serial=sql.serial, keyed=sql.keyed))
        for table, column, kind in MIGRATIONS:
            if not sql.query(f"SELECT {sql.has_column} ", (table, column)):
                sql.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    @classmethod
    def sqlite(cls, path: str = ":memory:") -> Ledger:
        return cls(Sqlite(path))

    @property
    def in_memory(self) -> bool:
        """A private in-memory database: its statements never wait on I/O."""
        return isinstance(self._sql, Sqlite) and self._sql.path == ":memory:"

    @property
    def lock(self) -> Any:
        """The in-process lock around this ledger's SQLite connection (None on PostgreSQL)."""
        return getattr(self._sql, "lock", None)

    @classmethod
    def postgres(cls, pool: Any) -> Ledger:
        return cls(Postgres(pool))

    def now(self) -> float:
        """The database's clock (seconds since the epoch)."""
        return float(self._sql.query(f"SELECT {self._sql.now}")[0][0])

    # ------------------------------------------------------------------ planning

    def register(self, *, calls: Sequence[CallRow] = (), approvals: Sequence[ApprovalRow] = (),
                 audits: Sequence[AuditRow] = (),
                 turn: tuple[str, Sequence[str], Callable[[set[str]], TurnPlan]] | None = None
                 ) -> set[str]:
        """Record what a gate planned, in one transaction (a re-run writes nothing twice).

        An approval given by a grant is recorded as approved only if the grant is still live
        in this very transaction (not revoked, not expired); else it is recorded pending, its
        `auto_approved` audit is left out, and its id is returned. `turn` is the gate's plan
        of the turn (thread, agent path, the plan given those ids), saved with its rows.
        """
        if not (calls or approvals or audits or turn):
            return set()
        now = self._sql.now
        fell_back: set[str] = set()
        with self._sql.transaction() as tx:
            for call in calls:
                tx.execute(
                    "INSERT INTO graphkit_calls (call_key, thread_id, agent_path, tool_name, "
                    "args_digest, approval_id, ai_message_id, turn_key, created_at) VALUES "
                    f"(?, ?, ?, ?, ?, ?, ?, ?, {now}) ON CONFLICT (call_key) DO NOTHING",
                    (call.call_key, call.thread_id, path_text(call.agent_path), call.tool_name,
                     call.args_digest, call.approval_id, call.ai_message_id, call.turn_key))
            for row in approvals:
                grant_id = (row.decision or {}).get("grant_id")
                if grant_id and self._insert_approval(tx, row, live_grant=grant_id):
                    # the planner checked the grantor's policy for this very call
                    self._clear(tx, {row.approval_id: str((row.decision or {})["run_digest"])})
                elif grant_id:
                    fell_back.add(row.approval_id)
                    row = ApprovalRow(**{**{f: getattr(row, f) for f in
                                            row.__dataclass_fields__},
                                         "status": "pending", "decision": None})
                    grant_id = None
                if not grant_id:
                    self._insert_approval(tx, row)
            self._audit(tx, [a for a in audits if not (a.approval_id in fell_back and
                                                        a.entry.get("event") == "auto_approved")])
            if turn is not None:  # the plan, as the rows just written say (with the fallbacks)
                thread_id, agent_path, plan_of = turn
                self._save_turn(tx, thread_id, agent_path, plan_of(fell_back))
        return fell_back

    def turn(self, thread_id: str, agent_path: Sequence[str], key: str) -> TurnPlan | None:
        """The gate's plan of the turn of `key` (`graphkit._state.turn_key` of its AI
        message; None: no gate planned that message here)."""
        rows = self._sql.query("SELECT plan FROM graphkit_turns WHERE thread_id = ? AND "
                               "agent_path = ? AND ai_message_id = ?",
                               (thread_id, path_text(agent_path), key))
        plan: TurnPlan | None = loads(rows[0][0]) if rows else None
        return plan

    def save_turn(self, thread_id: str, agent_path: Sequence[str], plan: TurnPlan) -> None:
        """Record the gate's plan of a turn as it now stands."""
        self._save_turn(self._sql, thread_id, agent_path, plan)

    def _save_turn(self, tx: Tx, thread_id: str, agent_path: Sequence[str],
                   plan: TurnPlan) -> None:
        tx.execute("INSERT INTO graphkit_turns (thread_id, agent_path, ai_message_id, plan) "
                   "VALUES (?, ?, ?, ?) ON CONFLICT (thread_id, agent_path, ai_message_id) "
                   "DO UPDATE SET plan = excluded.plan",
                   (thread_id, path_text(agent_path), str(plan.get("turn_key") or ""),
                    dumps(plan)))

    def clear(self, cleared: Mapping[str, str]) -> None:
        """Record that the gate verified these approvals (id -> digest of the arguments that
        will run) and lets their calls run."""
        if cleared:
            self._clear(self._sql, cleared)

    def _clear(self, tx: Tx, cleared: Mapping[str, str]) -> None:
        """One statement (atomic without a transaction of its own)."""
        rows = ", ".join(f"(?, ?, {self._sql.now})" for _ in cleared)
        tx.execute("INSERT INTO graphkit_cleared (approval_id, run_digest, cleared_at) "
                   f"VALUES {rows} ON CONFLICT (approval_id) DO UPDATE SET "
                   "run_digest = excluded.run_digest, cleared_at = excluded.cleared_at",
                   tuple(v for item in cleared.items() for v in item))

    def _insert_approval(self, tx: Tx, row: ApprovalRow, *, live_grant: str | None = None
                         ) -> bool:
        now = self._sql.now
        expires = f"{now} + ?" if row.ttl is not None else "?"
        params: tuple[Any, ...] = (
            row.approval_id, row.thread_id, row.kind, row.call_key, path_text(row.agent_path),
            row.tool_name, row.args_digest, row.ttl, row.status,
            dumps(row.decision) if row.decision else None, allowed_text(row.allowed),
            row.run_id, dumps(dict(row.record)) if row.record is not None else None)
        guard = ""
        if live_grant is not None:
            guard = (" WHERE EXISTS (SELECT 1 FROM graphkit_grants WHERE grant_id = ? AND "
                     f"revoked IS NULL AND (expires_at IS NULL OR expires_at > {now}))")
            params = (*params, live_grant)
        return tx.execute(
            f"INSERT INTO graphkit_approvals ({APPROVAL_COLUMNS}, run_id, record) "
            f"SELECT ?, ?, ?, ?, ?, ?, ?, {expires}, ?, ?, ?, ?, ?{guard or ' WHERE TRUE'} "
            "ON CONFLICT (approval_id) DO NOTHING", params) == 1

    def _audit(self, tx: Tx, rows: Iterable[AuditRow]) -> None:
        for row in rows:
            written = tx.execute(
                "INSERT INTO graphkit_audit (thread_id, approval_id, dedupe, entry) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (dedupe) DO NOTHING",
                (row.thread_id, row.approval_id, row.dedupe, dumps(row.entry)))
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
        return [json.loads(r[0]) for r in rows]

    # ------------------------------------------------------------------ decisions

    def open_calls(self, thread_id: str, agent_path: Sequence[str]) -> list[str]:
        """The calls of one agent in one thread that have no recorded outcome yet."""
        return [str(r[0]) for r in self._sql.query(
            "SELECT call_key FROM graphkit_calls WHERE thread_id = ? AND agent_path = ? "
            "AND (executed IS NULL OR executed <> ?)", (thread_id, path_text(agent_path), DONE))]

    def suspended(self, call_key: str, thread_id: str) -> bool:
        """Whether the call ever suspended in this thread (whatever became of it since)."""
        return bool(self._sql.query(
            "SELECT 1 FROM graphkit_approvals WHERE call_key = ? AND thread_id = ? "
            "AND kind = 'suspension'", (call_key, thread_id)))

    def approvals(self, approval_ids: Iterable[str]) -> dict[str, ApprovalRow]:
        """The rows among `approval_ids` (chunked, for long inbox pages)."""
        ids = list(dict.fromkeys(approval_ids))
        found: dict[str, ApprovalRow] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            rows = self._sql.query(
                f"SELECT {APPROVAL_READ} FROM graphkit_approvals "
                f"WHERE approval_id IN ({marks})", tuple(chunk))
            found.update({str(r[0]): approval_row(r) for r in rows})
        return found

    def record(self, approval_id: str) -> ApprovalRecord | None:
        """The approval record as planned (real arguments), if the ledger keeps it."""
        rows = self._sql.query("SELECT record FROM graphkit_approvals WHERE approval_id = ?",
                               (approval_id,))
        record: ApprovalRecord | None = loads(rows[0][0]) if rows and rows[0][0] else None
        return record

    def approval(self, approval_id: str) -> ApprovalRow | None:
        return self.approvals([approval_id]).get(approval_id)

    def decide(self, approval_id: str, *, thread_id: str, args_digest: str, status: str,
               decision: Mapping[str, Any], audits: Sequence[AuditRow],
               grant: GrantRow | None = None, enqueue: bool = False,
               call: Mapping[str, Any] | None = None) -> bool:
        """Claim a pending, unexpired approval for exactly these arguments; True if this call
        won. The claim, its audit entry (and a grant) commit together or not at all; with
        `enqueue`, a run left with nothing pending is handed to the workers in the same
        transaction. `call` (the record the decision was checked on: its kind, tool, agent
        path and call key) must be the ledger's own, so that a policy never judges a copy a
        client rewrote."""
        now = self._sql.now
        # the decision's type must be one the planner recorded as allowed for the call
        bound = (" AND (kind <> 'approval' OR COALESCE(allowed, ',approve,edit,reject,') "
                 "LIKE ?)")
        params: tuple[str, ...] = (f"%,{decision.get('type')},%",)
        if call is not None:
            bound += (" AND kind = ? AND tool_name = ? AND agent_path = ? "
                      "AND COALESCE(call_key, '') = ?")
            params += (str(call.get("kind")), str(call.get("tool_name")),
                      path_text([str(p) for p in call.get("agent_path") or ()]),
                      str(call.get("call_key") or ""))
        with self._sql.durable(), self._sql.transaction() as tx:
            won = tx.execute(
                f"UPDATE graphkit_approvals SET status = ?, decision = ?, decided_at = {now} "
                "WHERE approval_id = ? AND thread_id = ? AND status = 'pending' "
                f"AND args_digest = ? AND (expires_at IS NULL OR expires_at > {now}){bound}",
                (status, dumps(dict(decision)), approval_id, thread_id, args_digest, *params))
            if won != 1:
                return False
            self._audit(tx, audits)
            if enqueue:
                self._enqueue(tx, approval_id)
            if grant is not None:
                expires = f"{now} + ?" if grant.ttl is not None else "?"
                tx.execute(
                    f"INSERT INTO graphkit_grants ({GRANT_COLUMNS}) VALUES "
                    f"(?, ?, ?, ?, ?, ?, {now}, {expires}, NULL)",
                    (grant.grant_id, grant.thread_id, path_text(grant.agent_path), grant.tool_name,
                     grant.grantor, grant.approval_id, grant.ttl))
        return True

    def expire(self, approval_id: str, *, decision: Mapping[str, Any],
               audits: Sequence[AuditRow], enqueue: bool = False,
               thread_id: str | None = None) -> bool:
        """Decline a pending approval whose time is up (by the database's clock)."""
        return self.close(approval_id, decision=decision, audits=audits, overdue=True,
                          enqueue=enqueue, thread_id=thread_id)

    def overdue(self, approval_ids: Iterable[str]) -> list[str]:
        """Pending approvals among these whose time is up."""
        ids = list(approval_ids)
        if not ids:
            return []
        marks = ", ".join("?" for _ in ids)
        rows = self._sql.query(
            f"SELECT approval_id FROM graphkit_approvals WHERE approval_id IN ({marks}) "
            f"AND status = 'pending' AND expires_at IS NOT NULL AND expires_at <= {self._sql.now}",
            tuple(ids))
        return [str(r[0]) for r in rows]

    def pending_below(self, thread_id: str, agent_path: Sequence[str]) -> list[ApprovalRow]:
        """The approvals and suspensions waiting in this thread in the agents below
        `agent_path` (its subagents, at any depth)."""
        prefix = path_text(agent_path) + "/"
        rows = self._sql.query(
            f"SELECT {APPROVAL_READ} FROM graphkit_approvals WHERE thread_id = ? "
            "AND status = 'pending' AND substr(agent_path, 1, ?) = ?",
            (thread_id, len(prefix), prefix))
        return [approval_row(r) for r in rows]

    def fence(self, outcomes: Mapping[str, Mapping[str, Any]], *, thread_id: str,
              holder_dead: Callable[[str], bool]) -> set[str]:
        """Record the answer of calls of this thread whose execution was claimed and never
        finished, by a holder that died (provably, or its claim lapsed): they never start
        again, and the answer says their outcome is unknown. Returns the calls a live process
        still runs (left alone: their result is recorded when they finish)."""
        running: set[str] = set()
        now = self._sql.now
        for key, outcome in outcomes.items():
            row = self.call(key)
            if row is None or row.thread_id != thread_id or not row.executed or (
                    row.executed == DONE):
                continue
            dead = holder_dead(row.executed)
            with self._sql.transaction() as tx:
                if not tx.execute(
                        "UPDATE graphkit_calls SET executed = ?, outcome = ? WHERE call_key = ? "
                        f"AND executed = ?{'' if dead else f' AND claim_expires < {now}'}",
                        (DONE, dumps(dict(outcome)), key, row.executed)):
                    running.add(key)
                else:  # it may have taken effect: told as failed, with the reason
                    self._call_finished(tx, key, outcome, "failed")
        return running

    def pending_turns(self, thread_id: str, agent_path: Sequence[str]
                      ) -> list[tuple[str, str, str, str | None]]:
        """(approval id, kind, tool name, the turn key of the plan that asked) of what one
        agent waits on in one thread."""
        return [(str(r[0]), str(r[1]), str(r[2]), r[3]) for r in self._sql.query(
            "SELECT a.approval_id, a.kind, a.tool_name, c.turn_key FROM graphkit_approvals "
            "a LEFT JOIN graphkit_calls c ON c.call_key = a.call_key WHERE a.thread_id = ? "
            "AND a.agent_path = ? AND a.status = 'pending'", (thread_id, path_text(agent_path)))]

    def rekey_calls(self, call_keys: Iterable[str], turn_key: str) -> None:
        """The plan's calls now belong to the turn as edited (its key changed with it)."""
        keys = list(call_keys)
        if keys:
            marks = ", ".join("?" for _ in keys)
            self._sql.execute(f"UPDATE graphkit_calls SET turn_key = ? WHERE call_key IN "
                              f"({marks})", (turn_key, *keys))

    def pending_ids(self, thread_id: str, agent_path: Sequence[str]) -> set[str]:
        """The approvals and suspensions of one agent in one thread that wait on a decision."""
        return {str(r[0]) for r in self._sql.query(
            "SELECT approval_id FROM graphkit_approvals WHERE thread_id = ? AND agent_path = ? "
            "AND status = 'pending'", (thread_id, path_text(agent_path)))}

    def close(self, approval_id: str, *, decision: Mapping[str, Any],
              audits: Sequence[AuditRow], overdue: bool = False, enqueue: bool = False,
              thread_id: str | None = None) -> bool:
        """Decline a pending approval for a reason of the system's (superseded, cancelled;
        expired, with `overdue`, only if its time is up); with `thread_id`, only that thread's
        (a copied thread's state names the original's approvals)."""
        now = self._sql.now
        due = f" AND expires_at IS NOT NULL AND expires_at <= {now}" if overdue else ""
        params: tuple[str, ...] = ()
        if thread_id is not None:
            due += " AND thread_id = ?"
            params = (thread_id,)
        with self._sql.transaction() as tx:
            done = tx.execute(
                f"UPDATE graphkit_approvals SET status = 'rejected', decision = ?, "
                f"decided_at = {now} WHERE approval_id = ? AND status = 'pending'{due}",
                (dumps(dict(decision)), approval_id, *params))
            if done == 1:
                self._audit(tx, audits)
                if enqueue:
                    self._enqueue(tx, approval_id)
        return done == 1

    # ------------------------------------------------------------------ the workers' queue

    def _enqueue(self, tx: Tx, approval_id: str) -> None:
        """Hand the approval's run to the workers if nothing of it is pending any more (a
        readiness that arrives while a worker resumes the run re-arms it)."""
        now = self._sql.now
        agent = self._sql.first_segment.format(c="a.agent_path")
        # A run the LangGraph server started has no graphkit run id: its thread stands for it,
        # under a key and agent no `graphkit worker` claims (the server's queue continues it).
        queued = tx.execute(
            "INSERT INTO graphkit_ready (run_id, agent, thread_id, ready_at) "
            f"SELECT COALESCE(a.run_id, ? || a.thread_id), CASE WHEN a.run_id IS NULL "
            f"THEN ? || {agent} ELSE {agent} END, a.thread_id, {now} "
            "FROM graphkit_approvals a WHERE a.approval_id = ? AND NOT EXISTS ("
            "SELECT 1 FROM graphkit_approvals p WHERE p.status = 'pending' AND "
            "((a.run_id IS NOT NULL AND p.run_id = a.run_id) OR "
            "(a.run_id IS NULL AND p.thread_id = a.thread_id))) "
            "ON CONFLICT (run_id) DO UPDATE SET ready_at = excluded.ready_at, "
            "claimed_by = NULL, claimed_until = NULL",
            (SERVER_THREAD, SERVER_AGENT, approval_id))
        if queued and self._sql.notify:
            tx.execute(self._sql.notify)

    def next_ready(self, owner: str, agent: str) -> tuple[str, float, str] | None:
        """Claim the oldest run of `agent` the workers may resume (and whose claim is not
        held), with the database's own locking; the claim is renewed while held."""
        now = self._sql.now
        rows = self._sql.query(
            f"UPDATE graphkit_ready SET claimed_by = ?, claimed_until = {now} + ? "
            "WHERE run_id = (SELECT run_id FROM graphkit_ready WHERE agent = ? AND "
            f"(claimed_until IS NULL OR claimed_until < {now}) ORDER BY ready_at LIMIT 1"
            f"{self._sql.skip_locked}) RETURNING run_id, ready_at, thread_id",
            (owner, LEASE_SECONDS, agent))
        if not rows:
            return None
        run_id, ready_at, thread_id = str(rows[0][0]), float(rows[0][1]), str(rows[0][2])
        KEEPER.hold(self, ("ready", run_id), owner, LEASE_SECONDS)
        return run_id, ready_at, thread_id

    def take_ready(self, run_id: str, owner: str) -> float | None:
        """Claim this one run if it is ready and nobody holds it (the inbox mounted in a
        LangGraph server hands it to the server's own queue); its `ready_at`, else None. Two
        reviewers who decide at once get one claim between them."""
        now = self._sql.now
        # Nothing of the run (for a server's run: of its thread) may wait on a decision now: a
        # queue entry left by a continuation that failed must not continue a later turn.
        rows = self._sql.query(
            f"UPDATE graphkit_ready SET claimed_by = ?, claimed_until = {now} + ? "
            f"WHERE run_id = ? AND (claimed_until IS NULL OR claimed_until < {now}) "
            "AND NOT EXISTS (SELECT 1 FROM graphkit_approvals p WHERE p.status = 'pending' "
            "AND (p.run_id = graphkit_ready.run_id OR (graphkit_ready.run_id = ? || "
            "graphkit_ready.thread_id AND p.thread_id = graphkit_ready.thread_id))) "
            "RETURNING ready_at", (owner, LEASE_SECONDS, run_id, SERVER_THREAD))
        return float(rows[0][0]) if rows else None

    def server_runs_due(self) -> list[tuple[str, str]]:
        """(queue key, thread) of the LangGraph server's runs waiting to be continued whose
        claim is free: a continuation that failed is tried again after its pause."""
        rows = self._sql.query(
            "SELECT run_id, thread_id FROM graphkit_ready WHERE agent LIKE ? AND "
            f"(claimed_until IS NULL OR claimed_until < {self._sql.now}) ORDER BY ready_at",
            (SERVER_AGENT + "%",))
        return [(str(r[0]), str(r[1])) for r in rows]

    def approvals_of_run(self, run_id: str) -> list[ApprovalRow]:
        """Every approval and suspension filed under the run."""
        rows = self._sql.query(f"SELECT {APPROVAL_READ} FROM graphkit_approvals "
                               "WHERE run_id = ?", (run_id,))
        return [approval_row(r) for r in rows]

    def queued(self, run_id: str) -> bool:
        """Whether the run waits in the queue to be continued."""
        return bool(self._sql.query("SELECT 1 FROM graphkit_ready WHERE run_id = ?",
                                    (run_id,)))

    def done_ready(self, run_id: str, owner: str, ready_at: float) -> None:
        """The run was resumed: forget it, unless it became ready again meanwhile."""
        KEEPER.drop(("ready", run_id), owner)
        if self._sql.execute("DELETE FROM graphkit_ready WHERE run_id = ? AND claimed_by = ? "
                             "AND ready_at = ?", (run_id, owner, ready_at)) == 1:
            return
        self._sql.execute("UPDATE graphkit_ready SET claimed_by = NULL, claimed_until = NULL "
                          "WHERE run_id = ? AND claimed_by = ?", (run_id, owner))

    def retry_ready(self, run_id: str, owner: str) -> None:
        """The resume failed: hand the run back to the queue, to be tried again after a
        growing pause (a transient failure must not strand it)."""
        KEEPER.drop(("ready", run_id), owner)
        self._sql.execute(
            "UPDATE graphkit_ready SET claimed_by = NULL, attempts = attempts + 1, "
            f"claimed_until = {self._sql.now} + ? WHERE run_id = ? AND claimed_by = ?",
            (min(300.0, 2.0 ** self._attempts(run_id)), run_id, owner))

    def _attempts(self, run_id: str) -> int:
        rows = self._sql.query("SELECT attempts FROM graphkit_ready WHERE run_id = ?",
                               (run_id,))
        return int(rows[0][0]) if rows else 0

    # ------------------------------------------------------------------ queued messages

    def enqueue(self, thread_id: str, agent: str, ai_message_id: str,
                messages: Sequence[Mapping[str, Any]]) -> None:
        """Keep user messages (serialised, with ids) queued for after the turn of
        `ai_message_id`; a message already queued is not queued twice."""
        rows = [(thread_id, agent, ai_message_id, str((m.get("data") or {}).get("id")),
                 dumps(dict(m))) for m in messages
                if isinstance(m, Mapping) and (m.get("data") or {}).get("id")]
        if not rows:
            return
        with self._sql.transaction() as tx:
            for row in rows:
                tx.execute("INSERT INTO graphkit_queue (thread_id, agent, ai_message_id, "
                           "message_id, message) VALUES (?, ?, ?, ?, ?) ON CONFLICT "
                           "(thread_id, agent, message_id) DO NOTHING", row)

    def queue_of(self, thread_id: str, agent: str) -> list[tuple[str, dict[str, Any]]]:
        """(turn's AI message id, serialised message) of what waits in the queue, in order."""
        rows = self._sql.query("SELECT ai_message_id, message FROM graphkit_queue WHERE "
                               "thread_id = ? AND agent = ? ORDER BY seq", (thread_id, agent))
        return [(str(r[0]), loads(r[1]) or {}) for r in rows]

    def dequeue(self, thread_id: str, agent: str, message_ids: Iterable[str]) -> None:
        """Forget queued messages that reached the conversation."""
        ids = list(dict.fromkeys(message_ids))
        if ids:
            marks = ", ".join("?" for _ in ids)
            self._sql.execute(f"DELETE FROM graphkit_queue WHERE thread_id = ? AND agent = ? "
                              f"AND message_id IN ({marks})", (thread_id, agent, *ids))

    # ------------------------------------------------------------------ web sessions

    def end_session(self, nonce: str, expires_at: float) -> None:
        """Remember a signed-out session until it would have expired anyway."""
        self._sql.execute("INSERT INTO graphkit_ended_sessions (nonce, expires_at) "
                          "VALUES (?, ?) ON CONFLICT (nonce) DO NOTHING", (nonce, expires_at))
        self._sql.execute(f"DELETE FROM graphkit_ended_sessions WHERE expires_at < "
                          f"{self._sql.now}")

    def session_ended(self, nonce: str) -> bool:
        return bool(self._sql.query(
            "SELECT 1 FROM graphkit_ended_sessions WHERE nonce = ?", (nonce,)))

    def _renew_ready(self, run_id: str, owner: str) -> None:
        self._sql.execute_apart(
            f"UPDATE graphkit_ready SET claimed_until = {self._sql.now} + ? "
            "WHERE run_id = ? AND claimed_by = ?", (LEASE_SECONDS, run_id, owner))

    def reopen(self, approval_id: str, *, decision: Mapping[str, Any],
               audits: Sequence[AuditRow]) -> bool:
        """Undo a claimed decision the gate refused, so the approval is pending again (and
        whatever a gate had cleared for it no longer admits its call, and a grant it made
        approves nothing more)."""
        with self._sql.transaction() as tx:
            done = tx.execute(
                "UPDATE graphkit_approvals SET status = 'pending', decision = NULL, "
                "decided_at = NULL WHERE approval_id = ? AND decision = ?",
                (approval_id, dumps(dict(decision))))
            tx.execute("DELETE FROM graphkit_cleared WHERE approval_id = ?", (approval_id,))
            tx.execute("UPDATE graphkit_grants SET revoked = ? WHERE approval_id = ? "
                       "AND revoked IS NULL",
                       (dumps({"by": None, "reason": "its decision was withdrawn"}),
                        approval_id))
            self._audit(tx, audits)
            if done == 1:  # the receivers told "decided" are told it did not stand
                for row in audits:
                    self._outbox(tx, row, kind="approval.refused", replaces="approval.decided")
        return done == 1

    # ------------------------------------------------------------------ executions

    def admission(self, call_key: str) -> tuple[CallRow | None, ApprovalRow | None]:
        """A planned call and its approval (if it needs one), in one read."""
        rows = self._sql.query(
            "SELECT c.call_key, c.thread_id, c.agent_path, c.tool_name, c.args_digest, "
            "c.approval_id, c.executed, c.outcome, c.once_results, cl.run_digest, "
            + ", ".join(f"a.{col.strip()} AS a_{col.strip()}"
                        for col in APPROVAL_READ.split(",")) +
            " FROM graphkit_calls c LEFT JOIN graphkit_approvals a "
            "ON a.approval_id = c.approval_id LEFT JOIN graphkit_cleared cl "
            "ON cl.approval_id = c.approval_id WHERE c.call_key = ?", (call_key,))
        if not rows:
            return None, None
        r = rows[0]
        call = CallRow(call_key=str(r[0]), thread_id=str(r[1]),
                       agent_path=[p for p in str(r[2]).split("/") if p], tool_name=str(r[3]),
                       args_digest=str(r[4]), approval_id=r[5], executed=r[6],
                       outcome=loads(r[7]), once_results=loads(r[8]), cleared=r[9])
        return call, approval_row(r[10:]) if r[10] is not None else None

    def call(self, call_key: str) -> CallRow | None:
        rows = self._sql.query(
            "SELECT call_key, thread_id, agent_path, tool_name, args_digest, approval_id, "
            "executed, outcome, once_results FROM graphkit_calls WHERE call_key = ?",
            (call_key,))
        if not rows:
            return None
        r = rows[0]
        return CallRow(call_key=str(r[0]), thread_id=str(r[1]),
                       agent_path=[p for p in str(r[2]).split("/") if p], tool_name=str(r[3]),
                       args_digest=str(r[4]), approval_id=r[5], executed=r[6],
                       outcome=loads(r[7]), once_results=loads(r[8]))

    def outcomes(self, call_keys: Iterable[str], *, thread_id: str | None = None
                 ) -> dict[str, dict[str, Any] | None]:
        """The recorded outcome of each call that has one (None while it has not); with
        `thread_id`, of that thread's calls only."""
        keys = list(dict.fromkeys(call_keys))
        if not keys:
            return {}
        marks = ", ".join("?" for _ in keys)
        mine = " AND thread_id = ?" if thread_id is not None else ""
        rows = self._sql.query(
            f"SELECT call_key, executed, outcome FROM graphkit_calls WHERE call_key IN ({marks})"
            f"{mine}", (*keys, *((thread_id,) if thread_id is not None else ())))
        return {str(r[0]): loads(r[2]) if r[1] == DONE else None for r in rows}

    def start_admitted(self, call_key: str, owner: str, *, thread_id: str,
                       agent_path: Sequence[str], tool_name: str, args_digest: str
                       ) -> tuple[dict[str, Any], bool] | None:
        """Claim a call's first execution in one statement, when the ledger admits it as is:
        planned in this thread, agent and tool, for exactly these arguments, and approved
        for them if it needs approval (an approval admits only once a gate verified it,
        `clear`, whoever claimed it). Returns the call's `ctx.once` results when it is
        claimed, and whether it has resume data to read (`resume_values`); None sends the
        caller to the step-by-step path (`admission`, `start`), which says why not, or
        takes over a dead holder's claim."""
        rows = self._claim_admitted(call_key, owner, thread_id, agent_path, tool_name,
                                    args_digest)
        if len(rows) != 1:
            return None
        if rows[0][2] is not None:  # a gated call: its claim is on disk before the tool starts
            # (RETURNING the id itself: SQLite 3.40 evaluates `x IS NOT NULL` there wrongly)
            self._flush()
        KEEPER.hold(self, ("call", call_key), owner, LEASE_SECONDS)
        return dict(loads(rows[0][0]) or {}), bool(rows[0][1])

    def _flush(self) -> None:
        """Make every commit so far durable: one synchronous=FULL write (in SQLite's WAL its
        sync covers all the commits before it; PostgreSQL's commits already are)."""
        with self._sql.durable():
            self._sql.execute("INSERT INTO graphkit_meta (key, value) VALUES ('durable', '1') "
                              "ON CONFLICT (key) DO UPDATE SET value = excluded.value")

    def _claim_admitted(self, call_key: str, owner: str, thread_id: str,
                        agent_path: Sequence[str], tool_name: str, args_digest: str
                        ) -> list[tuple[Any, ...]]:
        now = self._sql.now
        return self._sql.query(
            f"UPDATE graphkit_calls SET executed = ?, claim_expires = {now} + ? "
            f"WHERE call_key = ? AND executed IS NULL AND {ADMITTED} RETURNING once_results, "
            "EXISTS (SELECT 1 FROM graphkit_approvals a WHERE a.thread_id = ? "
            "AND a.call_key = ? AND a.kind = 'suspension' AND a.status = 'approved'), "
            "approval_id",
            (owner, LEASE_SECONDS, call_key, thread_id, path_text(agent_path), tool_name,
             args_digest, args_digest, thread_id, call_key))

    def start(self, call_key: str, owner: str, *, holder_dead: Any) -> tuple[Start, CallRow | None]:
        """Claim the one execution of a call, as a lease on it. `done` returns the recorded
        outcome; `busy`: a live process runs it now. A holder that provably died is taken over
        at once, one whose claim was not renewed (another machine died) once it expires."""
        now = self._sql.now
        with self._sql.durable():
            won = self._sql.execute(
                f"UPDATE graphkit_calls SET executed = ?, claim_expires = {now} + ? "
                "WHERE call_key = ? AND (executed IS NULL OR (executed <> ? "
                f"AND claim_expires < {now}))",
                (owner, LEASE_SECONDS, call_key, DONE))
        if won == 1:
            KEEPER.hold(self, ("call", call_key), owner, LEASE_SECONDS)
            return "won", None
        row = self.call(call_key)
        if row is None:
            return "unknown", None
        if row.executed == DONE:
            return "done", row
        if row.executed and holder_dead(row.executed) and self._take_over(call_key, owner,
                                                                          row.executed):
            KEEPER.hold(self, ("call", call_key), owner, LEASE_SECONDS)
            return "won", row
        return "busy", row

    def _take_over(self, call_key: str, owner: str, holder: str) -> bool:
        with self._sql.durable():
            return self._sql.execute(
                f"UPDATE graphkit_calls SET executed = ?, claim_expires = {self._sql.now} + ? "
                "WHERE call_key = ? AND executed = ?",
                (owner, LEASE_SECONDS, call_key, holder)) == 1

    def _renew_call(self, call_key: str, owner: str) -> None:
        self._sql.execute_apart(
            f"UPDATE graphkit_calls SET claim_expires = {self._sql.now} + ? "
            "WHERE call_key = ? AND executed = ?", (LEASE_SECONDS, call_key, owner))

    def finish(self, call_key: str, owner: str, outcome: Mapping[str, Any]) -> None:
        KEEPER.drop(("call", call_key), owner)
        with self._sql.transaction() as tx:
            done = tx.query(
                "UPDATE graphkit_calls SET executed = ?, outcome = ? "
                "WHERE call_key = ? AND executed = ? RETURNING approval_id",
                (DONE, dumps(dict(outcome)), call_key, owner))
            if done:
                self._call_finished(tx, call_key, outcome, "ran" if outcome.get(
                    "status", "success") == "success" else "failed")
        if done and done[0][0] is not None:
            # a gated call's result is on disk: a restart never takes it for one that died
            # mid-call (which is run again)
            self._flush()

    def suspend(self, call_key: str, owner: str, payload: Mapping[str, Any]) -> None:
        """The call suspended itself (`ctx.suspend`): keep what it asked, for the gate to ask
        a human, and let it run again on resume. Only the holder of its execution claim can
        say so (a tool that really ran); the gate asks nothing the ledger was not told."""
        KEEPER.drop(("call", call_key), owner)
        self._sql.execute(
            "UPDATE graphkit_calls SET executed = NULL, suspended_with = ? "
            "WHERE call_key = ? AND executed = ?", (dumps(dict(payload)), call_key, owner))

    def take_suspensions(self, call_keys: Iterable[str], thread_id: str
                         ) -> dict[str, dict[str, Any]]:
        """What the calls (of this thread) asked since the gate last looked: key -> payload.
        Each payload is handed out once; the gate records it as a pending suspension."""
        keys = list(dict.fromkeys(call_keys))
        if not keys:
            return {}
        marks = ", ".join("?" for _ in keys)
        select = (f"SELECT call_key, suspended_with FROM graphkit_calls WHERE thread_id = ? "
                  f"AND suspended_with IS NOT NULL AND call_key IN ({marks})")
        if not self._sql.query(select, (thread_id, *keys)):
            return {}
        with self._sql.transaction() as tx:  # (the thread's lease holder is the only taker)
            rows = tx.query(select, (thread_id, *keys))
            tx.execute(f"UPDATE graphkit_calls SET suspended_with = NULL WHERE "
                       f"thread_id = ? AND call_key IN ({marks})", (thread_id, *keys))
        return {str(key): loads(payload) or {} for key, payload in rows}

    def release(self, call_key: str, owner: str) -> None:
        """The call stopped without a result (it suspended, or raised): it may run again."""
        KEEPER.drop(("call", call_key), owner)
        self._sql.execute(
            "UPDATE graphkit_calls SET executed = NULL WHERE call_key = ? AND executed = ?",
            (call_key, owner))

    def settle(self, outcomes: Mapping[str, Mapping[str, Any]], *, thread_id: str) -> None:
        """Record the answer of calls of this thread that will never run (declined,
        superseded); a key from another thread (a client can read keys) settles nothing."""
        if not outcomes:
            return
        with self._sql.transaction() as tx:
            for key, outcome in outcomes.items():
                if tx.execute(
                        "UPDATE graphkit_calls SET executed = ?, outcome = ? "
                        "WHERE call_key = ? AND thread_id = ? AND executed IS NULL",
                        (DONE, dumps(dict(outcome)), key, thread_id)) == 1:
                    self._call_finished(tx, key, outcome, "not_run")

    def settle_call(self, call_key: str, outcome: Mapping[str, Any], *, thread_id: str,
                    agent_path: Sequence[str], tool_name: str, args_digest: str) -> bool:
        """Record the answer of one call, only if the ledger planned exactly that call (this
        thread, agent, tool and arguments) and it has none yet: a delegation's answer cannot
        stand for another call whose key a client named."""
        return self._sql.execute(
            "UPDATE graphkit_calls SET executed = ?, outcome = ? WHERE call_key = ? "
            f"AND executed IS NULL AND {ADMITTED}",
            (DONE, dumps(dict(outcome)), call_key, thread_id, path_text(agent_path), tool_name,
             args_digest, args_digest)) == 1

    def resume_values(self, call_key: str, thread_id: str) -> list[Any]:
        """Resume data a gate cleared for a suspended call of this thread, oldest first."""
        rows = self._sql.query(
            "SELECT a.decision FROM graphkit_approvals a JOIN graphkit_cleared cl "
            "ON cl.approval_id = a.approval_id WHERE a.call_key = ? AND a.thread_id = ? "
            "AND a.kind = 'suspension' AND a.status = 'approved' ORDER BY a.decided_at",
            (call_key, thread_id))
        return [(loads(r[0]) or {}).get("data") for r in rows]

    def save_once(self, call_key: str, results: Mapping[str, Any]) -> None:
        """`ctx.once` results of a call, kept where no client can wipe them (durably: the side
        effect they stand for happened)."""
        with self._sql.durable():
            self._sql.execute("UPDATE graphkit_calls SET once_results = ? WHERE call_key = ?",
                              (dumps(dict(results)), call_key))

    # ------------------------------------------------------------------ grants

    def live_grants(self, thread_id: str, agent_path: Sequence[str],
                    tool_names: Iterable[str]) -> dict[str, GrantRow]:
        """Unrevoked, unexpired grants for these tools in this thread and agent."""
        names = sorted(set(tool_names))
        if not names:
            return {}
        marks = ", ".join("?" for _ in names)
        rows = self._sql.query(
            f"SELECT {GRANT_COLUMNS} FROM graphkit_grants WHERE thread_id = ? "
            f"AND agent_path = ? AND tool_name IN ({marks}) AND revoked IS NULL "
            f"AND (expires_at IS NULL OR expires_at > {self._sql.now}) ORDER BY created_at",
            (thread_id, path_text(agent_path), *names))
        return {g.tool_name: g for g in map(grant_row, rows)}

    def grants(self, thread_id: str | None = None) -> list[GrantRow]:
        clause, params = ("WHERE thread_id = ? ", (thread_id,)) if thread_id else ("", ())
        rows = self._sql.query(
            f"SELECT {GRANT_COLUMNS} FROM graphkit_grants {clause}ORDER BY created_at", params)
        return [grant_row(r) for r in rows]

    def grant(self, grant_id: str) -> GrantRow | None:
        rows = self._sql.query(
            f"SELECT {GRANT_COLUMNS} FROM graphkit_grants WHERE grant_id = ?", (grant_id,))
        return grant_row(rows[0]) if rows else None

    def revoke(self, grant_id: str, revoked: Mapping[str, Any],
               audits: Sequence[AuditRow]) -> bool:
        with self._sql.transaction() as tx:
            done = tx.execute(
                "UPDATE graphkit_grants SET revoked = ? WHERE grant_id = ? AND revoked IS NULL",
                (dumps(dict(revoked)), grant_id))
            if done == 1:
                self._audit(tx, audits)
                for row in audits:
                    self._outbox(tx, row, kind="grant.revoked",
                                 extra={"grant_id": grant_id, "revoked": dict(revoked)})
        return done == 1

    # ------------------------------------------------------------------ leases

    def _take(self, thread_id: str, owner: str, run: tuple[str, str] | None = None) -> bool:
        """Take the thread's lease if it is free (or this owner's); with `run` (its id and
        agent), record the run in the same transaction: a run is known once it holds its
        thread, and one that never got it leaves no record."""
        now = time.time()
        take = ("INSERT INTO graphkit_leases (thread_id, owner, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
                "expires_at = excluded.expires_at "
                "WHERE graphkit_leases.expires_at < ? OR graphkit_leases.owner = ?")
        params = (thread_id, owner, now + LEASE_SECONDS, now, owner)
        if run is None:
            return self._sql.execute(take, params) == 1 or self._take_from_dead(thread_id, owner)
        with self._sql.transaction() as tx:
            taken = tx.execute(take, params) == 1
            if taken:
                self._record_run(tx, run[0], thread_id, run[1])
        if not taken and self._take_from_dead(thread_id, owner):
            with self._sql.transaction() as tx:
                self._record_run(tx, run[0], thread_id, run[1])
            taken = True
        return taken

    def _record_run(self, tx: Tx, run_id: str, thread_id: str, agent: str) -> None:
        tx.execute("INSERT INTO graphkit_runs (run_id, thread_id, agent, created_at) "
                   f"VALUES (?, ?, ?, {self._sql.now}) ON CONFLICT (run_id) DO NOTHING",
                   (run_id, thread_id, agent))

    def forget_run(self, run_id: str) -> None:
        """Drop the record of a run refused before it ran (its lease is released next)."""
        self._sql.execute("DELETE FROM graphkit_runs WHERE run_id = ?", (run_id,))

    def run(self, run_id: str) -> tuple[str, str] | None:
        """The thread and agent of a run this database recorded, or None."""
        rows = self._sql.query("SELECT thread_id, agent FROM graphkit_runs WHERE run_id = ?",
                               (run_id,))
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def _take_from_dead(self, thread_id: str, owner: str) -> bool:
        """A lease whose holder provably no longer runs is free now, not when it expires: a
        worker restarted after a crash need not wait."""
        rows = self._sql.query("SELECT owner FROM graphkit_leases WHERE thread_id = ?",
                               (thread_id,))
        if not rows or not holder_is_dead(str(rows[0][0])):
            return False
        taken = self._sql.execute(
            "UPDATE graphkit_leases SET owner = ?, expires_at = ? "
            "WHERE thread_id = ? AND owner = ?",
            (owner, time.time() + LEASE_SECONDS, thread_id, rows[0][0]))
        return taken == 1

    def _renew(self, thread_id: str, owner: str) -> None:
        """Extend a lease this owner still holds; never bring back one it released."""
        self._sql.execute_apart("UPDATE graphkit_leases SET expires_at = ? "
                                "WHERE thread_id = ? AND owner = ?",
                                (time.time() + LEASE_SECONDS, thread_id, owner))

    def _release(self, thread_id: str, owner: str) -> None:
        self._sql.execute("DELETE FROM graphkit_leases WHERE thread_id = ? AND owner = ?",
                          (thread_id, owner))

    @contextlib.contextmanager
    def lease(self, thread_id: str, *, wait: float = WAIT_SECONDS,
              run: tuple[str, str] | None = None) -> Iterator[str]:
        """Hold the thread while the body advances it; renewed in the background. `run` (a
        new run's id and agent) is recorded as the lease is taken."""
        owner = new_owner()
        deadline = time.monotonic() + wait
        pause = 0.005
        while not self._take(thread_id, owner, run):
            if time.monotonic() >= deadline:
                msg = f"thread {thread_id!r} is being advanced by another process"
                raise RunBusyError(msg)
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        KEEPER.hold(self, ("thread", thread_id), owner, LEASE_SECONDS)
        try:
            yield owner
        finally:
            KEEPER.drop(("thread", thread_id), owner)
            self._release(thread_id, owner)

    # ------------------------------------------------------------------ notifications

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
                or cache[1] != Ledger._notify_epoch):
            rows = tx.query("SELECT value FROM graphkit_meta WHERE key = 'notify'")
            value = loads(rows[0][0]) if rows else None
            link = value.get("review_url") if isinstance(value, dict) else None
            cache = (moment, Ledger._notify_epoch, bool(rows),
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
             row.approval_id, dumps(payload)))
        for listener in list(Ledger._outbox_listeners):
            with contextlib.suppress(Exception):
                listener()

    def _call_finished(self, tx: Tx, call_key: str, outcome: Mapping[str, Any],
                       result: str) -> None:
        """`run.finished` for a call that needed a decision: whether it ran, failed, or will
        never run (`result`), with the tool's own words."""
        if not self._notifying(tx)[0]:
            return
        rows = tx.query("SELECT approval_id, thread_id, agent_path, tool_name FROM "
                        "graphkit_calls WHERE call_key = ? AND approval_id IS NOT NULL",
                        (call_key,))
        if not rows:
            return
        approval_id, thread_id, path, tool_name = rows[0]
        entry = {"event": result, "approval_id": approval_id, "thread_id": thread_id,
                 "agent_path": str(path).split("/"), "tool_name": tool_name,
                 "at": iso_now()}
        content = str(outcome.get("content", ""))
        self._outbox(tx, AuditRow(thread_id=str(thread_id), approval_id=str(approval_id),
                                  entry=entry),
                     kind="run.finished", extra={"outcome": result, "result": content[:2000]})

    def enable_notify(self, targets: Iterable[str], *, review_url: str | None = None) -> None:
        """Turn the outbox on for every process that shares this database (each sees it within
        `NOTIFY_RECHECK` seconds; this process at once), and register webhook targets: a
        target is sent the events recorded from its first registration on."""
        since = self.now()
        with self._sql.transaction() as tx:
            value = dumps({"review_url": review_url})
            tx.execute("INSERT INTO graphkit_meta (key, value) VALUES ('notify', ?) "
                       + ("ON CONFLICT (key) DO UPDATE SET value = excluded.value" if review_url
                          else "ON CONFLICT (key) DO NOTHING"), (value,))
            for target in targets:
                tx.execute("INSERT INTO graphkit_meta (key, value) VALUES (?, ?) "
                           "ON CONFLICT (key) DO NOTHING",
                           (f"notify.cursor.{target}", dumps({"since": since})))
        Ledger._notify_epoch += 1

    def notify_cursor(self, target: str) -> float | None:
        """Events recorded before this moment have their delivery to `target` opened."""
        rows = self._sql.query("SELECT value FROM graphkit_meta WHERE key = ?",
                               (f"notify.cursor.{target}",))
        value = loads(rows[0][0]) if rows else None
        return float(value["since"]) if isinstance(value, dict) and "since" in value else None

    def save_notify_cursor(self, target: str, since: float) -> None:
        self._sql.execute("UPDATE graphkit_meta SET value = ? WHERE key = ?",
                          (dumps({"since": since}), f"notify.cursor.{target}"))

    def open_deliveries(self, target: str, since: float) -> float:
        """Open a delivery to `target` for each event recorded since `since` that has none;
        returns the database's clock when it looked."""
        new = ("FROM graphkit_outbox o WHERE o.created_at >= ? AND NOT EXISTS (SELECT 1 FROM "
               "graphkit_deliveries d WHERE d.event_id = o.event_id AND d.target = ?)")
        # Read first: an idle round takes no write lock.
        moment, found = self._sql.query(
            f"SELECT {self._sql.now}, EXISTS (SELECT 1 {new})", (since, target))[0]
        if found:
            self._sql.execute(
                "INSERT INTO graphkit_deliveries (event_id, target, attempts, next_at) "
                f"SELECT o.event_id, ?, 0, o.created_at {new} "
                "ON CONFLICT (event_id, target) DO NOTHING", (target, since, target))
        return float(moment)

    def claim_deliveries(self, target: str, owner: str, *, max_attempts: int, lease: float,
                         limit: int) -> list[OutboxEvent]:
        """Claim due, undelivered deliveries to `target` (oldest first), counting the attempt:
        the claim is a lease (`next_at` moves past it), so a claimer that dies is retried."""
        now = self._sql.now
        due = ("FROM graphkit_deliveries WHERE target = ? AND delivered_at IS NULL "
               f"AND next_at IS NOT NULL AND next_at <= {now} AND attempts < ?")
        if not self._sql.query(f"SELECT 1 {due} LIMIT 1", (target, max_attempts)):
            return []  # an idle round takes no write lock
        rows = self._sql.query(
            f"UPDATE graphkit_deliveries SET attempts = attempts + 1, next_at = {now} + ?, "
            "claimed_by = ? WHERE target = ? AND event_id IN (SELECT event_id "
            f"{due} ORDER BY next_at LIMIT ?{self._sql.skip_locked}) "
            "RETURNING event_id, attempts",
            (lease, owner, target, target, max_attempts, limit))
        if not rows:
            return []
        attempts = {str(r[0]): int(r[1]) for r in rows}
        marks = ", ".join("?" for _ in attempts)
        events = self._sql.query(
            "SELECT event_id, type, created_at, payload FROM graphkit_outbox "
            f"WHERE event_id IN ({marks}) ORDER BY created_at", tuple(attempts))
        return [OutboxEvent(event_id=str(r[0]), type=str(r[1]), created_at=float(r[2]),
                            payload=loads(r[3]) or {}, attempts=attempts[str(r[0])])
                for r in events]

    def delivered(self, event_id: str, target: str) -> None:
        self._sql.execute(
            f"UPDATE graphkit_deliveries SET delivered_at = {self._sql.now}, last_error = NULL, "
            "claimed_by = NULL WHERE event_id = ? AND target = ? AND delivered_at IS NULL",
            (event_id, target))

    def delivery_failed(self, event_id: str, target: str, owner: str, *, error: str,
                        retry_in: float | None) -> None:
        """Record a failed attempt; retry in `retry_in` seconds, or never (None)."""
        next_at = f"{self._sql.now} + ?" if retry_in is not None else "?"
        self._sql.execute(
            f"UPDATE graphkit_deliveries SET next_at = {next_at}, last_error = ?, "
            "claimed_by = NULL WHERE event_id = ? AND target = ? AND claimed_by = ? "
            "AND delivered_at IS NULL", (retry_in, error, event_id, target, owner))

    def next_delivery(self, targets: Mapping[str, int]) -> float | None:
        """Seconds until the next delivery to one of `targets` (target -> max attempts) is due
        (0 or less: due now); None when none is left to attempt."""
        waits = []
        for target, max_attempts in targets.items():
            rows = self._sql.query(
                f"SELECT MIN(next_at) - {self._sql.now} FROM graphkit_deliveries "
                "WHERE target = ? AND delivered_at IS NULL AND next_at IS NOT NULL "
                "AND attempts < ?", (target, max_attempts))
            if rows and rows[0][0] is not None:
                waits.append(float(rows[0][0]))
        return min(waits) if waits else None

    def deliveries(self, event_id: str | None = None) -> list[dict[str, Any]]:
        """Delivery state, oldest event first (for operators and tests)."""
        clause, params = ("WHERE d.event_id = ? ", (event_id,)) if event_id else ("", ())
        rows = self._sql.query(
            "SELECT d.event_id, o.type, d.target, d.attempts, d.next_at, d.delivered_at, "
            "d.last_error FROM graphkit_deliveries d JOIN graphkit_outbox o "
            f"ON o.event_id = d.event_id {clause}ORDER BY o.created_at, d.target", params)
        keys = ("event_id", "type", "target", "attempts", "next_at", "delivered_at",
                "last_error")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def prune_outbox(self, older_than: float) -> int:
        """Forget events recorded more than `older_than` seconds ago that have no delivery
        left to attempt."""
        cutoff = f"{self._sql.now} - ?"
        pending = ("SELECT 1 FROM graphkit_deliveries d WHERE d.event_id = o.event_id "
                   "AND d.delivered_at IS NULL AND d.next_at IS NOT NULL")
        with self._sql.transaction() as tx:
            tx.execute(
                "DELETE FROM graphkit_deliveries WHERE event_id IN (SELECT o.event_id FROM "
                f"graphkit_outbox o WHERE o.created_at < {cutoff} AND NOT EXISTS ({pending}))",
                (older_than,))
            return tx.execute(
                f"DELETE FROM graphkit_outbox AS o WHERE o.created_at < {cutoff} "
                f"AND NOT EXISTS ({pending})", (older_than,))
