"""Decisions on approvals and suspensions (claimed once, for exactly the arguments
reviewed, bound to what the planner allowed), their expiry and withdrawal, and grants."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

from graphkit._ledger._base import LedgerBase
from graphkit._ledger._rows import (
    APPROVAL_READ,
    GRANT_COLUMNS,
    PENDING_TURNS,
    ApprovalRow,
    AuditRow,
    CallLink,
    GrantRow,
    PendingTurn,
    approval_row,
    beneath,
    grant_row,
    pending_turn,
)
from graphkit._ledger._schema import DONE
from graphkit._ledger._sql import Tx, dumps, path_text
from graphkit._ledger._values import unstowed
from graphkit._state import delegation_of_turn
from graphkit.types import ApprovalRecord

__all__ = ["Decisions", "Decline", "NewRun", "QueuedFor", "Stop"]


class Decline(NamedTuple):
    """An approval or suspension the system declines, with its decision and audit entries."""

    approval_id: str
    decision: Mapping[str, Any]
    audits: Sequence[AuditRow]


class QueuedFor(NamedTuple):
    """User messages (serialised, with ids) queued for after the turn of `ai_message_id`."""

    agent: str
    ai_message_id: str
    messages: Sequence[Mapping[str, Any]]
    vouched: bool = True
    """The Agent API's own (`Messages.take_vouched`); False: a client's."""


class Stop(NamedTuple):
    """The delegations a new message stops, if no decision below them stands (`_stoppable`),
    and what each answers (`answer`, formatted with its tool's `name`)."""

    waits: Sequence[tuple[Sequence[str], str]]
    """(the delegations a wait below works for, its approval id) each."""
    kept: Collection[str]
    """Approvals that count as decided."""
    answer: str


class NewRun(NamedTuple):
    """A run a new message started, held for the caller that runs it next."""

    run_id: str
    agent: str
    options: Mapping[str, Any]
    held_by: str


_GRANT_READ = ", ".join(f"g.{column.strip()}" for column in GRANT_COLUMNS.split(","))
"""`GRANT_COLUMNS` of `graphkit_grants g`, in a read that joins other tables."""


class Decisions(LedgerBase):
    """Decisions on approvals and suspensions (claimed once, for exactly the arguments"""

    @contextlib.contextmanager
    def _settling(self) -> Iterator[Tx]:
        """The transaction of every change of an approval's status (a person's decision, a
        decline of the system's, a decision undone), on disk before it returns: a decline
        lost to a power cut would be pending again, and could be approved after the run was
        told its call would not run."""
        with self._sql.durable(), self._sql.transaction() as tx:
            yield tx

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

    def approvals_of_run(self, run_id: str) -> list[ApprovalRow]:
        """Every approval (and request for input) the run waited on, at any depth."""
        rows = self._sql.query(f"SELECT {APPROVAL_READ} FROM graphkit_approvals "
                               "WHERE run_id = ?", (run_id,))
        return [approval_row(r) for r in rows]

    def record(self, approval_id: str) -> ApprovalRecord | None:
        """The approval record as planned (real arguments), if the ledger keeps it."""
        rows = self._sql.query("SELECT record FROM graphkit_approvals WHERE approval_id = ?",
                               (approval_id,))
        record: ApprovalRecord | None = (unstowed(self._sql.query, rows[0][0])
                                         if rows and rows[0][0] else None)
        return record

    def approval(self, approval_id: str) -> ApprovalRow | None:
        return self.approvals([approval_id]).get(approval_id)

    def decide(self, approval_id: str, *, thread_id: str, args_digest: str, status: str,
               decision: Mapping[str, Any], audits: Sequence[AuditRow],
               grant: GrantRow | None = None, enqueue: bool = False,
               held_by: str | None = None, call: Mapping[str, Any] | None = None) -> bool:
        """Claim a pending, unexpired approval for exactly these arguments; True if this call
        won. The claim, its audit entry (and a grant) commit together or not at all; with
        `enqueue`, a run left with nothing pending is handed to the workers in the same
        transaction. With `held_by`, such a run is queued too, but held for the caller, which
        resumes it next (`hold_ready`, `let_go`): should it die first, the workers take the
        run over once its claim lapses, and the decision is not left waiting on nobody.
        `call` (the record the decision was checked on: its kind, tool, agent path and call
        key) must be the ledger's own, so that a policy never judges a copy a client
        rewrote."""
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
        with self._settling() as tx:
            won = tx.execute(
                f"UPDATE graphkit_approvals SET status = ?, decision = ?, decided_at = {now} "
                "WHERE approval_id = ? AND thread_id = ? AND status = 'pending' "
                f"AND args_digest = ? AND (expires_at IS NULL OR expires_at > {now}){bound}",
                (status, dumps(dict(decision)), approval_id, thread_id, args_digest, *params))
            if won != 1:
                return False
            self._audit(tx, audits)
            held = None
            if enqueue or held_by is not None:
                held = self._enqueue(tx, approval_id, held_by=held_by)
            if grant is not None:
                expires = f"{now} + ?" if grant.ttl is not None else "?"
                tx.execute(
                    f"INSERT INTO graphkit_grants ({GRANT_COLUMNS}) VALUES "
                    f"(?, ?, ?, ?, ?, ?, {now}, {expires}, NULL)",
                    (grant.grant_id, grant.thread_id, path_text(grant.agent_path), grant.tool_name,
                     grant.grantor, grant.approval_id, grant.ttl))
        if held is not None and held_by is not None:
            self.hold_ready(held, held_by)
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

    def approved_below(self, thread_id: str, agent_path: Sequence[str]) -> dict[str, str]:
        """The calls in this thread's agents below `agent_path` approved and not run (nor
        running): call key -> tool name."""
        prefix = path_text(agent_path) + "/"
        return {str(r[0]): str(r[1]) for r in self._sql.query(
            "SELECT c.call_key, c.tool_name FROM graphkit_approvals a JOIN graphkit_calls c "
            "ON c.call_key = a.call_key WHERE a.thread_id = ? AND a.status = 'approved' "
            "AND substr(a.agent_path, 1, ?) = ? AND c.executed IS NULL",
            (thread_id, len(prefix), prefix))}

    def pending_turns(self, thread_id: str, agent_path: Sequence[str]) -> list[PendingTurn]:
        """(approval id, kind, tool name, the turn key of the plan that asked, ...) of what
        one agent and its subagents wait on in one thread."""
        return [pending_turn(r) for r in self._sql.query(
            f"SELECT {PENDING_TURNS}", beneath(thread_id, path_text(agent_path)))]

    def call_links(self, call_keys: Iterable[str]) -> dict[str, CallLink]:
        """Where each call was planned (its agent's path, its turn's key) and whether it has
        its outcome: what ties a subagent's turn (scoped by the delegation call it works
        for) to its supervisor's."""
        keys = list(dict.fromkeys(call_keys))
        if not keys:
            return {}
        rows = self._sql.query(
            "SELECT call_key, agent_path, turn_key, executed FROM graphkit_calls WHERE "
            f"call_key IN ({', '.join('?' for _ in keys)})", tuple(keys))
        return {str(r[0]): CallLink(str(r[1]), r[2], r[3] == DONE) for r in rows}

    def delegations_of(self, turn_key: str | None) -> list[str]:
        """The delegation calls a subagent's turn works for: its own, then each one above it,
        to the top (one read per level)."""
        chain: list[str] = []
        key = delegation_of_turn(turn_key)
        while key is not None and key not in chain and len(chain) < 32:
            chain.append(key)
            link = self.call_links([key]).get(key)
            key = delegation_of_turn(link.turn_key) if link is not None else None
        return chain

    @staticmethod
    def _stoppable(reader: Tx, pairs: Sequence[tuple[Sequence[str], str]],
                   kept: Collection[str]) -> list[tuple[str, str]]:
        """Of the delegations waits below an agent work for ((the delegations one works for,
        up to one of that agent's calls; its approval id) each), those (key, tool name) no
        reviewer's decision below works for (`kept`: approvals that count as decided): what
        a new user message stops, so that no subagent whose waits it superseded starts over
        and asks again (helper-92). Read by `take_message`'s transaction once the message
        superseded what waits, after which no decision can be taken: a decision read before
        that, and taken just before it, stopped a delegation it was to run in (helper-94)."""
        ids = list(dict.fromkeys(approval_id for _, approval_id in pairs))
        rows = {str(r[0]): approval_row(r) for r in reader.query(
            f"SELECT {APPROVAL_READ} FROM graphkit_approvals WHERE approval_id IN "
            f"({', '.join('?' for _ in ids)})", tuple(ids))} if ids else {}
        undecided: set[str] = set()
        decided: set[str] = set()
        for chain, approval_id in pairs:
            row = rows.get(approval_id)
            taken = approval_id in kept or (row is not None and row.decided and (
                row.decision or {}).get("event") != "superseded")
            (decided if taken else undecided).update(chain)
        keys = sorted(undecided - decided)
        names = {str(r[0]): str(r[1]) for r in reader.query(
            "SELECT call_key, tool_name FROM graphkit_calls WHERE call_key IN "
            f"({', '.join('?' for _ in keys)})", tuple(keys))} if keys else {}
        return [(key, names.get(key, "subagent")) for key in keys]

    def delegations_of_call(self, call_key: str) -> list[str]:
        """`delegations_of` the turn a call was planned in."""
        link = self.call_links([call_key]).get(call_key)
        return self.delegations_of(link.turn_key) if link is not None else []

    def works_for(self, turn_key: str | None, delegation: str) -> bool:
        """Whether a subagent's turn works for the delegation call `delegation`, or for a
        delegation made under it."""
        return delegation in self.delegations_of(turn_key)

    def pending_ids(self, thread_id: str, agent_path: Sequence[str]) -> set[str]:
        """The approvals and suspensions of one agent in one thread that wait on a decision."""
        return {str(r[0]) for r in self._sql.query(
            "SELECT approval_id FROM graphkit_approvals WHERE thread_id = ? AND agent_path = ? "
            "AND status = 'pending'", (thread_id, path_text(agent_path)))}

    def close(self, approval_id: str, *, decision: Mapping[str, Any],
              audits: Sequence[AuditRow], overdue: bool = False, enqueue: bool = False,
              thread_id: str | None = None, still_waits: bool = True) -> bool:
        """Decline a pending approval for a reason of the system's (superseded, cancelled;
        expired, with `overdue`, only if its time is up); with `thread_id`, only that thread's
        (a copied thread's state names the original's approvals). Without `still_waits` (it
        was superseded: the run went on), no run waits on it any more."""
        with self._settling() as tx:
            done = self._close(tx, approval_id, decision=decision, audits=audits,
                               overdue=overdue, thread_id=thread_id, still_waits=still_waits)
            if done and enqueue:
                self._enqueue(tx, approval_id)
        return done

    def _close(self, tx: Tx, approval_id: str, *, decision: Mapping[str, Any],
               audits: Sequence[AuditRow], overdue: bool, thread_id: str | None,
               still_waits: bool) -> bool:
        now = self._sql.now
        due = f" AND expires_at IS NOT NULL AND expires_at <= {now}" if overdue else ""
        params: tuple[str, ...] = ()
        if thread_id is not None:
            due += " AND thread_id = ?"
            params = (thread_id,)
        done = tx.execute(
            f"UPDATE graphkit_approvals SET status = 'rejected', decision = ?, "
            f"decided_at = {now}{'' if still_waits else ', waiting = NULL'} "
            f"WHERE approval_id = ? AND status = 'pending'{due}",
            (dumps(dict(decision)), approval_id, *params))
        if done == 1:
            self._audit(tx, audits)
        return done == 1

    def take_message(self, thread_id: str, *, declines: Sequence[Decline],
                     queue: QueuedFor | None, run: NewRun | None, stop: Stop | None = None,
                     settle: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """What a new message does to a paused thread, all or nothing, on disk before its run
        goes on: it declines what waits (superseded; a decision taken before it stands), is
        queued for after the turn (`queue`), with `stop` settles the delegations it stops,
        and with `run`, the run it started is queued for the workers, held by its caller
        (`hold_ready`), with its options; `settle`: answers of calls it stops that asked
        nobody yet. (A call decided meanwhile keeps its decision: its
        decline changes nothing.) In one transaction: a subagent's gate running beside the
        one that took the message (the server resumed one of two) saw its wait declined and
        its delegation not yet stopped, went on to its model, and answered for it."""
        with self._settling() as tx:
            for d in declines:
                self._close(tx, d.approval_id, decision=d.decision, audits=d.audits,
                            overdue=False, thread_id=thread_id, still_waits=False)
            if queue is not None:
                self._queue(tx, thread_id, queue.agent, queue.ai_message_id, queue.messages,
                            vouched=queue.vouched)
            stopped = self._stoppable(tx, stop.waits, stop.kept) if stop else []
            self._settle(tx, {key: {"content": stop.answer.format(name=name), "status": "error"}
                              for key, name in stopped if stop} | dict(settle or {}), thread_id)
            if run is not None:
                self._hold_new_run(tx, run.run_id, run.agent, thread_id, run.options,
                                   run.held_by)
        if run is not None:
            self.hold_ready(run.run_id, run.held_by)

    def reopen(self, approval_id: str, *, decision: Mapping[str, Any],
               audits: Sequence[AuditRow]) -> bool:
        """Undo a claimed decision the gate refused, so the approval is pending again (and
        whatever a gate had cleared for it no longer admits its call, and a grant it made
        approves nothing more)."""
        with self._settling() as tx:
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

    def live_grants(self, thread_id: str, agent_path: Sequence[str],
                    tool_names: Iterable[str], *, conversation: str,
                    ttl: timedelta | None = None) -> dict[str, GrantRow]:
        """Unrevoked, unexpired grants for these tools in this thread and agent, given in this
        conversation (the one their approval's call was planned in): a thread id names a new
        conversation once its thread was deleted (a LangGraph server's delete does not go
        through graphkit) and created again, by anyone who knows the id, and a grant of the
        deleted one approved the new one's calls with no one asked (helper-62, helper-63).
        With `ttl` (the agent's `grant_ttl`), only grants made within it, whatever expiry
        the door that made them wrote: a door without the agent wrote the default's (8 hours
        for a grant the agent limits to minutes: helper-113)."""
        names = sorted(set(tool_names))
        if not names:
            return {}
        marks = ", ".join("?" for _ in names)
        within, limit = ((f" AND g.created_at + ? > {self._sql.now}", (ttl.total_seconds(),))
                         if ttl is not None else ("", ()))
        rows = self._sql.query(
            f"SELECT {_GRANT_READ} FROM graphkit_grants g JOIN graphkit_approvals a "
            "ON a.approval_id = g.approval_id JOIN graphkit_calls c ON c.call_key = a.call_key "
            f"WHERE g.thread_id = ? AND g.agent_path = ? AND g.tool_name IN ({marks}) "
            f"AND g.revoked IS NULL AND (g.expires_at IS NULL OR g.expires_at > {self._sql.now})"
            f"{within} AND c.conversation = ? ORDER BY g.created_at",
            (thread_id, path_text(agent_path), *names, *limit, conversation))
        return {g.tool_name: g for g in map(grant_row, rows)}

    def grants(self, thread_id: str | None = None) -> list[GrantRow]:
        # (None: every thread's; an empty id names no thread, never all of them)
        clause, params = (("WHERE thread_id = ? ", (thread_id,)) if thread_id is not None
                          else ("", ()))
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
