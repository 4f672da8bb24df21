"""Each call's one execution: claimed before the tool starts, its result recorded, what it
asked (a suspension), and what a stopped turn fences."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from graphkit._ledger import _keeper, _schema
from graphkit._ledger._base import LedgerBase
from graphkit._ledger._once import once_text, once_values
from graphkit._ledger._rows import (
    APPROVAL_READ,
    ApprovalRow,
    AuditRow,
    CallRow,
    Claimed,
    Start,
    approval_row,
)
from graphkit._ledger._schema import (
    ADMITTED,
    DONE,
    RUN_ARGS,
)
from graphkit._ledger._sql import Tx, dumps, iso_now_ms, loads, path_text
from graphkit._ledger._values import unstowed
from graphkit._state import message_of_turn

__all__ = ["Executions"]

logger = logging.getLogger("graphkit")

OUTCOME_PATIENCE = 600.0
"""How long what a call's run did is tried again while its database is away."""
_W = TypeVar("_W")


class Executions(LedgerBase):
    """Each call's one execution: claimed before the tool starts, its result recorded, what it"""

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

    def admission(self, call_key: str) -> tuple[CallRow | None, ApprovalRow | None]:
        """A planned call (with the arguments it runs with) and its approval (if it needs
        one), in one read."""
        rows = self._sql.query(
            "SELECT c.call_key, c.thread_id, c.agent_path, c.tool_name, c.args_digest, "
            "c.approval_id, c.executed, c.outcome, c.once_results, cl.run_digest, c.args, "
            "cl.run_args, c.tool_call_id, "
            + ", ".join(f"a.{col.strip()} AS a_{col.strip()}"
                        for col in APPROVAL_READ.split(",")) +
            " FROM graphkit_calls c LEFT JOIN graphkit_approvals a "
            "ON a.approval_id = c.approval_id LEFT JOIN graphkit_cleared cl "
            "ON cl.approval_id = c.approval_id WHERE c.call_key = ?", (call_key,))
        if not rows:
            return None, None
        r = rows[0]
        args = r[11] if r[5] is not None and r[11] is not None else r[10]
        call = CallRow(call_key=str(r[0]), thread_id=str(r[1]),
                       agent_path=[p for p in str(r[2]).split("/") if p], tool_name=str(r[3]),
                       args_digest=str(r[4]), approval_id=r[5], executed=r[6],
                       outcome=loads(r[7]), once_results=once_values(r[8]), cleared=r[9],
                       args=unstowed(self._sql.query, args, whole=True), tool_call_id=r[12])
        return call, approval_row(r[13:]) if r[13] is not None else None

    def call(self, call_key: str) -> CallRow | None:
        """A planned call, with its arguments as planned."""
        rows = self._sql.query(
            "SELECT call_key, thread_id, agent_path, tool_name, args_digest, approval_id, "
            "executed, outcome, once_results, args, tool_call_id, conversation "
            "FROM graphkit_calls WHERE call_key = ?",
            (call_key,))
        if not rows:
            return None
        r = rows[0]
        return CallRow(call_key=str(r[0]), thread_id=str(r[1]),
                       agent_path=[p for p in str(r[2]).split("/") if p], tool_name=str(r[3]),
                       args_digest=str(r[4]), approval_id=r[5], executed=r[6],
                       outcome=loads(r[7]), once_results=once_values(r[8]),
                       args=unstowed(self._sql.query, r[9], whole=True), tool_call_id=r[10],
                       conversation=r[11])

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

    def agent_outcomes(self, thread_id: str, agent_path: Sequence[str]
                       ) -> dict[tuple[str, str], list[tuple[str, dict[str, Any] | None]]]:
        """The tool and the recorded outcome (None: none yet) of every call this agent
        planned in this thread (or took from the thread it was copied from:
        `adopt_outcomes`), by the id of the AI message its turn is (`message_of_turn`) and
        its tool_call_id (more than one call may have an id: the gate refused each), oldest
        first. One read, whatever the number of turns."""
        found: dict[tuple[str, str], list[tuple[str, dict[str, Any] | None]]] = {}
        for row in self._sql.query(
                "SELECT turn_key, tool_call_id, tool_name, executed, outcome FROM graphkit_calls "
                "WHERE thread_id = ? AND agent_path = ? AND turn_key IS NOT NULL "
                "ORDER BY created_at", (thread_id, path_text(agent_path))):
            found.setdefault((message_of_turn(str(row[0])), str(row[1])), []).append(
                (str(row[2]), loads(row[4]) if row[3] == DONE else None))
        return found

    def turn_calls(self, thread_id: str, turn_key: str
                   ) -> list[tuple[str, str, dict[str, Any]]]:
        """The tool_call_id, tool and recorded outcome of each call of the turn of `key` in
        a thread that has one (the gate's refusals too), oldest first."""
        return [(str(r[0]), str(r[1]), loads(r[2])) for r in self._sql.query(
            "SELECT tool_call_id, tool_name, outcome FROM graphkit_calls WHERE thread_id = ? "
            "AND turn_key = ? AND executed = ? AND outcome IS NOT NULL ORDER BY created_at",
            (thread_id, turn_key, DONE))]

    def adopt_outcomes(self, thread_id: str, agent_path: Sequence[str], turn_key: str,
                       calls: Sequence[tuple[str, str, str, Mapping[str, Any]]]) -> None:
        """Record, for a turn of a copied thread's history, the outcomes its calls
        (call key, tool_call_id, tool, outcome) had where a model node planned it
        (`turn_calls` there), unless the copy holds the turn already: its checks read them
        here from then on, once it plans turns of its own too."""
        path = path_text(agent_path)
        with self._sql.transaction() as tx:
            if tx.query("SELECT 1 FROM graphkit_calls WHERE thread_id = ? AND turn_key = ? "
                        "LIMIT 1", (thread_id, turn_key)):
                return
            for call_key, call_id, tool_name, outcome in calls:
                tx.execute(
                    "INSERT INTO graphkit_calls (call_key, thread_id, agent_path, tool_name, "
                    "args_digest, turn_key, tool_call_id, executed, outcome, created_at) "
                    f"VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, {self._sql.now})",
                    (call_key, thread_id, path, tool_name, turn_key, call_id, DONE,
                     dumps(dict(outcome))))

    def start_admitted(self, call_key: str, owner: str, *, thread_id: str,
                       agent_path: Sequence[str], tool_name: str, tool_call_id: str
                       ) -> Claimed | None:
        """Claim a call's first execution in one statement, when the ledger admits it as is:
        planned in this thread, agent, tool and call id, and approved if it needs approval (an
        approval admits only once a gate verified it, `clear`, whoever claimed it). Returns
        the arguments it runs with, its `ctx.once` results, and whether it has resume data to
        read (`resume_values`); None sends the caller to the step-by-step path (`admission`,
        `start`), which says why not, or takes over a dead holder's claim."""
        rows = self._claim_admitted(call_key, owner, thread_id, agent_path, tool_name,
                                    tool_call_id)
        if len(rows) != 1:
            return None
        once, resumed, approval_id, planned, planned_digest, cleared, cleared_digest = rows[0]
        if approval_id is not None:  # a gated call: its claim is on disk before the tool starts
            # (RETURNING the id itself: SQLite 3.40 evaluates `x IS NOT NULL` there wrongly)
            self._flush()
        _keeper.KEEPER.hold(self, ("call", call_key), owner, _schema.LEASE_SECONDS)
        gated = approval_id is not None and cleared is not None
        return Claimed(once=once_values(once), resumed=bool(resumed),
                       args=unstowed(self._sql.query, cleared if gated else planned, whole=True),
                       digest=str(cleared_digest if gated else planned_digest))

    def _claim_admitted(self, call_key: str, owner: str, thread_id: str,
                        agent_path: Sequence[str], tool_name: str, tool_call_id: str
                        ) -> list[tuple[Any, ...]]:
        now = self._sql.now
        return self._sql.query(
            f"UPDATE graphkit_calls SET executed = ?, claim_expires = {now} + ? "
            "WHERE call_key = ? AND executed IS NULL AND COALESCE(tool_call_id, ?) = ? "
            f"AND {ADMITTED} RETURNING once_results, "
            "EXISTS (SELECT 1 FROM graphkit_approvals a WHERE a.thread_id = ? "
            f"AND a.call_key = ? AND a.kind = 'suspension' AND a.status = 'approved'), "
            f"approval_id, {RUN_ARGS}",
            (owner, _schema.LEASE_SECONDS, call_key, tool_call_id, tool_call_id, thread_id,
             path_text(agent_path), tool_name, thread_id, call_key))

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
                (owner, _schema.LEASE_SECONDS, call_key, DONE))
        if won == 1:
            _keeper.KEEPER.hold(self, ("call", call_key), owner, _schema.LEASE_SECONDS)
            return "won", None
        row = self.call(call_key)
        if row is None:
            return "unknown", None
        if row.executed == DONE:
            return "done", row
        if row.executed and holder_dead(row.executed) and self._take_over(call_key, owner,
                                                                          row.executed):
            _keeper.KEEPER.hold(self, ("call", call_key), owner, _schema.LEASE_SECONDS)
            return "won", row
        return "busy", row

    def _take_over(self, call_key: str, owner: str, holder: str) -> bool:
        with self._sql.durable():
            return self._sql.execute(
                f"UPDATE graphkit_calls SET executed = ?, claim_expires = {self._sql.now} + ? "
                "WHERE call_key = ? AND executed = ?",
                (owner, _schema.LEASE_SECONDS, call_key, holder)) == 1

    def confirm(self, call_key: str, owner: str) -> bool:
        """Whether `owner` still holds the call's execution claim, renewing it if so: a
        process that stalled since it claimed the call (longer than the claim's lease) may
        find another one took it over, ran it and recorded its result."""
        return self._sql.execute(
            f"UPDATE graphkit_calls SET claim_expires = {self._sql.now} + ? "
            "WHERE call_key = ? AND executed = ?",
            (_schema.LEASE_SECONDS, call_key, owner)) == 1

    def _renew_call(self, call_key: str, owner: str) -> None:
        self._sql.execute_apart(
            f"UPDATE graphkit_calls SET claim_expires = {self._sql.now} + ? "
            "WHERE call_key = ? AND executed = ?", (_schema.LEASE_SECONDS, call_key, owner))

    def finish(self, call_key: str, owner: str, outcome: Mapping[str, Any]) -> None:
        """Record the call's outcome (by its claim's holder), whatever the database does
        meanwhile (`_patiently`)."""
        done = self._patiently(call_key, owner, lambda: self._record_outcome(
            call_key, owner, outcome))
        if done and done[0][0] is not None:
            # a gated call's result is on disk: a restart never takes it for one that died
            # mid-call (which is run again)
            self._flush()

    def _patiently(self, call_key: str, owner: str, write: Callable[[], _W]) -> _W:
        """`write`, what a call's run did (its outcome, what it asked), by the holder of its
        claim. The tool ran: a write lost to a database away for a while (down, locked past
        the wait) let the claim lapse, and the call ran again, in this very process
        (helper-59). The write is tried again, the claim still renewed, until it lands or
        `OUTCOME_PATIENCE` passes (then it raises, and the claim lapses as a dead process's
        would); every quarter second, so that once the database is back it lands before
        another process could take over a claim that lapsed meanwhile (an outage longer
        than the claim's lease, in which no renewal landed either: helper-60)."""
        pause, deadline = 0.1, time.monotonic() + OUTCOME_PATIENCE
        try:
            while True:
                try:
                    return write()
                except Exception as exc:
                    if not self._sql.away(exc) or time.monotonic() >= deadline:
                        raise
                    logger.warning("call %s: what it did could not be recorded (%s: %s); "
                                   "trying again", call_key, type(exc).__name__, exc)
                    time.sleep(pause)
                    pause = min(pause * 2, 0.25)
        finally:
            _keeper.KEEPER.drop(("call", call_key), owner)

    def _record_outcome(self, call_key: str, owner: str, outcome: Mapping[str, Any]
                        ) -> list[tuple[Any, ...]]:
        update = ("UPDATE graphkit_calls SET executed = ?, outcome = ? "
                  "WHERE call_key = ? AND executed = ? RETURNING approval_id")
        params = (DONE, dumps(dict(outcome)), call_key, owner)
        if not self._notifying(self._sql)[0]:  # no event to write beside it: one statement
            return self._sql.query(update, params)  # is atomic without a transaction
        with self._sql.transaction() as tx:
            done = tx.query(update, params)
            if done:
                self._call_finished(tx, call_key, outcome, "ran" if outcome.get(
                    "status", "success") == "success" else "failed")
        return done

    def suspend(self, call_key: str, owner: str, payload: Mapping[str, Any]) -> None:
        """The call suspended itself (`ctx.suspend`): keep what it asked, for the gate to ask
        a human, and let it run again on resume. Only the holder of its execution claim can
        say so (a tool that really ran); the gate asks nothing the ledger was not told."""
        self._patiently(call_key, owner, lambda: self._sql.execute(
            "UPDATE graphkit_calls SET executed = NULL, suspended_with = ? "
            "WHERE call_key = ? AND executed = ?", (dumps(dict(payload)), call_key, owner)))

    def take_suspensions(self, call_keys: Iterable[str], thread_id: str
                         ) -> dict[str, dict[str, Any]]:
        """What the calls (of this thread) asked since the gate last looked: key -> payload.
        Each payload is handed out once; the gate records it as a pending suspension."""
        keys = list(dict.fromkeys(call_keys))
        if not keys:
            return {}
        marks = ", ".join("?" for _ in keys)
        # (a call settled since it asked, superseded by a new message, asks nobody)
        select = (f"SELECT call_key, suspended_with FROM graphkit_calls WHERE thread_id = ? "
                  f"AND suspended_with IS NOT NULL AND executed IS NULL AND call_key IN "
                  f"({marks})")
        if not self._sql.query(select, (thread_id, *keys)):
            return {}
        with self._sql.transaction() as tx:  # (the thread's lease holder is the only taker)
            rows = tx.query(select, (thread_id, *keys))
            tx.execute(f"UPDATE graphkit_calls SET suspended_with = NULL WHERE "
                       f"thread_id = ? AND call_key IN ({marks})", (thread_id, *keys))
        return {str(key): loads(payload) or {} for key, payload in rows}

    def asked_in(self, thread_id: str) -> dict[str, str]:
        """The calls of this thread that suspended themselves and have not been asked of
        anyone yet (their gate has not taken what they asked: `take_suspensions`): call key
        -> tool name. Few at a time: one read of the thread's serves every check."""
        return {str(r[0]): str(r[1]) for r in self._sql.query(
            "SELECT call_key, tool_name FROM graphkit_calls WHERE thread_id = ? AND "
            "suspended_with IS NOT NULL AND executed IS NULL", (thread_id,))}

    def asked_of(self, call_keys: Iterable[str], thread_id: str) -> list[str]:
        """Which of these calls `asked_in` the thread."""
        asked = self.asked_in(thread_id)
        return [key for key in dict.fromkeys(call_keys) if key in asked]

    def asked(self, call_key: str, thread_id: str) -> bool:
        """Whether the call is `asked_in` the thread."""
        return call_key in self.asked_in(thread_id)

    def outcome_of_done(self, call_key: str, outcome: Mapping[str, Any]) -> dict[str, Any]:
        """The outcome of a call marked done: the one recorded, or, where none was (a row
        written by hand), `outcome`, recorded now, so that the answer the conversation gets
        is the ledger's (an answer it does not hold answers nothing: the call was sent again
        and again, to the run's step limit)."""
        self._sql.execute("UPDATE graphkit_calls SET outcome = ? WHERE call_key = ? AND "
                          "executed = ? AND outcome IS NULL", (dumps(dict(outcome)), call_key,
                                                               DONE))
        found = self.outcomes([call_key]).get(call_key)
        return found if found is not None else dict(outcome)

    def release(self, call_key: str, owner: str) -> None:
        """The call stopped without a result (it suspended, or raised): it may run again."""
        _keeper.KEEPER.drop(("call", call_key), owner)
        self._sql.execute(
            "UPDATE graphkit_calls SET executed = NULL WHERE call_key = ? AND executed = ?",
            (call_key, owner))

    def settle(self, outcomes: Mapping[str, Mapping[str, Any]], *, thread_id: str) -> None:
        """Record the answer of calls of this thread that will never run (declined,
        superseded, stopped); a key from another thread (a client can read keys) settles
        nothing. No run waits on a settled call's approval any more, and one approved that
        will not run now is recorded as superseded, with the call's answer: a subagent that
        ended without its approved call (a client's write on its namespace) left the approval
        approved and marked waiting, its run listed as ready for good (helper-77), and a new
        message through the graph's input told a supervisor's approved call 'not run' while
        the inbox showed it approved (helper-79). A call that suspended itself had started:
        it is told `stopped`, never `not_run` (helper-121)."""
        if not outcomes:
            return
        with self._sql.transaction() as tx:
            self._settle(tx, outcomes, thread_id)

    def _settle(self, tx: Tx, outcomes: Mapping[str, Mapping[str, Any]], thread_id: str
                ) -> None:
        """`settle`'s statements, in a transaction of the caller's."""
        if not outcomes:
            return
        started = self._started(tx, list(outcomes), thread_id)
        for key, outcome in outcomes.items():
            if tx.execute(
                    "UPDATE graphkit_calls SET executed = ?, outcome = ? "
                    "WHERE call_key = ? AND thread_id = ? AND executed IS NULL",
                    (DONE, dumps(dict(outcome)), key, thread_id)) == 1:
                self._overtaken(tx, key, thread_id, str(outcome.get("content", "")),
                                started=key in started)
                self._call_finished(tx, key, outcome,
                                    "stopped" if key in started else "not_run")

    @staticmethod
    def _started(tx: Any, keys: list[str], thread_id: str) -> set[str]:
        """Which of these calls suspended themselves (`suspend`), and so started: asked
        (`suspended_with`), or a suspension of theirs recorded."""
        marks = ", ".join("?" for _ in keys)
        return {str(r[0]) for r in tx.query(
            f"SELECT call_key FROM graphkit_calls WHERE thread_id = ? AND call_key IN ({marks}) "
            "AND (suspended_with IS NOT NULL OR EXISTS (SELECT 1 FROM graphkit_approvals a "
            "WHERE a.call_key = graphkit_calls.call_key AND a.kind = 'suspension'))",
            (thread_id, *keys))}

    def _overtaken(self, tx: Any, call_key: str, thread_id: str, answer: str, *,
                   started: bool = False) -> None:
        """A settled call's approvals: no run waits on them; approved, they are superseded."""
        tx.execute("UPDATE graphkit_approvals SET waiting = NULL WHERE call_key = ? "
                   "AND thread_id = ? AND waiting IS NOT NULL", (call_key, thread_id))
        approved = tx.query("SELECT a.approval_id, a.tool_name, c.tool_call_id, a.agent_path, "
                            "a.run_id FROM graphkit_approvals a JOIN graphkit_calls c "
                            "ON c.call_key = a.call_key WHERE a.call_key = ? "
                            "AND a.thread_id = ? AND a.status = 'approved'",
                            (call_key, thread_id))
        for approval_id, tool_name, tool_call_id, path, run_id in approved:
            decision = {"type": "reject", "event": "superseded", "status": "rejected",
                        "decided_by": None, "comment": answer}
            tx.execute(f"UPDATE graphkit_approvals SET status = 'rejected', decision = ?, "
                       f"decided_at = {self._sql.now} WHERE approval_id = ? "
                       "AND status = 'approved'", (dumps(decision), approval_id))
            tx.execute("DELETE FROM graphkit_cleared WHERE approval_id = ?", (approval_id,))
            self._audit(tx, [AuditRow(thread_id=thread_id, approval_id=str(approval_id), entry={
                "event": "superseded", "at": iso_now_ms(), "thread_id": thread_id,
                "run_id": run_id, "approval_id": approval_id, "tool_name": tool_name,
                "tool_call_id": tool_call_id, "agent_path": str(path).split("/"),
                "decided_by": None, "comment": answer, "args_before": None,
                "args_after": None, "detail": "approved; it had started, and waited for "
                "input, when this came" if started else "approved, it had not run when this "
                "came"})])

    def settle_call(self, call_key: str, outcome: Mapping[str, Any], *, thread_id: str,
                    agent_path: Sequence[str], tool_name: str) -> bool:
        """Record the answer of one call, only if the ledger planned exactly that call (this
        thread, agent and tool) and it has none yet: a delegation's answer cannot stand for
        another call whose key a client named."""
        return self._sql.execute(
            "UPDATE graphkit_calls SET executed = ?, outcome = ? WHERE call_key = ? "
            f"AND executed IS NULL AND {ADMITTED}",
            (DONE, dumps(dict(outcome)), call_key, thread_id, path_text(agent_path),
             tool_name)) == 1

    def resume_values(self, call_key: str, thread_id: str) -> list[Any]:
        """Resume data a gate cleared for a suspended call of this thread, oldest first."""
        rows = self._sql.query(
            "SELECT a.decision FROM graphkit_approvals a JOIN graphkit_cleared cl "
            "ON cl.approval_id = a.approval_id WHERE a.call_key = ? AND a.thread_id = ? "
            "AND a.kind = 'suspension' AND a.status = 'approved' ORDER BY a.decided_at",
            (call_key, thread_id))
        return [(loads(r[0]) or {}).get("data") for r in rows]

    def save_once(self, call_key: str, results: Mapping[str, Any]) -> dict[str, Any]:
        """`ctx.once` results of a call, kept where no client can wipe them (durably: the side
        effect they stand for happened); returns them as every later run reads them."""
        text = once_text(results)
        with self._sql.durable():
            self._sql.execute("UPDATE graphkit_calls SET once_results = ? WHERE call_key = ?",
                              (text, call_key))
        return once_values(text)
