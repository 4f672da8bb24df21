"""Per-thread leases (one process advances a thread at a time), the runs they name, and the
workers' ready queue of runs whose decisions are all taken."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from graphkit._ledger import _keeper, _schema
from graphkit._ledger._base import LedgerBase
from graphkit._ledger._rows import (
    APPROVAL_READ,
    CURRENT_RUN,
    CURRENT_RUN_OPTIONS,
    ApprovalRow,
    approval_row,
    recorded_options,
)
from graphkit._ledger._schema import (
    SERVER_AGENT,
    SERVER_THREAD,
    WAIT_SECONDS,
)
from graphkit._ledger._sql import RunBusyError, Tx, dumps
from graphkit._owner import holder_is_dead, new_owner
from graphkit.errors import GraphkitError

__all__ = ["Leases", "ReadyRun"]

logger = logging.getLogger("graphkit")

_TAKE = ("INSERT INTO graphkit_leases (thread_id, owner, expires_at) {source} "
         "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
         "expires_at = excluded.expires_at "
         "WHERE graphkit_leases.expires_at < {now} OR graphkit_leases.owner = ?")
"""Take a thread's lease (thread, owner, seconds to hold it, from `source`; then the owner) if
it is free, lapsed, or this owner's already. Expiry is the database's clock, as for every
other claim: a process whose own clock is off would take a lease another holds (helper-56)."""
_RELEASE = "DELETE FROM graphkit_leases WHERE thread_id = ? AND owner = ?"
_LATER = ("SELECT r.run_id FROM graphkit_runs r JOIN graphkit_runs me ON me.run_id = {run} "
          "AND r.thread_id = me.thread_id AND r.agent = me.agent "
          "AND r.created_at > me.created_at ORDER BY r.created_at DESC LIMIT 1")
"""The latest run its agent started on a run's thread after it (`later_run`)."""
_OWNER = "SELECT agent FROM graphkit_runs WHERE thread_id = ? ORDER BY created_at LIMIT 1"
"""The agent a thread is (the one that started its first run: a database from before threads
were one agent's may hold others' runs too)."""
_PLANNED_BY_OTHERS = ("SELECT agent_path FROM graphkit_turns WHERE thread_id = ? "
                      "AND agent_path <> ? AND substr(agent_path, 1, ?) <> ? LIMIT 1")
"""A turn of the thread another agent's model planned (its agent path is not this agent's,
nor below it): the thread is that agent's, whether or not a run of it was recorded."""
_REARM = ("ON CONFLICT (run_id) DO UPDATE SET ready_at = excluded.ready_at, "
          "claimed_by = excluded.claimed_by, claimed_until = excluded.claimed_until, "
          "continue_as = NULL, continue_for = NULL, held_back = NULL")
"""A run queued again while its row is there: ready now, under the new claim, and nothing of
an earlier continuation's (a readiness that arrives while a worker resumes it re-arms it)."""


class RunToRecord(NamedTuple):
    """A run recorded as its thread's lease is taken (`Leases._record_run`)."""

    run_id: str | None
    """None: no run is recorded, the thread's agent only checked."""
    agent: str
    options: Mapping[str, Any] | None = None
    """The options its request gave (None: none recorded, as for a client's graph input)."""


class ReadyRun(NamedTuple):
    """A run a worker claimed from the ready queue."""

    run_id: str
    ready_at: float
    thread_id: str
    leased: bool
    """Whether the claim took the run's thread lease too, for the claiming owner."""
    later_run: str | None = None
    """With `later_read`: the later run of its agent the thread went on in (`later_run`)."""
    later_read: bool = False
    """Whether `later_run` was read under the lease the claim took (SQLite: in its
    transaction, which holds the database's write lock). PostgreSQL's claim is one statement,
    whose snapshot may predate a run started and ended on the thread before the lease was
    taken (helper-36, helper-38): the resume reads it once it holds the lease."""


def busy(thread_id: str) -> RunBusyError:
    """The error of a run that found its thread held for longer than it waits."""
    here = (" of this process (a stream not read to its end holds it until it is closed: "
            "`stream.close()`)" if _keeper.KEEPER.held_here(thread_id) else "")
    return RunBusyError(f"thread {thread_id!r} is being advanced by another run{here}")


