"""What a gate planned: each turn's plan, its calls and approvals as recorded, and the
clearances that let a verified call run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphkit._ledger._base import LedgerBase
from graphkit._ledger._messages import Queued, queued
from graphkit._ledger._rows import (
    APPROVAL_COLUMNS,
    APPROVAL_READ,
    CURRENT_RUN,
    PENDING_TURNS,
    ApprovalRow,
    AuditRow,
    CallRow,
    Clearance,
    PendingTurn,
    allowed_text,
    approval_row,
    beneath,
    pending_turn,
    recorded_options,
)
from graphkit._ledger._schema import (
    DONE,
)
from graphkit._ledger._sql import Tx, dumps, loads, path_text
from graphkit._ledger._values import stowed, unstowed
from graphkit._state import TurnPlan

__all__ = ["Plans", "TurnReading"]

@dataclass(frozen=True, slots=True)
class TurnReading:
    """What a gate or model pass reads of a turn, in one statement (`turn_and_queue`); a part
    not asked for is None."""

    plan: TurnPlan | None
    queue: list[Queued]
    """The agent's message queue (`queue_rows`)."""
    pending: list[PendingTurn] | None = None
    """What the agent waits on (`pending_turns`)."""
    outcomes: dict[str, dict[str, Any] | None] | None = None
    """The recorded outcome of each call planned in the turn (`outcomes`)."""
    approvals: dict[str, ApprovalRow] | None = None
    """The approvals and suspensions of the calls planned in the turn (`approvals`)."""
    runs: list[tuple[str, dict[str, Any] | None]] | None = None
    """The last run of the agent asked for recorded on the thread, with its request's options
    (`current_run_and_options`): one, or none."""


_WIDTH = 14
"""Columns of each part of `turn_and_queue`'s statement: part, order, and an approval row."""


def _part(number: int, order: str, columns: str, source: str) -> str:
    """One part of `turn_and_queue`'s statement, its row padded to `_WIDTH` columns (the
    first part's NULLs are typed: PostgreSQL types a union's column by its earlier parts)."""
    given = [c.strip() for c in columns.split(",")]
    if number == 0:
        pad = ["NULL"] * (_WIDTH - 2 - len(given))
        pad[APPROVAL_READ.split(", ").index("expires_at") - len(given)] = (
            "CAST(NULL AS DOUBLE PRECISION)")
        names = ["0 AS part", "0 AS seq", *given, *pad]
        return f"SELECT {', '.join(names)} FROM {source}"
    return (f"SELECT {number}, {order}, {', '.join(given)}"
            f"{', NULL' * (_WIDTH - 2 - len(given))} FROM {source}")


