"""What graphkit keeps in LangGraph's store: the inbox index of waiting calls, the append-only
audit log, and remembered grants.

The index lets an operator list waiting approvals across every thread without reading a single
checkpoint; the approval gate writes it as it plans and pauses. Audit entries are only ever
added, under keys that sort by time.
"""

from __future__ import annotations

import time
import uuid
import weakref
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from langgraph.store.base import BaseStore

from graphkit.approvals import waiting_records
from graphkit.state import TurnPlan
from graphkit.types import ApprovalRecord

__all__ = [
    "APPROVALS",
    "AUDIT",
    "GRANTS",
    "AuditEvent",
    "GateJournal",
    "audit",
    "grant",
    "granted",
    "index_entry",
    "read_audit",
]

APPROVALS = ("graphkit", "approvals")
SCHEMAS = ("graphkit", "schemas")
"""The argument schema of each agent's tools, once, for checking edits in the inbox."""
AUDIT = ("graphkit", "audit")
GRANTS = ("graphkit", "grants")
SCAN_LIMIT = 1_000_000
"""Store searches are paged; graphkit asks for everything that matches."""

AuditEvent = Literal[
    "requested", "approved", "edited", "rejected", "expired", "superseded", "refused",
    "granted", "auto_approved", "resumed", "cancelled",
]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def index_entry(
    record: ApprovalRecord,
    *,
    thread_id: str,
    run_id: str | None,
    waiting: bool,
) -> dict[str, Any]:
    """The inbox's copy of a pending approval or suspension."""
    return {
        **record,
        "thread_id": thread_id,
        "run_id": run_id,
        "agent": record["agent_path"][0] if record["agent_path"] else None,
        "state": "waiting" if waiting else "closed",
    }


def audit(
    store: BaseStore | None,
    event: AuditEvent,
    *,
    thread_id: str,
    record: ApprovalRecord | dict[str, Any] | None = None,
    run_id: str | None = None,
    by: str | None = None,
    comment: str | None = None,
    args_before: dict[str, Any] | None = None,
    args_after: dict[str, Any] | None = None,
    detail: str | None = None,
    key: str | None = None,
) -> dict[str, Any] | None:
    """Append one entry to the audit log. A `key` makes a repeated write idempotent."""
    if store is None:
        return None
    record = record or {}
    entry = {
        "event": event,
        "at": now_iso(),
        "thread_id": thread_id,
        "run_id": run_id,
        "approval_id": record.get("id"),
        "tool_name": record.get("tool_name"),
        "tool_call_id": record.get("tool_call_id"),
        "agent_path": record.get("agent_path"),
        "by": by,
        "comment": comment,
        "args_before": args_before,
        "args_after": args_after,
        "detail": detail,
    }
    item_key = key or f"{time.time():017.6f}-{uuid.uuid4().hex[:8]}"
    store.put((*AUDIT, thread_id), item_key, entry, index=False)
    return entry


def read_audit(
    store: BaseStore, *, thread_id: str | None = None, approval_id: str | None = None
) -> list[dict[str, Any]]:
    """Audit entries, oldest first, for a thread, an approval, or everything."""
    namespace = (*AUDIT, thread_id) if thread_id else AUDIT
    filter_ = {"approval_id": approval_id} if approval_id else None
    items = store.search(namespace, filter=filter_, limit=SCAN_LIMIT)
    return sorted((dict(item.value) for item in items), key=lambda e: (e["at"], e["event"]))


def schema_key(agent_path: Sequence[str], tool_name: str) -> str:
    return "/".join(agent_path) + ":" + tool_name


def _grant_key(agent_path: Sequence[str], tool_name: str) -> str:
    return "/".join(agent_path) + ":" + tool_name


def grant(store: BaseStore, *, thread_id: str, agent_path: Sequence[str], tool_name: str,
          by: str | None, approval_id: str) -> None:
    """Remember an approval for every later call of this tool in this thread."""
    store.put((*GRANTS, thread_id), _grant_key(agent_path, tool_name),
              {"by": by, "approval_id": approval_id, "at": now_iso()}, index=False)


def granted(store: BaseStore | None, *, thread_id: str, agent_path: Sequence[str],
            tool_names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The remembered grants among `tool_names` for this thread and agent."""
    if store is None:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for name in set(tool_names):
        item = store.get((*GRANTS, thread_id), _grant_key(agent_path, name))
        if item is not None:
            found[name] = dict(item.value)
    return found


_SCHEMAS_WRITTEN: weakref.WeakKeyDictionary[BaseStore, set[str]] = weakref.WeakKeyDictionary()


class GateJournal:
    """The approval gate's writes to the store during one pass: audit entries and the index.

    Keys derived from approval ids keep a repeated pass (after a crash) from writing twice.
    """

    def __init__(self, store: BaseStore | None, *, thread_id: str, run_id: str | None,
                 schemas: dict[str, dict[str, Any] | None], scope: str = "") -> None:
        self.store = store
        self.thread_id = thread_id
        self.run_id = run_id
        self.schemas = schemas
        self.scope = scope
        """The graph's checkpoint namespace: one agent's plans in one thread (a subagent's
        delegation has its own)."""

    def planned(self, plan: TurnPlan) -> None:
        for call in plan["calls"]:
            record = call["approval"]
            if record is not None:
                audit(self.store, "requested", thread_id=self.thread_id, record=record,
                      run_id=self.run_id, args_before=record["args"],
                      key=f"{record['id']}:requested")
            elif call["metadata"].get("approval.granted"):
                audit(self.store, "auto_approved", thread_id=self.thread_id,
                      run_id=self.run_id, detail="remembered grant for this thread",
                      record={"tool_name": call["tool_name"],
                              "tool_call_id": call["tool_call_id"]},
                      args_before=call["args"],
                      key=f"{plan['ai_message_id']}:{call['tool_call_id']}:auto")

    def applied(self, audits: Sequence[tuple[str, ApprovalRecord, dict[str, Any]]]) -> None:
        for event, record, details in audits:
            audit(self.store, event, thread_id=self.thread_id, record=record,  # type: ignore[arg-type]
                  run_id=self.run_id, **details)

    def sync(self, old: TurnPlan | None, new: TurnPlan, answered: set[str]) -> None:
        """Mirror the plan's approvals and suspensions into the inbox index."""
        if self.store is None:
            return
        waiting = {r["id"] for r in waiting_records(new, answered) if r["status"] == "pending"}
        if old is None or old["ai_message_id"] != new["ai_message_id"]:
            self._close_strays(waiting)
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

    def _schema(self, record: ApprovalRecord) -> None:
        """Keep the tool's argument schema once per agent and tool (not in every entry), and
        write it once per process and store, not on every pass of the gate."""
        assert self.store is not None
        key = schema_key(record["agent_path"], record["tool_name"])
        written = _SCHEMAS_WRITTEN.setdefault(self.store, set())
        if key not in written:
            self.store.put(SCHEMAS, key, {"schema": self.schemas.get(record["tool_name"])},
                           index=False)
            written.add(key)

    def _close_strays(self, keep: set[str]) -> None:
        """A new turn: entries of this agent and thread still marked waiting belong to a turn
        that never reached a checkpoint (a process died after writing them) or is over."""
        assert self.store is not None
        stray = self.store.search(APPROVALS, filter={"thread_id": self.thread_id,
                                                     "scope": self.scope, "state": "waiting"},
                                  limit=SCAN_LIMIT)
        for item in stray:
            if item.key not in keep:
                self.store.put(APPROVALS, item.key, {**item.value, "state": "closed"},
                               index=False)
