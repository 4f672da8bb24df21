"""What waits for a reviewer: which approvals and suspensions a paused run waits on (the
inbox lists these), and each agent's tool schemas, for checking an edit without the agent.

A gate marks what its run now waits on as it pauses, and unmarks what it applied; a reviewer's
door reads the marks here, in the ledger, where no client of a LangGraph server can write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphkit._ledger._base import LedgerBase
from graphkit._ledger._rows import APPROVAL_READ, ApprovalRow, approval_row
from graphkit._ledger._sql import Statement, dumps, loads, path_text
from graphkit._ledger._values import unstowed
from graphkit.types import ApprovalRecord

__all__ = ["Waiting", "WaitingRow"]

@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingRow:
    """An approval or suspension with its record as planned, and whether a run waits on it."""

    row: ApprovalRow
    record: ApprovalRecord
    waiting: bool
    run_id: str | None
    """The run that waits (or last waited) on it; None: a LangGraph server's run."""
    place: int
    """Its call's place in the turn (the inbox lists a turn's calls in order)."""


class Waiting(LedgerBase):
    """What waits for a reviewer, and each agent's tool schemas."""

    def mark_waiting(self, thread_id: str, agent_path: Sequence[str], *, run_id: str | None,
                     scope: str, waiting: Mapping[str, int], done: Iterable[str] = (),
                     strays: bool = False) -> None:
        """One gate pass: the run `run_id` now waits on `waiting` (approval id -> the call's
        place in the turn); `done` no longer waits. With `strays` (a new turn), whatever else
        this agent marked waiting in this scope (a turn that never reached a checkpoint, or
        one a client replaced) is unmarked: no run waits on it, though it stays pending until
        decided, expired or superseded."""
        self._sql.write_all(self._marks(thread_id, agent_path, run_id=run_id, scope=scope,
                                        waiting=waiting, done=done, strays=strays))

    @staticmethod
    def _marks(thread_id: str, agent_path: Sequence[str], *, run_id: str | None, scope: str,
               waiting: Mapping[str, int], done: Iterable[str] = (), strays: bool = False
               ) -> list[Statement]:
        """The statements of `mark_waiting`."""
        path = path_text(agent_path)
        statements: list[Statement] = []
        if strays:
            keep = list(waiting)
            spare = f" AND approval_id NOT IN ({', '.join('?' for _ in keep)})" if keep else ""
            statements.append((
                "UPDATE graphkit_approvals SET waiting = NULL WHERE thread_id = ? "
                "AND agent_path = ? AND COALESCE(scope, '') = ? "
                f"AND waiting IS NOT NULL{spare}", (thread_id, path, scope, *keep)))
        gone = list(done)
        if gone:
            statements.append((
                "UPDATE graphkit_approvals SET waiting = NULL WHERE approval_id IN "
                f"({', '.join('?' for _ in gone)}) AND thread_id = ? "
                "AND waiting IS NOT NULL", (*gone, thread_id)))
        statements.extend((
            "UPDATE graphkit_approvals SET waiting = ?, call_index = ?, "
            "scope = ? WHERE approval_id = ? AND thread_id = ? AND agent_path = ?",
            (run_id or "", place, scope, approval_id, thread_id, path))
            for approval_id, place in waiting.items())
        return statements

    def waiting_rows(self, *, thread_id: str | None = None) -> list[WaitingRow]:
        """What runs wait on (in one thread, if given: waited on or not), with their records
        as planned; rows that predate the ledger keeping records are left out."""
        if thread_id is None:
            return self._waiting("waiting IS NOT NULL AND record IS NOT NULL", ())
        return self._waiting("thread_id = ? AND record IS NOT NULL", (thread_id,))

    def waiting_row(self, approval_id: str) -> WaitingRow | None:
        """One approval's row as `waiting_rows` reads it (waited on or not), or None: an id
        names one approval or none, never any (`graphkit._ids`)."""
        found = self._waiting("approval_id = ? AND record IS NOT NULL", (approval_id,))
        return found[0] if found else None

    def _waiting(self, where: str, params: tuple[str, ...]) -> list[WaitingRow]:
        rows = self._sql.query(f"SELECT {APPROVAL_READ}, record, waiting, call_index "
                               f"FROM graphkit_approvals WHERE {where}", params)
        return [WaitingRow(row=approval_row(r[:12]), record=unstowed(self._sql.query, r[12]),
                           waiting=r[13] is not None, run_id=r[13] or r[11] or None,
                           place=int(r[14] or 0)) for r in rows]

    def waiting_in(self, thread_id: str, approval_ids: Iterable[str]) -> set[str]:
        """Those of `approval_ids` a run of the thread waits on now (a gate marked them and
        has not applied them yet: decided or not)."""
        ids = list(dict.fromkeys(approval_ids))
        if not ids:
            return set()
        rows = self._sql.query(
            "SELECT approval_id FROM graphkit_approvals WHERE thread_id = ? AND waiting IS NOT "
            f"NULL AND approval_id IN ({', '.join('?' for _ in ids)})", (thread_id, *ids))
        return {str(r[0]) for r in rows}

    def waits_beneath(self, thread_id: str, agent_path: Sequence[str]
                      ) -> list[tuple[str, str, str | None]]:
        """Where the gates of this agent and of the subagents below it marked waits they have
        not applied yet: (the scope, a subagent's the checkpoint namespace its delegation ran
        it in; the agent's path; the waiting turn's key, which names the delegation it works
        for)."""
        path = path_text(agent_path)
        rows = self._sql.query(
            "SELECT DISTINCT COALESCE(a.scope, ''), a.agent_path, c.turn_key FROM "
            "graphkit_approvals a LEFT JOIN graphkit_calls c ON c.call_key = a.call_key "
            "WHERE a.thread_id = ? AND (a.agent_path = ? OR substr(a.agent_path, 1, ?) = ?) "
            "AND a.waiting IS NOT NULL", (thread_id, path, len(path) + 1, f"{path}/"))
        return [(str(r[0]), str(r[1]), None if r[2] is None else str(r[2])) for r in rows]

    def move_waits(self, thread_id: str, agent_path: Sequence[str], old: str, new: str
                   ) -> None:
        """Mark what this subagent's gate waited on in scope `old` as waited on in `new`."""
        self._sql.execute(
            "UPDATE graphkit_approvals SET scope = ? WHERE thread_id = ? AND agent_path = ? "
            "AND COALESCE(scope, '') = ? AND waiting IS NOT NULL",
            (new, thread_id, path_text(agent_path), old))

    def save_tool_schema(self, agent_path: Sequence[str], tool_name: str,
                         schema: Mapping[str, Any]) -> None:
        """The tool's argument and resume schemas as its agent declares them (for an inbox
        that checks an edit without loading the agent)."""
        self._sql.execute(
            "INSERT INTO graphkit_tools (agent_path, tool_name, tool_schema) VALUES (?, ?, ?) "
            "ON CONFLICT (agent_path, tool_name) DO UPDATE SET tool_schema = "
            "excluded.tool_schema", (path_text(agent_path), tool_name, dumps(dict(schema))))

    def tool_schema(self, agent_path: Sequence[str], tool_name: str) -> dict[str, Any] | None:
        rows = self._sql.query("SELECT tool_schema FROM graphkit_tools WHERE agent_path = ? AND "
                               "tool_name = ?", (path_text(agent_path), tool_name))
        schema: dict[str, Any] | None = loads(rows[0][0]) if rows else None
        return schema
