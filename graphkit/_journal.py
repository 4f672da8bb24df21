"""What graphkit keeps in LangGraph's store: the inbox index of waiting calls.

The index lets an operator list waiting approvals across every thread without reading a single
checkpoint; the approval gate writes it as it plans and pauses. It is only an index: every
decision taken from it is checked against the ledger (`graphkit._ledger`), which holds the
approvals, decisions, grants and the audit log where a LangGraph server's clients cannot
write.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from langgraph.store.base import BaseStore

from graphkit._approvals import waiting_records
from graphkit._ledger import Ledger
from graphkit._secrets import masked_record
from graphkit._state import TurnPlan
from graphkit._validate import now_iso
from graphkit.types import ApprovalRecord

__all__ = ["APPROVALS", "SCHEMAS", "GateJournal", "index_entry", "now_iso", "schema_key"]

APPROVALS = ("graphkit", "approvals")
SCHEMAS = ("graphkit", "schemas")
"""The argument schema of each agent's tools, once, for checking edits in the inbox."""
SCAN_LIMIT = 1_000_000
"""Store searches are paged; graphkit asks for everything that matches."""



def index_entry(
    record: ApprovalRecord,
    *,
    thread_id: str,
    run_id: str | None,
    waiting: bool,
) -> dict[str, Any]:
    """The inbox's copy of a pending approval or suspension (its secrets masked)."""
    return {
        **masked_record(record),
        "thread_id": thread_id,
        "run_id": run_id,
        "agent": record["agent_path"][0] if record["agent_path"] else None,
        "state": "waiting" if waiting else "closed",
    }


def schema_key(agent_path: Sequence[str], tool_name: str) -> str:
    return "/".join(agent_path) + ":" + tool_name


_SCHEMAS_WRITTEN: weakref.WeakKeyDictionary[BaseStore, set[str]] = weakref.WeakKeyDictionary()


class GateJournal:
    """The approval gate's writes to the store during one pass: the inbox index.

    Keys derived from approval ids keep a repeated pass (after a crash) from writing twice.
    """

    def __init__(self, store: BaseStore | None, *, thread_id: str, run_id: str | None,
                 schemas: dict[str, dict[str, Any]], scope: str = "",
                 ledger: Ledger | None = None, agent_path: Sequence[str] = ()) -> None:
        self.store = store
        self.ledger = ledger
        self.agent_path = list(agent_path)
        self.thread_id = thread_id
        self.run_id = run_id
        self.schemas = schemas
        self.scope = scope
        """The graph's checkpoint namespace: one agent's plans in one thread (a subagent's
        delegation has its own)."""

    def sync(self, old: TurnPlan | None, new: TurnPlan, answered: set[str]) -> None:
        """Mirror the plan's approvals and suspensions into the inbox index."""
        if self.store is None:
            return
        waiting = {r["id"] for r in waiting_records(new, answered) if r["status"] == "pending"}
        current: dict[str, ApprovalRecord] = {}
        position: dict[str, int] = {}
        for index, call in enumerate(new["calls"]):
            for record in (call["approval"], call["suspension"]):
                if record is not None:
                    current[record["id"]] = record
                    position[record["id"]] = index
        if old is not None and old["ai_message_id"] == new["ai_message_id"]:
            for call in old["calls"]:
                gone = call["suspension"]
                if gone is not None and gone["id"] not in current:
                    current[gone["id"]] = {**gone, "status": "approved"}  # resumed: closed
        for record in current.values():
            entry = index_entry(record, thread_id=self.thread_id, run_id=self.run_id,
                                waiting=record["id"] in waiting)
            self._schema(record)
            entry["position"] = position.get(record["id"], 0)
            entry["scope"] = self.scope
            self.store.put(APPROVALS, record["id"], entry, index=False)
        if old is None or old["ai_message_id"] != new["ai_message_id"]:
            self._close_strays(waiting | current.keys())

    def _schema(self, record: ApprovalRecord) -> None:
        """Keep the tool's argument schema once per agent and tool (not in every entry), and
        write it once per process and store, not on every pass of the gate."""
        assert self.store is not None
        key = schema_key(record["agent_path"], record["tool_name"])
        written = _SCHEMAS_WRITTEN.setdefault(self.store, set())
        if key not in written:
            self.store.put(SCHEMAS, key, self.schemas.get(record["tool_name"]) or {},
                           index=False)
            written.add(key)

    def _close_strays(self, keep: set[str]) -> None:
        """A new turn: what this agent still has pending in the ledger, beyond this turn,
        belongs to a turn that never reached a checkpoint (a process died after planning
        it), or one a client replaced. Its inbox entry is closed (no run waits on it); found
        by the ledger's index on the thread, not by scanning an inbox index that grows with
        every approval ever asked."""
        assert self.store is not None
        if self.ledger is None or not self.agent_path:
            return
        for approval_id in self.ledger.pending_ids(self.thread_id, self.agent_path) - keep:
            item = self.store.get(APPROVALS, approval_id)
            if item is None or item.value.get("scope", "") != self.scope:
                # Not indexed (yet): a parallel delegation of the same agent may be between
                # recording it and indexing it; or another delegation's, waiting in parallel.
                # Either way no reviewer sees it from here, and the gate never applies it.
                continue
            if item.value.get("state") == "waiting":
                # Closed in the index only: a pending approval stays pending until someone
                # decides it, it expires, or a user message supersedes it (a client can write
                # a model turn, and must not decline anything by it).
                self.store.put(APPROVALS, approval_id, {**item.value, "state": "closed"},
                               index=False)