class Leases(LedgerBase):
    """Per-thread leases (one process advances a thread at a time), the runs they name, and the"""

    def _enqueue(self, tx: Tx, approval_id: str, *, held_by: str | None = None) -> str | None:
        """Hand the approval's run to the workers if nothing of it is pending any more (a
        readiness that arrives while a worker resumes the run re-arms it); the run's queue key,
        None when something is still pending. `held_by`: the caller resumes the run itself
        next, and holds it under this owner (`hold_ready`): no worker takes it unless that
        claim lapses (the caller died before the run went on)."""
        now = self._sql.now
        agent = self._sql.first_segment.format(c="a.agent_path")
        if self._sql.xact_lock is not None:
            # Deciders of one run, one after the other: the last decision of a run is taken
            # by whoever sees the others' committed. Two at once (PostgreSQL reads what was
            # committed as each statement starts) each saw the other's call pending, and
            # neither queued the run: no worker ever went on with it (helper-109).
            tx.query(f"SELECT {self._sql.xact_lock.format(key='COALESCE(run_id, ? || thread_id)')}"
                     " FROM graphkit_approvals WHERE approval_id = ?", (SERVER_THREAD, approval_id))
        # A run the LangGraph server started has no graphkit run id: its thread stands for it,
        # under a key and agent no `graphkit worker` claims (the server's queue continues it).
        rows = tx.query(
            "INSERT INTO graphkit_ready (run_id, agent, thread_id, ready_at, claimed_by, "
            f"claimed_until) SELECT COALESCE(a.run_id, ? || a.thread_id), CASE WHEN a.run_id "
            f"IS NULL THEN ? || {agent} ELSE {agent} END, a.thread_id, {now}, ?, {now} + ? "
            "FROM graphkit_approvals a WHERE a.approval_id = ? AND NOT EXISTS ("
            "SELECT 1 FROM graphkit_approvals p WHERE p.status = 'pending' AND "
            "((a.run_id IS NOT NULL AND p.run_id = a.run_id) OR "
            "(a.run_id IS NULL AND p.thread_id = a.thread_id))) "
            f"{_REARM} RETURNING run_id",
            (SERVER_THREAD, SERVER_AGENT, held_by,
             _schema.LEASE_SECONDS if held_by is not None else None, approval_id))
        if rows and held_by is None and self._sql.notify:
            tx.execute(self._sql.notify)
        return str(rows[0][0]) if rows else None

    def _hold_new_run(self, tx: Tx, run_id: str, agent: str, thread_id: str,
                      options: Mapping[str, Any], owner: str) -> None:
        """Queue a run a new message started (its decisions are in the ledger: what the message
        declined), held by `owner`, which runs it next, with the options it started with: if
        its stream is left, or its process dies, before its graph took them, a worker goes on
        as that run once the hold lapses."""
        now = self._sql.now
        tx.execute("INSERT INTO graphkit_ready (run_id, agent, thread_id, ready_at, claimed_by, "
                   f"claimed_until) VALUES (?, ?, ?, {now}, ?, {now} + ?) {_REARM}",
                   (run_id, agent, thread_id, owner, _schema.LEASE_SECONDS))
        tx.execute("UPDATE graphkit_runs SET options = ? WHERE run_id = ?",
                   (dumps(dict(options)), run_id))

    def hold_ready(self, run_id: str, owner: str) -> None:
        """A decision just queued its run held by `owner` (`_enqueue(held_by=...)`): for
        `LEASE_SECONDS` unless the caller renews it by advancing the run (`holding_ready`).
        (What is held but never advanced nor let go is forgotten, oldest first, past 10,000:
        its hold lapses as it would anyway.)"""
        self._holds[(run_id, owner)] = time.monotonic()
        if len(self._holds) > 10_000:
            del self._holds[next(iter(self._holds))]

    @contextlib.contextmanager
    def holding_ready(self, run_id: str, owner: str) -> Iterator[None]:
        """While the body advances the run, renew the hold a decision took on it (if it took
        one): entered with the thread's lease, and let go with it, also when the stream that
        entered it is dropped unread (the hold then lapses, and a worker takes the run)."""
        held_at = self._holds.get((run_id, owner))
        if held_at is None:
            yield
            return
        if time.monotonic() - held_at > _schema.LEASE_SECONDS / 3:
            # the keeper's first renewal comes up to a third of a lease from now: a hold this
            # old could lapse before it (a worker would take the run mid-advance)
            self._renew_ready(run_id, owner)
        _keeper.KEEPER.hold(self, ("ready", run_id), owner, _schema.LEASE_SECONDS)
        try:
            yield
        finally:
            _keeper.KEEPER.drop(("ready", run_id), owner)
            self._holds.pop((run_id, owner), None)

    def let_go(self, run_id: str, owner: str) -> None:
        """The run its caller held (`hold_ready`) went on (to its end, or to its next pause):
        the queue forgets it, unless another decision made it ready again meanwhile (that one
        took the claim back for the workers). Costs no statement where nothing was held; a
        hold whose caller failed, or never advanced the run, is left to lapse instead."""
        if self._holds.pop((run_id, owner), None) is None:
            return
        _keeper.KEEPER.drop(("ready", run_id), owner)
        self._sql.execute("DELETE FROM graphkit_ready WHERE run_id = ? AND claimed_by = ?",
                          (run_id, owner))

    def next_ready(self, owner: str, agent: str, *, lease: bool = False) -> ReadyRun | None:
        """Claim the oldest run of `agent` the workers may resume (and whose claim is not
        held), with the database's own locking; the claim is renewed while held. With `lease`,
        take the run's thread lease for `owner` too if it is free (`ReadyRun.leased`), in the
        same statement on PostgreSQL: `done_ready` or `retry_ready` release both."""
        now = self._sql.now
        claim = (f"UPDATE graphkit_ready SET claimed_by = ?, claimed_until = {now} + ? "
                 "WHERE run_id = (SELECT run_id FROM graphkit_ready WHERE agent = ? AND "
                 f"(claimed_until IS NULL OR claimed_until < {now}) ORDER BY ready_at LIMIT 1"
                 f"{self._sql.skip_locked}) RETURNING run_id, ready_at, thread_id")
        params: tuple[object, ...] = (owner, _schema.LEASE_SECONDS, agent)
        take = (owner, _schema.LEASE_SECONDS, owner)
        if not lease:
            rows = [(*r, False, None, False) for r in self._sql.query(claim, params)]
        elif self._sql.writes_with:
            taken = self._take_sql(f"SELECT thread_id, ?, {now} + ? FROM c")
            rows = [(*r, None, False) for r in self._sql.query(
                f"WITH c AS ({claim}), l AS ({taken}"
                " RETURNING 1) SELECT run_id, ready_at, thread_id, EXISTS (SELECT 1 FROM l) "
                "FROM c", (*params, *take))]
        else:
            with self._sql.transaction() as tx:
                rows = tx.query(claim, params)
                if rows:
                    leased = tx.execute(self._take_sql(), (rows[0][2], *take)) == 1
                    later = tx.query(_LATER.format(run="?"), (rows[0][0],)) if leased else []
                    rows = [(*rows[0], leased, later[0][0] if later else None, leased)]
        if not rows:
            return None
        ready_at = rows[0][1]
        if not isinstance(ready_at, int | float) or not math.isfinite(ready_at):
            self._repair_ready(str(rows[0][0]), owner, str(rows[0][2]) if rows[0][3] else None)
            return None
        ready = ReadyRun(str(rows[0][0]), float(ready_at), str(rows[0][2]), bool(rows[0][3]),
                         None if rows[0][4] is None else str(rows[0][4]), bool(rows[0][5]))
        _keeper.KEEPER.hold(self, ("ready", ready.run_id), owner, _schema.LEASE_SECONDS)
        if ready.leased:
            _keeper.KEEPER.hold(self, ("thread", ready.thread_id), owner, _schema.LEASE_SECONDS)
        return ready

    def _repair_ready(self, run_id: str, owner: str, thread_id: str | None) -> None:
        """A queued run whose `ready_at` is no number (a row written by hand: text, a blob,
        NaN) is made ready now and handed back, its thread's lease released: read as it was,
        it crashed the claim with the lease taken and never renewed, or, never equal to
        itself, was never taken off the queue, and a worker resumed it in a loop (helper-59)."""
        logger.warning("ready queue: run %s had no time it became ready; it is ready now",
                       run_id)
        if thread_id is not None:
            self._release(thread_id, owner)
        self._sql.execute(
            f"UPDATE graphkit_ready SET ready_at = {self._sql.now}, claimed_by = NULL, "
            "claimed_until = NULL WHERE run_id = ? AND claimed_by = ?", (run_id, owner))

    def take_ready(self, run_id: str, owner: str, *, continue_as: str, continue_for: str
                   ) -> float | None:
        """Claim this one run of a LangGraph server if it is ready and nobody holds it (the
        inbox mounted in the server hands it to the server's own queue, as `continue_as`, the
        reviewer its sign-in vouched for, whose decision of approval `continue_for` made it
        ready: its retries continue it as them too); its `ready_at`, else None. Two reviewers
        who decide at once get one claim between them."""
        now = self._sql.now
        # Nothing of the run (for a server's run: of its thread) may wait on a decision now: a
        # queue entry left by a continuation that failed must not continue a later turn.
        rows = self._sql.query(
            f"UPDATE graphkit_ready SET claimed_by = ?, claimed_until = {now} + ?, "
            "continue_as = ?, continue_for = ? "
            f"WHERE run_id = ? AND (claimed_until IS NULL OR claimed_until < {now}) "
            "AND NOT EXISTS (SELECT 1 FROM graphkit_approvals p WHERE p.status = 'pending' "
            "AND (p.run_id = graphkit_ready.run_id OR (graphkit_ready.run_id = ? || "
            "graphkit_ready.thread_id AND p.thread_id = graphkit_ready.thread_id))) "
            "RETURNING ready_at", (owner, _schema.LEASE_SECONDS, continue_as, continue_for,
                                   run_id, SERVER_THREAD))
        return float(rows[0][0]) if rows else None

    def server_runs_due(self) -> list[tuple[str, str, str, str]]:
        """(queue key, thread, reviewer, approval) of the LangGraph server's runs the mounted inbox
        continues whose claim is free: a continuation that did not start is tried again
        after its pause, as the reviewer it was first started as. A run another door made
        ready (`Inbox`, the CLI: their `decided_by` is their caller's word) is not here: no
        sign-in vouches for anyone to run it as."""
        rows = self._sql.query(
            "SELECT run_id, thread_id, continue_as, continue_for FROM graphkit_ready "
            "WHERE agent LIKE ? AND continue_as IS NOT NULL AND "
            f"(claimed_until IS NULL OR claimed_until < {self._sql.now}) ORDER BY ready_at",
            (SERVER_AGENT + "%",))
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def approvals_of_run(self, run_id: str) -> list[ApprovalRow]:
        """Every approval and suspension filed under the run."""
        rows = self._sql.query(f"SELECT {APPROVAL_READ} FROM graphkit_approvals "
                               "WHERE run_id = ?", (run_id,))
        return [approval_row(r) for r in rows]

    def queued(self, run_id: str) -> bool:
        """Whether the run waits in the queue to be continued."""
        return self.queue_entry(run_id)[0]

    def queue_entry(self, run_id: str) -> tuple[bool, str | None, str | None]:
        """Of a run: whether it waits in the queue to be continued; for a LangGraph server's
        run, the approval whose decision in the mounted inbox it is continued for (None:
        nobody continues it there; another door made it ready), and why its last attempt did
        not start (None: it did not fail)."""
        rows = self._sql.query("SELECT continue_as, continue_for, held_back FROM graphkit_ready "
                               "WHERE run_id = ?", (run_id,))
        if not rows:
            return False, None, None
        continue_as, continue_for, why = rows[0]
        return True, continue_for if continue_as is not None else None, why

    def done_ready(self, run_id: str, owner: str, ready_at: float, *,
                   thread_id: str | None = None) -> None:
        """The run was resumed: forget it, unless it became ready again meanwhile. With
        `thread_id`, the thread lease its claim took (`next_ready(lease=True)`) is released
        too (on PostgreSQL in the same statement)."""
        _keeper.KEEPER.drop(("ready", run_id), owner)
        done = ("DELETE FROM graphkit_ready WHERE run_id = ? AND claimed_by = ? "
                "AND ready_at = ?")
        params: tuple[object, ...] = (run_id, owner, ready_at)
        if thread_id is not None:
            _keeper.KEEPER.drop(("thread", thread_id), owner)
            if self._sql.writes_with:
                done, params = f"WITH l AS ({_RELEASE}) {done}", (thread_id, owner, *params)
            else:
                self._release(thread_id, owner)
        if self._sql.execute(done, params) == 1:
            return
        self._sql.execute("UPDATE graphkit_ready SET claimed_by = NULL, claimed_until = NULL "
                          "WHERE run_id = ? AND claimed_by = ?", (run_id, owner))

    def retry_ready(self, run_id: str, owner: str, *, thread_id: str | None = None,
                    why: str | None = None) -> None:
        """The resume failed (`why`, as a reviewer may read it): hand the run back to the
        queue, to be tried again after a growing pause (a transient failure must not strand
        it); with `thread_id`, release the thread lease its claim took."""
        _keeper.KEEPER.drop(("ready", run_id), owner)
        if thread_id is not None:
            _keeper.KEEPER.drop(("thread", thread_id), owner)
            self._release(thread_id, owner)
        self._sql.execute(
            "UPDATE graphkit_ready SET claimed_by = NULL, attempts = attempts + 1, "
            f"held_back = ?, claimed_until = {self._sql.now} + ? "
            "WHERE run_id = ? AND claimed_by = ?",
            (why, min(300.0, 2.0 ** min(self._attempts(run_id), 9)), run_id, owner))

    def forget_ready(self, thread_id: str, *, served_only: bool = False) -> None:
        """The thread was deleted: none of its runs will be continued (a resume of a thread
        without checkpoints fails, and would be tried again for as long as the queue lives).
        `served_only`: only the LangGraph server's runs (their thread lives on the server)."""
        where = " AND agent LIKE ?" if served_only else ""
        self._sql.execute(f"DELETE FROM graphkit_ready WHERE thread_id = ?{where}",
                          (thread_id, SERVER_AGENT + "%") if served_only else (thread_id,))

    def server_approvals(self, approval_ids: Iterable[str]) -> set[str]:
        """Those of `approval_ids` that a LangGraph server's served agents asked (a graph
        driven directly on a shared database, or embedded in another under its own
        checkpointer, asks in threads the server never kept, maybe under the same id)."""
        return self._marked("s.approval_id", approval_ids)

    def server_threads(self, thread_ids: Iterable[str]) -> set[str]:
        """Those of `thread_ids` in which the served agents asked something."""
        return self._marked("a.thread_id", thread_ids)

    def _marked(self, column: str, keys: Iterable[str]) -> set[str]:
        """Those of `keys` (values of `column`) of a marked approval."""
        ids = sorted(set(keys))
        found: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            found.update(str(r[0]) for r in self._sql.query(
                f"SELECT DISTINCT {column} FROM graphkit_server_approvals s JOIN "
                "graphkit_approvals a ON a.approval_id = s.approval_id "
                f"WHERE {column} IN ({marks})", tuple(chunk)))
        return found

    def _attempts(self, run_id: str) -> int:
        rows = self._sql.query("SELECT attempts FROM graphkit_ready WHERE run_id = ?",
                               (run_id,))
        return int(rows[0][0]) if rows else 0

    def _renew_ready(self, run_id: str, owner: str) -> None:
        self._sql.execute_apart(
            f"UPDATE graphkit_ready SET claimed_until = {self._sql.now} + ? "
            "WHERE run_id = ? AND claimed_by = ?", (_schema.LEASE_SECONDS, run_id, owner))

    def _take_sql(self, source: str | None = None) -> str:
        """`_TAKE` in this database's words, its rows from `source` (default: one row given)."""
        now = self._sql.now
        return _TAKE.format(source=source or f"VALUES (?, ?, {now} + ?)", now=now)

    def _take(self, thread_id: str, owner: str, run: RunToRecord | None = None, *,
              follows: bool = False) -> bool:
        """Take the thread's lease if it is free (or this owner's); with `run` (its id and
        agent, and its request's options), record the run in the same transaction: a run is
        known once it holds its thread, and one that never got it leaves no record (`follows`:
        `_record_run`)."""
        take = self._take_sql()
        params = (thread_id, owner, _schema.LEASE_SECONDS, owner)
        if run is None:
            return self._sql.execute(take, params) == 1 or self._take_from_dead(
                thread_id, owner)[0]
        recorded = False
        with self._sql.transaction() as tx:
            taken = tx.execute(take, params) == 1
            if taken:
                recorded = self._record_run(tx, run, thread_id, follows=follows)
        if not taken:
            taken, recorded = self._take_from_dead(thread_id, owner, run, follows=follows)
        if recorded and run.run_id is not None:  # (committed)
            if len(self._recorded) >= 10_000:
                del self._recorded[next(iter(self._recorded))]
            self._recorded[run.run_id] = (thread_id, run.agent)
        return taken

    def _record_run(self, tx: Tx, run: RunToRecord, thread_id: str, *,
                    follows: bool = False) -> bool:
        """Whether the run is recorded now (not before: a run id is recorded once). A thread
        is one agent's, the one that started its first run: a run of another agent on it is
        refused (`GraphkitError`, nothing recorded, the lease not taken), as two graphs would
        read one state, and neither's calls nor decisions would be the other's. `follows`: a
        run is recorded only on a thread where its agent has runs already, none recorded on
        a thread with no runs (a message a client gave the graph itself: `LeasedGraph`). No
        `run_id`: nothing is recorded, the thread's agent only checked. The run's request
        options are recorded with it: the ones its gates obey, whatever a client writes into
        the state's copy (helper-122); a run that gives none (a client's graph input) takes
        those of the run it follows: a system message written with loose options while a call
        waited started a run whose options were the client's (helper-123)."""
        run_id, agent = run.run_id, run.agent
        options = dumps(dict(run.options)) if run.options is not None else None
        # A thread's runs start one at a time (under its lease), each after the one before
        # it: later than it, even within the clock's tick (SQLite's is a millisecond).
        # (`follows`: where the agent has runs; else where the thread is the agent's or no one's)
        # (and no other agent's model planned a turn there: a thread only a graph ran, a
        # LangGraph server's, records no run, and another served graph went on in it: helper-115)
        owned, params = (("EXISTS (SELECT 1 FROM graphkit_runs WHERE thread_id = ? AND agent = ?)",
                          (thread_id, agent)) if follows else
                         (f"COALESCE(({_OWNER}), ?) = ?", (thread_id, agent, agent)))
        others = (thread_id, agent, len(agent) + 1, f"{agent}/")
        if run_id is not None and tx.execute(
                "INSERT INTO graphkit_runs (run_id, thread_id, agent, created_at, options) "
                f"SELECT ?, ?, ?, {self._sql.greatest}({self._sql.now}, COALESCE(("
                "SELECT MAX(created_at) FROM graphkit_runs WHERE thread_id = ?), 0) + 0.00001)"
                f", COALESCE(?, ({CURRENT_RUN_OPTIONS})) WHERE {owned} AND NOT EXISTS "
                f"({_PLANNED_BY_OTHERS}) ON CONFLICT (run_id) DO NOTHING",
                (run_id, thread_id, agent, thread_id, options, thread_id, agent, *params,
                 *others)) == 1:
            return True
        first = tx.query(_OWNER, (thread_id,))
        owner = str(first[0][0]) if first else None
        if owner is None or owner == agent:
            planned = tx.query(_PLANNED_BY_OTHERS, others)
            owner = str(planned[0][0]).split("/")[0] if planned else owner
        if owner is not None and owner != agent:
            msg = (f"thread {thread_id!r} belongs to agent {owner!r}, not {agent!r}: "
                   "start this agent's conversation under another thread id")
            raise GraphkitError(msg)
        return False

    def forget_run(self, run_id: str) -> None:
        """Drop the record of a run refused before it ran (its lease is released next)."""
        self._recorded.pop(run_id, None)
        self._sql.execute("DELETE FROM graphkit_runs WHERE run_id = ?", (run_id,))

    def run(self, run_id: str) -> tuple[str, str] | None:
        """The thread and agent of a run this database recorded, or None."""
        known = self._recorded.get(run_id)
        if known is not None:
            return known
        rows = self._sql.query("SELECT thread_id, agent FROM graphkit_runs WHERE run_id = ?",
                               (run_id,))
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def later_run(self, run_id: str) -> str | None:
        """The latest run of the same agent this database recorded on the run's thread after
        it, if any (None too for a run it never recorded: a LangGraph server's, a graph driven
        directly)."""
        rows = self._sql.query(_LATER.format(run="?"), (run_id,))
        return str(rows[0][0]) if rows else None

    def current_run(self, thread_id: str, agent: str) -> str | None:
        """The last run of `agent` this database recorded on the thread (the one a decision
        may take anything waiting in it for), or None if it recorded none."""
        return self.current_run_and_options(thread_id, agent)[0]

    def current_run_and_options(self, thread_id: str, agent: str
                                ) -> tuple[str | None, dict[str, Any] | None]:
        """`current_run`, and the options its request recorded with it (`run_options`)."""
        rows = self._sql.query(CURRENT_RUN, (thread_id, agent))
        return (str(rows[0][0]), recorded_options(rows[0][1])) if rows else (None, None)

    def run_options(self, run_id: str) -> dict[str, Any] | None:
        """The options the run's request gave, as recorded with the run (an Agent API's run;
        a run a new message started, as it was queued: `_hold_new_run`), else None (a run
        recorded before runs kept them, or one a client's graph input started)."""
        rows = self._sql.query("SELECT options FROM graphkit_runs WHERE run_id = ?", (run_id,))
        return recorded_options(rows[0][0]) if rows else None

    def _take_from_dead(self, thread_id: str, owner: str,
                        run: RunToRecord | None = None, *, follows: bool = False
                        ) -> tuple[bool, bool]:
        """A lease whose holder provably no longer runs is free now, not when it expires: a
        worker restarted after a crash need not wait. With `run`, recorded in the same
        transaction (a run refused there leaves the lease as it found it). Whether the lease
        was taken, and the run recorded now."""
        rows = self._sql.query("SELECT owner FROM graphkit_leases WHERE thread_id = ?",
                               (thread_id,))
        if not rows or not holder_is_dead(str(rows[0][0])):
            return False, False
        recorded = False
        with self._sql.transaction() as tx:
            taken = tx.execute(
                f"UPDATE graphkit_leases SET owner = ?, expires_at = {self._sql.now} + ? "
                "WHERE thread_id = ? AND owner = ?",
                (owner, _schema.LEASE_SECONDS, thread_id, rows[0][0])) == 1
            if taken and run is not None:
                recorded = self._record_run(tx, run, thread_id, follows=follows)
        return taken, recorded

    def _renew(self, thread_id: str, owner: str) -> bool:
        """Extend a lease this owner still holds; never bring back one it released or another
        process took over (False)."""
        renewed = self._sql.execute_apart(
            f"UPDATE graphkit_leases SET expires_at = {self._sql.now} + ? "
            "WHERE thread_id = ? AND owner = ?", (_schema.LEASE_SECONDS, thread_id, owner))
        return renewed == 1

    def _release(self, thread_id: str, owner: str) -> None:
        self._sql.execute(_RELEASE, (thread_id, owner))

    @contextlib.contextmanager
    def lease(self, thread_id: str, *, wait: float = WAIT_SECONDS,
              run: RunToRecord | None = None, held: str | None = None) -> Iterator[str]:
        """Hold the thread while the body advances it; renewed in the background. `run` (a
        new run's id and agent) is recorded as the lease is taken. `held`: the owner that
        holds it already (a worker's claim took it with the run), and releases it."""
        if held is not None:
            yield held
            return
        owner = self.hold_thread(thread_id, wait=wait, run=run)
        try:
            yield owner
        finally:
            self.release_thread(thread_id, owner)

    def hold_thread(self, thread_id: str, *, wait: float = WAIT_SECONDS,
                    run: RunToRecord | None = None, follows: bool = False) -> str:
        """Take the thread's lease, waiting up to `wait` seconds for its holder to let it go
        (else `RunBusyError`), and have it renewed until `release_thread`; its owner token.
        (`lease`, for a body that holds it from start to end; `run`, `follows`: `_take`.)"""
        owner = new_owner()
        deadline = time.monotonic() + wait
        pause = 0.005
        while not self._take(thread_id, owner, run, follows=follows):
            if time.monotonic() >= deadline:
                raise busy(thread_id)
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        _keeper.KEEPER.hold(self, ("thread", thread_id), owner, _schema.LEASE_SECONDS)
        return owner

    def release_thread(self, thread_id: str, owner: str) -> None:
        _keeper.KEEPER.drop(("thread", thread_id), owner)
        self._release(thread_id, owner)
