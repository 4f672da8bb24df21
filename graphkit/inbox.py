"""The operator inbox: every waiting approval and suspension across threads and agents, decided
without the agent's process.

The inbox reads the index the approval gate keeps in LangGraph's store (no checkpoint is read
to list), and records decisions in the ledger, where exactly one decision per approval wins.
The next `agent.resume(run_id=...)` (or a worker polling `ready()`) applies them to the run.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import jsonschema

from graphkit.decisions import (
    Approvers,
    audited_refusal,
    claim,
    expire_overdue,
    human_decision,
    overdue,
    overlay,
    resolved_message,
)
from graphkit.errors import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    InvalidApprovedArgsError,
)
from graphkit.journal import APPROVALS, SCAN_LIMIT, SCHEMAS, read_audit, schema_key
from graphkit.storage import Storage, open_storage
from graphkit.types import ApprovalRecord, PendingApproval

__all__ = ["Inbox"]


def _pending(entry: dict[str, Any]) -> PendingApproval:
    return PendingApproval.from_record(entry)


class Inbox:
    """Pending approvals of every agent that shares this storage.

    Args:
        url: The storage URL the agents use (`sqlite:///...` or `postgresql://...`).
        approvers: A policy `(decided_by, pending) -> bool` consulted before every decision.
    """

    def __init__(self, url: str | Storage, *, approvers: Approvers | None = None) -> None:
        self._storage = url if isinstance(url, Storage) else open_storage(url)
        self.approvers = approvers

    # ------------------------------------------------------------------ reading

    def _waiting_entries(self, **filters: Any) -> list[dict[str, Any]]:
        items = self._storage.store.search(
            APPROVALS, filter={"state": "waiting", "status": "pending", **filters},
            limit=SCAN_LIMIT)
        return [dict(item.value) for item in items]

    def pending(
        self, agent: str | None = None, tool_name: str | None = None, limit: int | None = None
    ) -> list[PendingApproval]:
        """Undecided approvals and suspensions, oldest first."""
        filters: dict[str, Any] = {}
        if agent is not None:
            filters["agent"] = agent
        if tool_name is not None:
            filters["tool_name"] = tool_name
        entries = self._waiting_entries(**filters)
        decided = self._storage.ledger.decisions(e["id"] for e in entries)
        undecided = sorted((e for e in entries if e["id"] not in decided),
                           key=lambda e: (e["created_at"], e.get("position", 0), e["id"]))
        return [_pending(e) for e in undecided[:limit]]

    def _entry(self, approval_id: str) -> dict[str, Any]:
        item = self._storage.store.get(APPROVALS, approval_id)
        if item is None:
            msg = f"no approval with id {approval_id!r} in {self._storage.description}"
            raise ApprovalNotFoundError(msg)
        return dict(item.value)

    def get(self, id: str) -> PendingApproval:
        """One approval or suspension by id, with its decision if it has one."""
        entry = self._entry(id)
        (shown,) = overlay([entry], self._storage.ledger)  # type: ignore[list-item]
        return _pending({**entry, **shown})

    def ready(self) -> list[str]:
        """Runs whose waiting calls are all decided; `agent.resume(run_id=...)` continues each."""
        entries = self._waiting_entries()
        decided = self._storage.ledger.decisions(e["id"] for e in entries)
        runs: dict[str, list[bool]] = defaultdict(list)
        for entry in entries:
            if entry.get("run_id"):
                runs[entry["run_id"]].append(entry["id"] in decided)
        return sorted(run for run, flags in runs.items() if all(flags))

    def audit(self, *, thread_id: str | None = None, id: str | None = None
              ) -> list[dict[str, Any]]:
        """The audit log, oldest first: for a thread, for one approval, or all of it."""
        if id is not None and thread_id is None:
            thread_id = self._entry(id).get("thread_id")
        return read_audit(self._storage.store, thread_id=thread_id, approval_id=id)

    # ------------------------------------------------------------------ deciding

    def approve(
        self,
        id: str,
        *,
        decided_by: str,
        comment: str | None = None,
        args: dict[str, Any] | None = None,
        args_digest: str | None = None,
    ) -> PendingApproval:
        """Approve (with edited `args` if given); the run continues on its next resume."""
        return self._decide(id, approve=True, decided_by=decided_by, comment=comment, args=args,
                            args_digest=args_digest)

    def decline(self, id: str, *, decided_by: str, comment: str | None = None
                ) -> PendingApproval:
        """Decline: the call never runs; the model is told when the run resumes."""
        return self._decide(id, approve=False, decided_by=decided_by, comment=comment)

    def _decide(self, approval_id: str, *, approve: bool, decided_by: str,
                comment: str | None, args: dict[str, Any] | None = None,
                args_digest: str | None = None) -> PendingApproval:
        entry = self._entry(approval_id)
        thread_id, run_id = str(entry["thread_id"]), entry.get("run_id")
        with audited_refusal(self._storage.store, entry, by=decided_by, thread_id=thread_id,
                             run_id=run_id):
            self._claim(entry, approve=approve, decided_by=decided_by, comment=comment,
                        args=args, args_digest=args_digest)
        return self.get(approval_id)

    def _claim(self, entry: dict[str, Any], *, approve: bool, decided_by: str,
               comment: str | None, args: dict[str, Any] | None, args_digest: str | None
               ) -> None:
        record: ApprovalRecord = entry  # type: ignore[assignment]
        approval_id = entry["id"]
        thread_id, run_id = str(entry["thread_id"]), entry.get("run_id")
        store, ledger = self._storage.store, self._storage.ledger
        if entry["status"] != "pending" or entry.get("state") != "waiting":
            raise ApprovalAlreadyResolvedError(resolved_message(entry))
        if overdue(record):
            expire_overdue([record], ledger, store, thread_id=thread_id, run_id=run_id)
        earlier = ledger.decision(approval_id)
        if earlier is not None:
            raise ApprovalAlreadyResolvedError(resolved_message(entry, earlier))
        decision, event = human_decision(
            record, approve=approve, approvers=self.approvers, decided_by=decided_by,
            comment=comment, args=args, args_digest=args_digest,
            check_args=lambda edited: self._check_args(entry, edited))
        claim(ledger, store, record, decision, thread_id=thread_id, run_id=run_id, event=event)

    def _check_args(self, entry: dict[str, Any], args: Any) -> None:
        if not isinstance(args, dict):
            msg = f"edited args must be a JSON object, got {type(args).__name__}"
            raise InvalidApprovedArgsError(msg)
        item = self._storage.store.get(
            SCHEMAS, schema_key(entry.get("agent_path") or [], entry["tool_name"]))
        schema = item.value.get("schema") if item is not None else None
        if not schema:
            return
        try:
            jsonschema.validate(args, schema)
        except jsonschema.ValidationError as exc:
            msg = (f"arguments {args!r} are not valid for tool {entry['tool_name']!r}: "
                   f"{exc.message}")
            raise InvalidApprovedArgsError(msg) from exc

    # ------------------------------------------------------------------ async twins

    async def apending(self, agent: str | None = None, tool_name: str | None = None,
                       limit: int | None = None) -> list[PendingApproval]:
        """Async twin of `pending`."""
        return await asyncio.to_thread(self.pending, agent, tool_name, limit)

    async def aget(self, id: str) -> PendingApproval:
        """Async twin of `get`."""
        return await asyncio.to_thread(self.get, id)

    async def aapprove(self, id: str, *, decided_by: str, comment: str | None = None,
                       args: dict[str, Any] | None = None, args_digest: str | None = None
                       ) -> PendingApproval:
        """Async twin of `approve`."""
        return await asyncio.to_thread(self.approve, id, decided_by=decided_by, comment=comment,
                                       args=args, args_digest=args_digest)

    async def adecline(self, id: str, *, decided_by: str, comment: str | None = None
                       ) -> PendingApproval:
        """Async twin of `decline`."""
        return await asyncio.to_thread(self.decline, id, decided_by=decided_by, comment=comment)

    async def aready(self) -> list[str]:
        """Async twin of `ready`."""
        return await asyncio.to_thread(self.ready)

    async def aexpire(self) -> list[PendingApproval]:
        """Async twin of `expire`."""
        return await asyncio.to_thread(self.expire)

    async def aaudit(self, *, thread_id: str | None = None, id: str | None = None
                     ) -> list[dict[str, Any]]:
        """Async twin of `audit`."""
        return await asyncio.to_thread(self.audit, thread_id=thread_id, id=id)

    def expire(self) -> list[PendingApproval]:
        """Decline every waiting approval past its `expires_at` (never approve one)."""
        expired: list[PendingApproval] = []
        for entry in self._waiting_entries():
            record: ApprovalRecord = entry  # type: ignore[assignment]
            if not overdue(record):
                continue
            if expire_overdue([record], self._storage.ledger, self._storage.store,
                              thread_id=str(entry["thread_id"]), run_id=entry.get("run_id")):
                expired.append(self.get(entry["id"]))
        return expired