class Plans(LedgerBase):
    """What a gate planned: each turn's plan, its calls and approvals as recorded, and the"""

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
        planned = {call.call_key: call for call in calls}  # a grant runs a call as planned
        with self._sql.transaction() as tx:
            for call in calls:
                tx.execute(
                    "INSERT INTO graphkit_calls (call_key, thread_id, agent_path, tool_name, "
                    "args_digest, approval_id, turn_key, args, tool_call_id, conversation, "
                    f"executed, outcome, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                    f"{now}) ON CONFLICT (call_key) DO NOTHING",
                    (call.call_key, call.thread_id, path_text(call.agent_path), call.tool_name,
                     call.args_digest, call.approval_id, call.turn_key,
                     stowed(tx, call.args, whole=True) if call.args is not None else None,
                     call.tool_call_id, call.conversation, call.executed,
                     dumps(dict(call.outcome)) if call.outcome is not None else None))
            for row in approvals:
                grant_id = (row.decision or {}).get("grant_id")
                if grant_id and self._insert_approval(tx, row, live_grant=grant_id):
                    # the planner checked the grantor's policy for this very call
                    found = planned.get(row.call_key or "")
                    if found is not None:
                        self._clear(tx, {row.approval_id: Clearance(found.args_digest,
                                                                    found.args)})
                elif grant_id:
                    fell_back.add(row.approval_id)
                    row = ApprovalRow(**{**{f: getattr(row, f) for f in
                                            row.__dataclass_fields__},
                                         "status": "pending", "decision": None})
                    grant_id = None
                if not grant_id:
                    self._insert_approval(tx, row)
            if self.serves:
                for served in sorted({r.approval_id for r in approvals if r.run_id is None}):
                    tx.execute("INSERT INTO graphkit_server_approvals (approval_id) VALUES (?) "
                               "ON CONFLICT (approval_id) DO NOTHING", (served,))
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
                               "agent_path = ? AND turn_key = ?",
                               (thread_id, path_text(agent_path), key))
        plan: TurnPlan | None = unstowed(self._sql.query, rows[0][0]) if rows else None
        return plan

    def planned_message(self, thread_id: str, agent_path: Sequence[str],
                        ai_message_id: str) -> bool:
        """Whether a turn of this AI message id was planned here (under any content: a turn's
        key is its message's id, `#`, a digest of its calls)."""
        prefix = f"{ai_message_id}#"  # (compared as text: a range would follow the collation)
        return bool(self._sql.query(
            "SELECT 1 FROM graphkit_turns WHERE thread_id = ? AND agent_path = ? AND "
            "substr(turn_key, 1, ?) = ? LIMIT 1",
            (thread_id, path_text(agent_path), len(prefix), prefix)))

    def planned_where(self, key: str, besides: str | None = None,
                      agent_path: Sequence[str] | None = None) -> tuple[str, TurnPlan] | None:
        """A thread (but `besides`) where a model node planned the turn of `key` (its
        message's id and calls), for any agent (or the one at `agent_path`), and the plan: a
        thread copied from one where it was planned holds it (and an agent run on another's
        thread meets that agent's turns)."""
        mine, params = (" AND agent_path = ?", (path_text(agent_path),)) if agent_path else ("", ())
        rows = self._sql.query(
            "SELECT thread_id, plan FROM graphkit_turns WHERE turn_key = ? AND thread_id <> ?"
            f"{mine} LIMIT 1", (key, "" if besides is None else besides, *params))
        if not rows:
            return None
        plan: TurnPlan | None = unstowed(self._sql.query, rows[0][1])
        return (str(rows[0][0]), plan) if plan is not None else None

    def planned_keys(self, thread_id: str, agent_path: Sequence[str], keys: Iterable[str]
                     ) -> set[str]:
        """Which of these turn keys this agent planned in this thread (read in chunks: a
        conversation may hold any number of turns a client wrote)."""
        wanted = list(dict.fromkeys(keys))
        found: set[str] = set()
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            found |= {str(r[0]) for r in self._sql.query(
                "SELECT turn_key FROM graphkit_turns WHERE thread_id = ? AND agent_path = ? "
                f"AND turn_key IN ({', '.join('?' for _ in chunk)})",
                (thread_id, path_text(agent_path), *chunk))}
        return found

    def plans_in(self, thread_id: str, agent_path: Sequence[str]) -> bool:
        """Whether this agent planned any turn in this thread."""
        return bool(self._sql.query(
            "SELECT 1 FROM graphkit_turns WHERE thread_id = ? AND agent_path = ? LIMIT 1",
            (thread_id, path_text(agent_path))))

    def turn_and_queue(self, thread_id: str, agent_path: Sequence[str], key: str | None,
                       agent: str, *, pending: bool = False, outcomes: bool = False,
                       approvals: bool = False, run_of: str | None = None) -> TurnReading:
        """`turn` (None for a `key` of None) and `queue_rows(thread_id, agent)`, with
        `pending`, `pending_turns`, with `outcomes` and `approvals`, the outcomes and the
        approval rows of the calls planned in the turn (by their `turn_key`), and with
        `run_of` (an agent's name) its `current_run` on the thread, in one statement: a gate
        or model pass reads them all."""
        path = path_text(agent_path)
        turn_calls = ("graphkit_calls WHERE thread_id = ? AND agent_path = ? AND "
                      "turn_key = ?")
        parts = [_part(0, "0", "plan", "graphkit_turns WHERE thread_id = ? AND "
                       "agent_path = ? AND turn_key = ?"),
                 _part(1, "seq", "ai_message_id, message, delivered_at",
                       "graphkit_queue WHERE thread_id = ? AND agent = ?")]
        params: tuple[str | None, ...] = (thread_id, path, key, thread_id, agent)
        if pending:
            columns, _, source = PENDING_TURNS.partition(" FROM ")
            parts.append(_part(2, "0", columns, source))
            params = (*params, *beneath(thread_id, path))
        if outcomes:
            parts.append(_part(3, "0", "call_key, executed, outcome", turn_calls))
            params = (*params, thread_id, path, key)
        if approvals:
            parts.append(_part(4, "0", APPROVAL_READ, "graphkit_approvals WHERE thread_id = ? "
                               f"AND call_key IN (SELECT call_key FROM {turn_calls})"))
            params = (*params, thread_id, thread_id, path, key)
        if run_of is not None:
            parts.append(_part(5, "0", "run_id, options", f"({CURRENT_RUN}) AS last_run"))
            params = (*params, thread_id, run_of)
        rows = self._sql.query(" UNION ALL ".join(parts) + " ORDER BY part, seq", params)
        plans = [r[2] for r in rows if r[0] == 0]
        return TurnReading(
            plan=unstowed(self._sql.query, plans[0]) if plans else None,
            queue=queued(r[2:5] for r in rows if r[0] == 1),
            pending=[pending_turn(r[2:9]) for r in rows if r[0] == 2] if pending else None,
            outcomes={str(r[2]): loads(r[4]) if r[3] == DONE else None
                      for r in rows if r[0] == 3} if outcomes else None,
            approvals={str(r[2]): approval_row(r[2:]) for r in rows if r[0] == 4}
            if approvals else None,
            runs=[(str(r[2]), recorded_options(r[3])) for r in rows if r[0] == 5]
            if run_of is not None else None)

    def save_turn(self, thread_id: str, agent_path: Sequence[str], plan: TurnPlan) -> None:
        """Record the gate's plan of a turn as it now stands."""
        self._save_turn(self._sql, thread_id, agent_path, plan)

    def _save_turn(self, tx: Tx, thread_id: str, agent_path: Sequence[str],
                   plan: TurnPlan) -> None:
        tx.execute("INSERT INTO graphkit_turns (thread_id, agent_path, turn_key, plan) "
                   "VALUES (?, ?, ?, ?) ON CONFLICT (thread_id, agent_path, turn_key) "
                   "DO UPDATE SET plan = excluded.plan",
                   (thread_id, path_text(agent_path), str(plan.get("turn_key") or ""),
                    stowed(tx, plan)))

    def clear(self, cleared: Mapping[str, Clearance]) -> None:
        """Record that the gate verified these approvals (id -> the arguments that will run,
        and their digest) and lets their calls run."""
        if cleared:
            self._clear(self._sql, cleared)  # (one statement: atomic as it is)

    def _clear(self, tx: Tx, cleared: Mapping[str, Clearance]) -> None:
        rows = ", ".join(f"(?, ?, ?, {self._sql.now})" for _ in cleared)
        tx.execute("INSERT INTO graphkit_cleared (approval_id, run_digest, run_args, cleared_at) "
                   f"VALUES {rows} ON CONFLICT (approval_id) DO UPDATE SET "
                   "run_digest = excluded.run_digest, run_args = excluded.run_args, "
                   "cleared_at = excluded.cleared_at",
                   tuple(v for approval_id, (digest, args) in cleared.items()
                         for v in (approval_id, digest, None if args is None else
                                   stowed(tx, args, whole=True))))

    def _insert_approval(self, tx: Tx, row: ApprovalRow, *, live_grant: str | None = None
                         ) -> bool:
        now = self._sql.now
        expires = f"{now} + ?" if row.ttl is not None else "?"
        params: tuple[Any, ...] = (
            row.approval_id, row.thread_id, row.kind, row.call_key, path_text(row.agent_path),
            row.tool_name, row.args_digest, row.ttl, row.status,
            dumps(row.decision) if row.decision else None, allowed_text(row.allowed),
            row.run_id, stowed(tx, dict(row.record)) if row.record is not None else None)
        guard = ""
        if live_grant is not None:
            guard = (" WHERE EXISTS (SELECT 1 FROM graphkit_grants WHERE grant_id = ? AND "
                     f"revoked IS NULL AND (expires_at IS NULL OR expires_at > {now}))")
            params = (*params, live_grant)
        return tx.execute(
            f"INSERT INTO graphkit_approvals ({APPROVAL_COLUMNS}, run_id, record) "
            f"SELECT ?, ?, ?, ?, ?, ?, ?, {expires}, ?, ?, ?, ?, ?{guard or ' WHERE TRUE'} "
            "ON CONFLICT (approval_id) DO NOTHING", params) == 1

    def open_calls(self, thread_id: str, agent_path: Sequence[str]) -> list[str]:
        """The calls of one agent in one thread that have no recorded outcome yet."""
        return [str(r[0]) for r in self._sql.query(
            "SELECT call_key FROM graphkit_calls WHERE thread_id = ? AND agent_path = ? "
            "AND (executed IS NULL OR executed <> ?)", (thread_id, path_text(agent_path), DONE))]

    def rekey_calls(self, call_keys: Iterable[str], turn_key: str, *, thread_id: str,
                    agent_path: Sequence[str], was: str) -> None:
        """The plan's calls, and the answers of those its gate refused (filed under the
        turn's key `was`), now belong to the turn as edited (its key changed with it)."""
        keys = list(call_keys)
        marks = ", ".join("?" for _ in keys) or "NULL"
        self._sql.execute(f"UPDATE graphkit_calls SET turn_key = ? WHERE call_key IN ({marks}) "
                          "OR (thread_id = ? AND agent_path = ? AND turn_key = ?)",
                          (turn_key, *keys, thread_id, path_text(agent_path), was))
