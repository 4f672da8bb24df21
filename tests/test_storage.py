"""Durable runs: SQLite files shared by real processes, snapshots, storage errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from graphkit import GraphkitError, SnapshotNotFoundError
from tests.helpers import agent_with, call, turn

ROOT = Path(__file__).resolve().parent.parent


def run(db: str, log: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.xproc_agent", db, str(log), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_pause_in_one_process_decide_in_others(durable_url: str, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    started = run(durable_url, log, "start")
    assert started["finish_reason"] == "suspended"
    assert started["pending"] == ["c2", "c3"]
    run_id = started["run_id"]

    second = run(durable_url, log, "approve", run_id, "c3")
    assert second["finish_reason"] == "suspended" and second["pending"] == ["c2"]
    third = run(durable_url, log, "decline", run_id, "c2")
    assert third["finish_reason"] == "stop" and third["text"] == "Finished."

    seen = events(log)
    predicates = [e["command"] for e in seen if e["event"] == "predicate"]
    ran = [e["command"] for e in seen if e["event"] == "ran"]
    assert predicates == ["ls", "rm -r old", "rm -r tmp"]  # once per call, in all processes
    assert ran == ["ls", "rm -r tmp"]  # the approved call once, the declined one never


def test_suspension_paused_in_one_process_resumes_in_another(durable_url: str,
                                                              tmp_path: Path) -> None:
    log = tmp_path / "wx.jsonl"
    started = run(durable_url, log, "wx-start")
    assert started["finish_reason"] == "suspended" and started["pending"] == ["w1"]
    final = run(durable_url, log, "wx-resume", started["run_id"], "Lyon")
    assert final["finish_reason"] == "stop" and final["text"] == "Sunny."
    assert [e["resume"] for e in events(log)] == ["None", "city='Lyon'"]


def test_supervisor_paused_in_one_process_is_approved_in_another(durable_url: str,
                                                                   tmp_path: Path) -> None:
    log = tmp_path / "sup.jsonl"
    log.touch()
    started = run(durable_url, log, "sup-start")
    assert started["finish_reason"] == "suspended" and started["pending"] == ["fu7"]
    assert events(log) == []
    final = run(durable_url, log, "sup-approve", started["run_id"], "fu7")
    assert final["finish_reason"] == "stop" and final["text"] == "User 7 is John."
    assert [e["command"] for e in events(log)] == ["find 7"]


def test_snapshot_is_json_serialisable(sqlite_url: str) -> None:
    agent, _ = agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")), "ok"],
                          checkpointer=sqlite_url)
    result = agent.generate("go")
    snapshot = agent.snapshot(run_id=result.run_id)
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert snapshot["status"] == "suspended" and snapshot["awaiting_approval"] is True
    assert snapshot["pending_approvals"][0]["tool_call_id"] == "c1"
    assert snapshot["messages"][0]["data"]["content"] == "go"


def test_memory_runs_are_not_found_elsewhere_with_a_helpful_message() -> None:
    agent, _ = agent_with(["hi"])
    with pytest.raises(SnapshotNotFoundError) as missing:
        agent.snapshot(run_id="from-another-process")
    text = str(missing.value)
    assert "snapshot not found" in text and "sqlite:///" in text


def test_checkpointer_instance_is_accepted(tmp_path: Path) -> None:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite3.connect(tmp_path / "own.db", check_same_thread=False))
    agent, ledger = agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                                "ok"], checkpointer=saver)
    result = agent.generate("go")
    assert agent.approve_tool_call_generate(run_id=result.run_id).text == "ok"
    assert ledger.names() == ["pay"]


def test_unsupported_checkpointer_url_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported checkpointer"):
        agent_with(["hi"], checkpointer="redis://localhost")


async def test_async_runs_on_sqlite(sqlite_url: str) -> None:
    agent, ledger = agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                                "ok"], checkpointer=sqlite_url)
    result = await agent.agenerate("go")
    assert result.finish_reason == "suspended"
    assert (await agent.aapprove_tool_call_generate(run_id=result.run_id)).text == "ok"
    assert ledger.names() == ["pay"]


def test_the_one_statement_claim_admits_exactly_what_the_ledger_allows(durable_url: str
                                                                       ) -> None:
    """The tools node's fast path claims a call in one UPDATE: only for the thread, agent
    tool and call id planned, and for a gated call only once approved and cleared by a gate; it
    returns the arguments the call runs with (as planned, or as cleared), never any a task
    carries. Anything else falls back to the step-by-step checks, which say why."""
    from graphkit._ledger import ApprovalRow, CallRow, Clearance
    from graphkit._storage import open_storage

    ledger = open_storage(durable_url).ledger
    planned, edited = {"amount": 1}, {"amount": 2}
    ledger.register(
        calls=[CallRow(call_key="free", thread_id="t", agent_path=["a", "b"], tool_name="pay",
                       args_digest="d1", approval_id=None, args=planned, tool_call_id="c1"),
               CallRow(call_key="gated", thread_id="t", agent_path=["a"], tool_name="pay",
                       args_digest="d1", approval_id="apr1", args=planned,
                       tool_call_id="c2")],
        approvals=[ApprovalRow(approval_id="apr1", thread_id="t", kind="approval",
                               call_key="gated", agent_path=["a"], tool_name="pay",
                               args_digest="d1")])

    def claim(key: str, owner: str, **change: Any) -> Any:
        fields: dict[str, Any] = {"thread_id": "t", "agent_path": ["a", "b"] if key == "free"
                                  else ["a"], "tool_name": "pay",
                                  "tool_call_id": "c1" if key == "free" else "c2"}
        return ledger.start_admitted(key, owner, **{**fields, **change})

    assert claim("free", "x", thread_id="other") is None
    assert claim("free", "x", agent_path=["a"]) is None
    assert claim("free", "x", tool_name="refund") is None
    assert claim("free", "x", tool_call_id="c2") is None  # another call's id
    assert claim("nowhere", "x") is None
    won = claim("free", "me")
    assert won is not None and won.args == planned and won.digest == "d1"
    assert claim("free", "again") is None  # once
    assert claim("gated", "x") is None  # pending
    decision = {"type": "approve", "decided_by": "alice", "run_digest": "d2"}
    assert ledger.decide("apr1", thread_id="t", args_digest="d1", status="approved",
                         decision=decision, audits=[])
    assert claim("gated", "x") is None  # claimed, not yet verified by a gate
    ledger.clear({"apr1": Clearance("d2", edited)})
    won = claim("gated", "me")
    assert won is not None and won.args == edited and won.digest == "d2"
    for key in ("free", "gated"):  # (the claims are kept renewed until given back: a claim
        ledger.release(key, "me")  # left held was renewed through every later test)


def test_a_sqlite_saver_instance_keeps_the_ledger_in_its_file(tmp_path: Path) -> None:
    """A restarted process with LangGraph's SqliteSaver passed as an instance: graphkit's
    ledger lives in the same file, so a call that ran is known to have run (replaying the old
    paused checkpoint, Studio's time travel, does not run it again) and a pending approval is
    still the ledger's."""
    import contextlib
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    def open_agent(ran: Any = None) -> Any:
        saver = SqliteSaver(sqlite3.connect(tmp_path / "own.db", check_same_thread=False))
        return agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                           "ok"], ran, checkpointer=saver, name="billing")

    agent, ran = open_agent()
    result = agent.generate("go")
    paused = agent.graph.get_state({"configurable": {"thread_id": result.thread_id}}).config
    pending_id = result.pending_approvals[0].id
    assert agent.approve_tool_call_generate(run_id=result.run_id).text == "ok"
    assert ran.names() == ["pay"]

    restarted, _ = open_agent(ran)  # a new process: new connection, new ledger object
    row = restarted._storage.ledger.approval(pending_id)
    assert row is not None and row.status == "approved"
    with contextlib.suppress(Exception):
        restarted.graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}),
                               {"configurable": {**paused["configurable"]}})
    assert ran.names() == ["pay"], "the payment ran again after a restart"


@pytest.mark.parametrize("lend", ["pool", "connection"])
def test_a_postgres_saver_instance_keeps_the_ledger_in_its_database(postgres_url: str,
                                                                     lend: str) -> None:
    """LangGraph's PostgresSaver passed as an instance, over a pool or one connection: the
    ledger is in the same database, so another process's agent knows what ran."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0,
                              "row_factory": dict_row}
    opened: list[Any] = []

    def open_agent(ran: Any = None) -> Any:
        conn: Any = (ConnectionPool(postgres_url, kwargs=kwargs, open=True) if lend == "pool"
                     else Connection.connect(postgres_url, **kwargs))
        opened.append(conn)
        saver = PostgresSaver(conn)
        saver.setup()
        return agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                           "ok"], ran, checkpointer=saver, name="billing")

    try:
        agent, ran = open_agent()
        result = agent.generate("go")
        pending_id = result.pending_approvals[0].id
        other, _ = open_agent(ran)
        row = other._storage.ledger.approval(pending_id)
        assert row is not None and row.status == "pending"
        # the run id is found in the shared ledger (the store is each agent's own memory)
        assert other.approve_tool_call_generate(run_id=result.run_id).text == "ok"
        assert ran.names() == ["pay"]
        approved = agent._storage.ledger.approval(pending_id)
        assert approved is not None and approved.status == "approved"
    finally:
        for conn in opened:
            conn.close()


@pytest.mark.parametrize("lend", ["pool", "connection"])
async def test_an_async_postgres_saver_instance_keeps_the_ledger_in_its_database(
        postgres_url: str, lend: str) -> None:
    """LangGraph's AsyncPostgresSaver as an instance: the ledger goes on a small pool of the
    same database, so another process's agent knows what waits and what ran."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0,
                              "row_factory": dict_row}
    opened: list[Any] = []

    async def open_agent(ran: Any = None) -> Any:
        if lend == "pool":
            conn: Any = AsyncConnectionPool(postgres_url, kwargs=kwargs, open=False)
            await conn.open()
        else:
            conn = await AsyncConnection.connect(postgres_url, **kwargs)
        opened.append(conn)
        saver = AsyncPostgresSaver(conn)
        await saver.setup()
        return agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                           "ok"], ran, checkpointer=saver, name="billing")

    agents: list[Any] = []
    try:
        agent, ran = await open_agent()
        agents.append(agent)
        result = await agent.agenerate("go")
        pending_id = result.pending_approvals[0].id
        other, _ = await open_agent(ran)
        agents.append(other)
        row = await asyncio.to_thread(other._storage.ledger.approval, pending_id)
        assert row is not None and row.status == "pending"
    finally:
        for conn in opened:
            await conn.close()
        for each in agents:  # the ledger's own small pool
            each._storage.ledger._sql.pool.close()


def test_opening_a_postgres_ledger_whose_tables_are_made_locks_no_table(postgres_url: str
                                                                       ) -> None:
    """Every process that opened the ledger (each CLI command, `Inbox`, worker) ran its
    schema's `CREATE INDEX IF NOT EXISTS` in one transaction, which takes a SHARE lock on each
    table, to its end: it waited on a writer's transaction, which then waited on it, and
    PostgreSQL failed one of them as a deadlock, a worker's resume among them (helper-142).
    A ledger whose tables this version of graphkit made takes no lock on them as it opens."""
    from psycopg import Connection

    from graphkit import Inbox

    agent, _ = agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "A"}}, "c1")),
                           "done"], checkpointer=postgres_url, name="billing")
    agent.generate("pay")
    with Connection.connect(postgres_url) as writer:  # a transaction that writes the calls
        writer.execute("UPDATE graphkit_calls SET outcome = outcome")
        opened: list[Any] = []
        opener = threading.Thread(target=lambda: opened.append(Inbox(postgres_url)),
                                  daemon=True)
        opener.start()
        opener.join(30)
        blocked = opener.is_alive()
        writer.execute("UPDATE graphkit_approvals SET status = status")
        writer.commit()
    opener.join(30)
    assert not blocked, "opening the ledger waited on a writer's transaction"
    assert len(opened[0].pending()) == 1
    opened[0]._storage.ledger._sql.pool.close()


def test_lease_renewals_do_not_wait_on_a_single_connection_savers_lock(postgres_url: str
                                                                       ) -> None:
    """A PostgresSaver over one connection lends it to the ledger under the saver's lock; a
    caller may hold that lock for as long as it likes (a checkpoint list read lazily). The
    lease keeper renews on a connection of its own, so this process's leases do not lapse
    (and another process take its thread) meanwhile."""
    import threading

    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    conn = Connection.connect(postgres_url, autocommit=True, prepare_threshold=0,
                              row_factory=dict_row)
    try:
        saver = PostgresSaver(conn)
        saver.setup()
        agent, _ = agent_with(["ok"], checkpointer=saver, name="billing")
        ledger = agent._storage.ledger

        def expiry() -> float:
            return float(ledger._sql.query(
                "SELECT expires_at FROM graphkit_leases WHERE thread_id = 't1'")[0][0])

        with ledger.lease("t1") as owner:
            before = expiry()
            held, release = threading.Event(), threading.Event()

            def hold_the_savers_lock() -> None:
                with saver.lock:
                    held.set()
                    release.wait(10)

            holder = threading.Thread(target=hold_the_savers_lock, daemon=True)
            holder.start()
            assert held.wait(5)
            renewer = threading.Thread(target=ledger._renew, args=("t1", owner), daemon=True)
            renewer.start()
            renewer.join(5)
            renewed = not renewer.is_alive()
            release.set()
            holder.join(5)
            assert renewed, "the lease renewal waited on the saver's lock"
            assert expiry() > before
    finally:
        conn.close()


_DURABLE_STEPS = (
    ("decided", ("UPDATE graphkit_approvals SET status = 'approved'",  # SQLite: values bound
                 "UPDATE graphkit_approvals SET status = %s, decision = %s")),  # psycopg
    ("result", ("UPDATE graphkit_calls SET executed = 'done'",
                "UPDATE graphkit_calls SET executed = %s, outcome = %s")),
    ("claimed", ("UPDATE graphkit_calls SET executed = '",
                 "UPDATE graphkit_calls SET executed = %s, claim_expires")),
    ("declined", ("UPDATE graphkit_approvals SET status = 'rejected'",)),  # by the system
)
"""The statements that record a decision, a result and an execution claim (in that order of
matching: a claim's prefix is a result's too), as SQLite's trace and psycopg show them."""


def _durable_step(words: str) -> str | None:
    """Which of the ledger's durable records a statement (its words) writes, if any."""
    return next((step for step, prefixes in _DURABLE_STEPS if words.startswith(prefixes)),
                None)


def _wal_syncs(sql: Any, monkeypatch: pytest.MonkeyPatch, log: list[str],
               then: Any = None) -> None:
    """Log "synced" each time the ledger syncs its WAL file (after `then(fd)`, if given)."""
    from graphkit._ledger import _sql

    wal = Path(sql.path + "-wal")
    real = _sql._sync_file

    def fsync(fd: int) -> None:
        if then is not None:
            then(fd)
        real(fd)
        if os.fstat(fd).st_ino == wal.stat().st_ino:
            log.append("synced")

    monkeypatch.setattr(_sql, "_sync_file", fsync)


def test_a_gated_call_is_on_disk_before_it_runs_and_checkpoints_stay_cheap(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exactly once across a power loss: the commits that record a decision, an execution
    claim and a result are on disk (the WAL fsynced, which is what synchronous=FULL adds to a
    commit) before the tool starts and before the run goes on, and in WAL mode that sync makes
    every earlier commit durable too; the rest (leases, plans, the checkpoints) stay NORMAL
    (1), whose loss only means a wait or a replay the ledger answers."""
    from graphkit import Agent, create_tool
    from graphkit.testing import ScriptedChatModel

    log: list[str] = []

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        log.append("ran")
        return "paid"

    @create_tool
    def lookup(key: str) -> str:
        """Look it up."""
        log.append("looked up")
        return "found"

    agent = Agent(name="assistant", checkpointer=sqlite_url, tools=[pay, lookup],
                  model=ScriptedChatModel([turn(call("pay", {"amount": 1}, "c1")), "done",
                                           turn(call("lookup", {"key": "k"}, "l1")), "done"]))
    first = agent.generate("pay")
    sql = agent._storage.ledger._sql
    _wal_syncs(sql, monkeypatch, log)

    def traced(statement: str) -> None:
        words = " ".join(statement.split())
        step = _durable_step(words)
        if step is not None:
            log.append(step)
        elif "synchronous" in words:
            log.append(words)

    sql.conn.set_trace_callback(traced)
    try:
        assert agent.approve_tool_call_generate(run_id=first.run_id).text == "done"
        assert log == ["decided", "synced", "claimed", "synced", "ran", "result", "synced"]
        log.clear()
        agent.generate("look it up", thread_id=first.thread_id)  # a call no one decides
        assert log == ["claimed", "looked up", "result"]  # claimed and kept, with no sync
    finally:
        sql.conn.set_trace_callback(None)
    assert sql.conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    saver_conn = agent._storage.checkpointer.conn
    assert saver_conn.execute("PRAGMA synchronous").fetchone()[0] == 1


_SYNC_ORDER_SCRIPT = """
import os, sys
from langchain_core.messages import AIMessage, ToolMessage
from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel

def reply(messages):
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("done")
    return AIMessage("", tool_calls=[{"name": "pay", "args": {"amount": 1}, "id": "p1"}])

def pay(amount: int) -> str:
    \"\"\"Pay.\"\"\"
    os.write(2, b"TOOL RUNS\\n")
    return "paid"

agent = Agent(name="p", model=ScriptedChatModel(reply), checkpointer=sys.argv[1],
              tools=[create_tool(pay, name="pay", needs_approval=True)])
first = agent.generate("go")
(pending,) = agent.pending_approvals(run_id=first.run_id)
os.write(2, b"DECIDE\\n")
agent.resolve_tool_approval(run_id=first.run_id, id=pending.id, approved=True)
os.write(2, b"RESUME\\n")
assert agent.resume(run_id=first.run_id).text == "done"
os.write(2, b"END\\n")
"""


def test_the_kernel_is_asked_to_sync_the_wal_before_a_gated_call_runs(sqlite_url: str,
                                                                        tmp_path: Path) -> None:
    """The power-loss promise, seen from outside the process: between the decision and the
    tool, and between the tool and the run's end, the process syncs the SQLite file's WAL
    (strace's record of its fsync and fdatasync calls). An earlier flush rewrote a row with
    the value it had, which SQLite writes (and syncs) not at all: no Python-side check saw it."""
    import shutil

    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace.log"
    done = subprocess.run(
        [strace, "-f", "-y", "-e", "trace=fsync,fdatasync,write", "-o", str(trace),
         sys.executable, "-c", _SYNC_ORDER_SCRIPT, sqlite_url],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    wal = sqlite_url.removeprefix("sqlite:///") + "-wal"
    steps: list[str] = []
    for line in trace.read_text().splitlines():
        for marker in ("DECIDE", "RESUME", "TOOL RUNS", "END"):
            if f'"{marker}\\n"' in line:
                steps.append(marker)
        if "sync(" in line and f"<{wal}>" in line and "resumed>" not in line:
            steps.append("synced")
    after = steps[steps.index("DECIDE"):]
    assert after[:after.index("END") + 1] == [
        "DECIDE", "synced",  # the decision
        "RESUME", "synced",  # the execution claim, before the tool starts
        "TOOL RUNS", "synced",  # the result, before the run goes on
        "END"], steps


def test_commits_that_end_together_share_one_wal_sync_outside_the_lock(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Group commit: while one WAL sync runs, the ledger (and the saver that may share its
    lock) goes on writing; every commit that ended meanwhile is covered by one next sync, and
    no `durable()` returns before a sync that began after its commit."""
    from graphkit._storage import open_storage

    sql: Any = open_storage(sqlite_url).ledger._sql
    sql.execute("CREATE TABLE t (x INTEGER)")
    syncing, release = threading.Event(), threading.Event()
    began: list[int] = []  # sync points taken when each sync began

    def first_waits(fd: int) -> None:
        began.append(sql._wal.marks)
        if len(began) == 1:
            syncing.set()
            release.wait(10)

    _wal_syncs(sql, monkeypatch, [], then=first_waits)
    done: list[int] = []

    def write(i: int) -> None:
        with sql.durable():
            sql.execute("INSERT INTO t VALUES (?)", (i,))
        done.append(i)

    first = threading.Thread(target=write, args=(0,))
    first.start()
    assert syncing.wait(10)
    others = [threading.Thread(target=write, args=(i,)) for i in range(1, 8)]
    for thread in others:
        thread.start()
    deadline = time.monotonic() + 10
    while sql._wal.marks < 8 and time.monotonic() < deadline:  # each wrote, under the lock
        time.sleep(0.005)
    assert sql._wal.marks == 8 and done == []
    release.set()
    for thread in (first, *others):
        thread.join(10)
    assert sorted(done) == list(range(8))
    assert began == [1, 8]  # the first alone, then one for the seven others


def test_a_wal_that_cannot_be_synced_apart_gets_a_full_commit(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where fsync refuses the WAL's handle (Windows wants a writable one), a sync is a
    synchronous=FULL write instead: as durable, through SQLite itself."""
    from graphkit._storage import open_storage

    sql: Any = open_storage(sqlite_url).ledger._sql

    def refused(fd: int) -> None:
        raise OSError("fsync: bad file descriptor")

    _wal_syncs(sql, monkeypatch, [], then=refused)
    seen: list[str] = []
    sql.conn.set_trace_callback(seen.append)
    try:
        for _ in range(2):
            with sql.durable():
                sql.execute("UPDATE graphkit_meta SET value = value WHERE key = 'schema'")
    finally:
        sql.conn.set_trace_callback(None)
    assert seen.count("PRAGMA synchronous=FULL") == 2 and seen[-1] == "PRAGMA synchronous=NORMAL"
    # each FULL commit writes a new value: SQLite would write (and sync) nothing for an
    # unchanged row, and the sync would not happen
    assert sql.query("SELECT value FROM graphkit_meta WHERE key = 'durable'") == [("2",)]


def _postgres_statements(monkeypatch: pytest.MonkeyPatch, log: list[str]) -> None:
    """Log the ledger's durable steps as psycopg sends them."""
    import psycopg

    execute = psycopg.Cursor.execute

    def traced(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        words = " ".join(str(query).split())
        step = _durable_step(words)
        if step is not None:
            log.append(step)
        elif words == "SET LOCAL synchronous_commit = on":
            log.append("synchronous")
        elif words.startswith("INSERT INTO graphkit_meta (key, value) VALUES ('flush '"):
            log.append("flushed")
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", traced)


def _paying_agent(url: str, log: list[str], script: Any = None) -> Any:
    from graphkit import Agent, create_tool
    from graphkit.testing import ScriptedChatModel

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        log.append("ran")
        return "paid"

    return Agent(name="assistant", checkpointer=url, tools=[pay], model=ScriptedChatModel(
        script or [turn(call("pay", {"amount": 1}, "c1")), "done"]))


def test_on_postgresql_with_asynchronous_commits_a_gated_call_is_flushed_before_it_runs(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exactly once across a power loss where the server, database or role sets
    `synchronous_commit = off` (the tests' server does): the decision, the execution claim and
    the result are each followed by a synchronous commit, which returns once the WAL up to it
    (every earlier commit's, from any connection) is flushed; checkpoints stay asynchronous."""
    log: list[str] = []
    agent = _paying_agent(postgres_url, log)
    first = agent.generate("pay")
    _postgres_statements(monkeypatch, log)
    assert agent.approve_tool_call_generate(run_id=first.run_id).text == "done"
    flush = ["synchronous", "flushed"]
    assert log == ["decided", *flush, "claimed", *flush, "ran", "result", *flush]


def test_a_postgresql_flush_covers_the_asynchronous_commits_before_it(postgres_url: str
                                                                      ) -> None:
    """The mechanism itself: after `sync`, the server's WAL is flushed past everything that
    was written before it, asynchronous commits included."""
    from graphkit._storage import open_storage

    storage = open_storage(postgres_url)
    sql: Any = storage.ledger._sql
    try:
        assert sql.query("SELECT current_setting('synchronous_commit')") == [("off",)]
        for _ in range(3):
            sql.execute("INSERT INTO graphkit_meta (key, value) VALUES ('t', '1') "
                        "ON CONFLICT (key) DO UPDATE SET value = graphkit_meta.value || '1'")
            ((written,),) = sql.query("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
            sql.sync()
            ((flushed,),) = sql.query("SELECT pg_current_wal_flush_lsn() - '0/0'::pg_lsn")
            assert flushed >= written
    finally:
        sql.pool.close()


def test_on_postgresql_with_synchronous_commits_no_flush_is_added(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where commits are synchronous (the server's default), each durable record is on disk
    as its own commit returns: nothing more is sent."""
    import psycopg

    name = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = on')
    log: list[str] = []
    agent = _paying_agent(postgres_url, log)
    first = agent.generate("pay")
    _postgres_statements(monkeypatch, log)
    assert agent.approve_tool_call_generate(run_id=first.run_id).text == "done"
    assert log == ["decided", "claimed", "ran", "result"]


def test_a_decline_of_the_systems_is_on_disk_before_the_run_goes_on(
        durable_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pending call superseded by a new message is declined by the system, and that decline
    is synced before the model answers: lost to a power cut, the approval would be pending
    again, and could be approved after the user was told the call would not run."""
    from langchain_core.messages import AIMessage, BaseMessage

    log: list[str] = []

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if len(messages) == 1:
            return turn(call("pay", {"amount": 1}, "c1"))
        log.append("model")
        return AIMessage("ok, not paying")

    agent = _paying_agent(durable_url, log, reply)
    first = agent.generate("pay")
    if durable_url.startswith("sqlite"):
        sql = agent._storage.ledger._sql
        _wal_syncs(sql, monkeypatch, log)
        sql.conn.set_trace_callback(
            lambda statement: log.extend(filter(None, [_durable_step(statement)])))
        synced = ["synced"]
    else:
        _postgres_statements(monkeypatch, log)
        synced = ["synchronous", "flushed"]
    second = agent.generate("never mind", thread_id=first.thread_id)
    assert second.text == "ok, not paying"
    assert log[:1 + len(synced)] == ["declined", *synced], log
    assert "model" in log[1 + len(synced):] and "ran" not in log


def test_a_postgresql_session_opened_after_the_setting_changed_is_asked_again(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`synchronous_commit` holds per session: one the ledger opens after it was turned off
    (`ALTER DATABASE`, `ALTER ROLE`, a restart) makes `sync` flush, though the sessions it
    asked before had it on."""
    import psycopg

    name = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = on')
    log: list[str] = []
    agent = _paying_agent(postgres_url, log, [turn(call("pay", {"amount": 1}, "c1")), "done",
                                              turn(call("pay", {"amount": 2}, "c2")), "done"])
    _postgres_statements(monkeypatch, log)
    first = agent.generate("pay")
    assert agent.approve_tool_call_generate(run_id=first.run_id).text == "done"
    assert "flushed" not in log
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" RESET synchronous_commit')  # the server's: off
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                     "%s AND pid <> pg_backend_pid()", (name,))
    for pool in {id(p): p for p in (agent._storage.ledger._sql.pool,
                                    agent._storage.checkpointer.conn)}.values():
        pool.check()  # the pool replaces the sessions that ended
    log.clear()
    second = agent.generate("pay again", thread_id=first.thread_id)
    assert agent.approve_tool_call_generate(run_id=second.run_id).text == "done"
    flush = ["synchronous", "flushed"]
    assert log == ["decided", *flush, "claimed", *flush, "ran", "result", *flush]


def test_a_set_up_raced_by_another_process_is_run_again() -> None:
    """Processes that open one new SQLite file at once each run LangGraph's (and the
    ledger's) check-then-migrate set-up; the loser finds the column the winner just added
    (`duplicate column name`, seen in CI with four workers). It runs the set-up again, which
    then finds everything done; any other error is raised."""
    import sqlite3

    from graphkit._storage import _set_up

    calls: list[int] = []

    def raced() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("duplicate column name: ttl_minutes")
        return "set up"

    assert _set_up(raced) == "set up" and len(calls) == 2

    def broken() -> str:
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _set_up(broken)


def test_processes_that_set_up_one_new_postgres_database_at_once_all_open_it(
        postgres_url: str) -> None:
    """A worker started before its database server, and the app, set up one new database at
    once: one of them failed on `type "graphkit_deliveries" already exists` (PostgreSQL's
    catalog, despite IF NOT EXISTS; seen in CI), or on LangGraph's migrations (a duplicate
    key, a deadlock of their index builds). One set-up at a time: every opener gets its
    storage."""
    import threading

    from graphkit._storage import open_storage

    start = threading.Barrier(6)
    opened: list[Any] = []
    failed: list[BaseException] = []

    def open_it() -> None:
        start.wait()
        try:
            opened.append(open_storage(postgres_url))
        except BaseException as exc:  # (reported below)
            failed.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failed, failed
    assert len(opened) == 6


def test_a_turns_plan_its_agents_queue_and_what_it_waits_on_are_read_in_one_statement(
        durable_url: str) -> None:
    """`turn_and_queue` answers what `turn`, `queue_rows` and (asked) `pending_turns`, and
    `outcomes` and `approvals` of the turn's calls answer apart (the queue in the order it
    came, another agent's, thread's or turn's entries left out, a decided approval too), on
    either engine."""
    from graphkit._ledger import ApprovalRow, CallRow, TurnReading
    from graphkit._storage import open_storage

    ledger = open_storage(durable_url).ledger
    assert ledger.turn_and_queue("t1", ["a"], "k1", "a") == TurnReading(None, [])
    assert ledger.turn_and_queue("t1", ["a"], "k1", "a", pending=True, outcomes=True,
                                 approvals=True) == TurnReading(None, [], [], {}, {})
    plan: Any = {"turn_key": "k1", "ai_message_id": "ai1", "calls": [], "error": None}
    ledger.save_turn("t1", ["a"], plan)

    def said(text: str) -> list[dict[str, Any]]:
        return [{"type": "human", "data": {"id": f"m-{text}", "content": text}}]

    ledger.enqueue("t1", "a", "ai1", said("first"))
    ledger.enqueue("t1", "a", "ai1", said("second"))
    ledger.enqueue("t1", "a/sub", "ai1", said("the subagent's"))
    ledger.enqueue("t2", "a", "ai9", said("another thread's"))

    def waits(approval_id: str, thread_id: str, path: list[str], turn: str) -> None:
        key = f"call-{approval_id}"
        ledger.register(
            calls=[CallRow(call_key=key, thread_id=thread_id, agent_path=path, tool_name="pay",
                           args_digest="d", approval_id=approval_id, turn_key=turn)],
            approvals=[ApprovalRow(approval_id=approval_id, thread_id=thread_id,
                                   kind="approval", call_key=key, agent_path=path,
                                   tool_name="pay", args_digest="d", ttl=60.0)])

    waits("apr-k1", "t1", ["a"], "k1")
    waits("apr-k0", "t1", ["a"], "k0")  # an earlier turn's
    waits("apr-sub", "t1", ["a", "sub"], "k1")
    waits("apr-t2", "t2", ["a"], "k1")
    waits("apr-decided", "t1", ["a"], "k1")
    assert ledger.decide("apr-decided", thread_id="t1", args_digest="d", status="rejected",
                         decision={"type": "reject", "decided_by": "alice"}, audits=[])
    waits("apr-approved", "t1", ["a"], "k2")  # approved, its call not started: listed apart
    waits("apr-ran", "t1", ["a"], "k2")  # approved, its call done: not listed
    for approved in ("apr-approved", "apr-ran"):
        assert ledger.decide(approved, thread_id="t1", args_digest="d", status="approved",
                             decision={"type": "approve", "decided_by": "alice"}, audits=[])
    ledger.settle({"call-apr-ran": {"content": "paid", "status": "success"}}, thread_id="t1")
    ledger.settle({"call-apr-k1": {"content": "paid", "status": "success"},
                   "call-apr-sub": {"content": "the subagent's", "status": "success"}},
                  thread_id="t1")
    ledger.settle({"call-apr-t2": {"content": "another thread's", "status": "success"}},
                  thread_id="t2")
    found = ledger.turn_and_queue("t1", ["a"], "k1", "a", pending=True, outcomes=True,
                                  approvals=True)
    assert found.plan == ledger.turn("t1", ["a"], "k1") == plan
    assert found.queue == ledger.queue_rows("t1", "a")
    assert [m["data"]["content"] for _, m, _ in found.queue] == ["first", "second"]
    assert found.pending is not None
    assert sorted(found.pending) == sorted(ledger.pending_turns("t1", ["a"])) == [
        ("apr-approved", "approval", "pay", "k2", False, "call-apr-approved", "a", False),
        ("apr-k0", "approval", "pay", "k0", True, "call-apr-k0", "a", False),
        ("apr-k1", "approval", "pay", "k1", True, "call-apr-k1", "a", False),
        ("apr-sub", "approval", "pay", "k1", True, "call-apr-sub", "a/sub", False)]
    # (a decline its gate still waits on to apply is listed too, as declined)
    ledger.mark_waiting("t1", ["a"], run_id="r1", scope="", waiting={"apr-decided": 0})
    assert ("apr-decided", "approval", "pay", "k1", False, "call-apr-decided", "a",
            True) in ledger.pending_turns("t1", ["a"])
    ledger.mark_waiting("t1", ["a"], run_id="r1", scope="", waiting={}, done=["apr-decided"])
    assert found.outcomes == ledger.outcomes(["call-apr-k1", "call-apr-decided"],
                                             thread_id="t1") == {
        "call-apr-k1": {"content": "paid", "status": "success"}, "call-apr-decided": None}
    assert found.approvals == ledger.approvals(["apr-k1", "apr-decided"])
    assert found.approvals is not None and found.approvals["apr-k1"].expires_at is not None
    assert found.approvals["apr-decided"].status == "rejected"
    assert ledger.turn_and_queue("t1", ["a"], "k2", "a") == TurnReading(
        None, ledger.queue_rows("t1", "a"))
    first = ledger.turn_and_queue("t1", ["a"], None, "a", pending=True, outcomes=True,
                                  approvals=True)  # no turn yet
    assert first == TurnReading(None, ledger.queue_rows("t1", "a"), found.pending, {}, {})


def test_writes_run_together_are_all_applied_and_one_row_written_twice_counts_twice(
        durable_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Sql.write_all` (a gate pass's writes): on PostgreSQL, writes to distinct tables go as
    one statement; two writes of one table never do (parts of one statement that wrote one
    row twice would keep only one of the writes). Either way all apply, or none."""
    from graphkit._storage import open_storage

    sql = open_storage(durable_url).ledger._sql
    sent: list[str] = []
    real = type(sql).execute
    me = threading.get_ident()  # (a keeper renewing an earlier test's claim is not counted)

    def counted(self: Any, statement: str, params: tuple[Any, ...] = ()) -> int:
        if threading.get_ident() == me:
            sent.append(statement)
        return real(self, statement, params)

    bump = ("UPDATE graphkit_meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) "
            "WHERE key = ?", ("bumps",))
    sql.execute("INSERT INTO graphkit_meta (key, value) VALUES ('bumps', '0')")
    monkeypatch.setattr(type(sql), "execute", counted)
    sql.write_all([bump, bump])  # one row, twice
    assert sql.query("SELECT value FROM graphkit_meta WHERE key = 'bumps'") == [("2",)]
    sql.write_all([("INSERT INTO graphkit_cleared (approval_id, run_digest, cleared_at) "
                    "VALUES (?, ?, 0)", ("apr-1", "d")), bump])
    assert sql.query("SELECT value FROM graphkit_meta WHERE key = 'bumps'") == [("3",)]
    assert sql.query("SELECT run_digest FROM graphkit_cleared WHERE approval_id = 'apr-1'"
                     ) == [("d",)]
    assert len(sent) == (1 if sql.writes_with else 0)  # the rest ran in transactions
    with pytest.raises(Exception, match="graphkit_no_such_table"):
        sql.write_all([bump, ("INSERT INTO graphkit_no_such_table VALUES (1)", ())])
    assert sql.query("SELECT value FROM graphkit_meta WHERE key = 'bumps'") == [("3",)]
    pool = getattr(sql, "pool", None)
    if pool is not None:
        pool.close()


def _close(agent: Any) -> None:
    """Close a PostgreSQL agent's pool now (the garbage collector would join its threads
    wherever it runs: on a later test's event loop, say)."""
    pool = getattr(agent._storage.ledger._sql, "pool", None)
    if pool is not None:
        pool.close()


def _database_reads(saver: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The reads of a thread's checkpoint that reach the saver's database (not served), by
    the checkpoint namespace they ask for."""
    from graphkit._latest import ServesLatest

    mro = type(saver).__mro__
    owner = next(k for k in mro[mro.index(ServesLatest) + 1:] if "get_tuple" in k.__dict__)
    real = owner.__dict__["get_tuple"]
    reads: list[str] = []

    def counted(self: Any, config: Any) -> Any:
        reads.append(str(config["configurable"].get("checkpoint_ns", "")))
        return real(self, config)

    monkeypatch.setattr(owner, "get_tuple", counted)
    return reads


@pytest.mark.parametrize("storage", ["memory", "sqlite", "postgres"])
def test_a_run_reads_its_threads_checkpoint_once_as_it_begins(
        storage: str, tmp_path: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a run reads as it takes the thread's lease is what its graph starts from: a new
    thread is not read at all, a resume reads the checkpoint once (the decision reads it
    before, outside the lease), and nothing served is left behind once the run stops."""
    url = {"memory": "memory", "sqlite": f"sqlite:///{tmp_path / 'r.db'}"}.get(storage) \
        or request.getfixturevalue("postgres_url")
    agent, ledger = agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                                "ok"], checkpointer=url)
    saver: Any = agent.graph.checkpointer
    reads = _database_reads(saver, monkeypatch)
    paused = agent.generate("go")
    assert paused.finish_reason == "suspended" and reads == []
    assert agent.approve_tool_call_generate(run_id=paused.run_id).text == "ok"
    assert reads == ["", ""], reads  # the decision's, the run's (not its graph's again)
    assert ledger.names() == ["pay"]
    assert not saver.__dict__.get("_served")
    _close(agent)


async def test_an_async_run_reads_its_threads_checkpoint_once_however_long_the_thread(
        durable_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Async runs too; and their graph rebuilds the messages from the saver's own query of
    their history, not by reading every checkpoint back to the last snapshot of the channel
    (BaseCheckpointSaver's async default: a round trip grew with each round on the thread)."""
    rounds = 6
    script: list[Any] = []
    for i in range(rounds):
        script += [turn(call("pay", {"amount": i, "payee": {"name": "x"}}, f"c{i}")), "ok"]
    agent, ledger = agent_with(script, checkpointer=durable_url)
    saver: Any = agent.graph.checkpointer
    reads = _database_reads(saver, monkeypatch)
    thread_id = None
    for i in range(rounds):
        reads.clear()
        paused = await agent.agenerate("go", thread_id=thread_id)
        thread_id = paused.thread_id
        assert paused.finish_reason == "suspended"
        # a new thread: none; a new message on one: the run's, served to its graph (a stopped
        # turn it supersedes is the model node's to find, on the state the graph rebuilt)
        assert reads == [""][:i], reads
        reads.clear()
        assert (await agent.aapprove_tool_call_generate(run_id=paused.run_id)).text == "ok"
        assert reads == ["", ""], reads  # the decision's, the run's
    assert ledger.names() == ["pay"] * rounds and not saver.__dict__.get("_served")
    _close(agent)


def test_a_served_checkpoint_is_never_older_than_the_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A served read goes once, to the root graph's latest checkpoint only; any write through
    the saver, and the end of the lease, drop it; a refused run leaves nothing served."""
    from graphkit._latest import ServesLatest

    agent, _ = agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                           "ok"], checkpointer=f"sqlite:///{tmp_path / 's.db'}")
    saver: Any = agent.graph.checkpointer
    assert isinstance(saver, ServesLatest)
    paused = agent.generate("go")
    config: Any = {"configurable": {"thread_id": paused.thread_id, "checkpoint_ns": ""}}
    real = saver.get_tuple(config)
    stale = real._replace(metadata={"stale": True})

    def served(cfg: Any = config) -> bool:
        return bool(saver.get_tuple(cfg).metadata == {"stale": True})

    saver.serve(config, stale)
    assert served() and not served()  # once
    for other in ({**config["configurable"], "checkpoint_ns": "worker:1"},
                  {**config["configurable"], "checkpoint_id": real.config["configurable"][
                      "checkpoint_id"]}):
        saver.serve(config, stale)
        assert saver.get_tuple({"configurable": other}) is None or not served(
            {"configurable": other})
        saver.unserve(paused.thread_id)
    saver.serve(config, stale)
    saver.put_writes(real.config, [("x", 1)], "task-1")
    assert not served()
    saver.serve(config, stale)
    saver.delete_thread("another thread")
    assert served()
    # a run refused as it begins (nothing to run on a thread with no state) leaves nothing
    saver.unserve(paused.thread_id)
    with pytest.raises(GraphkitError, match="nothing to run"):
        agent.generate(None, thread_id="no such thread")
    assert not saver.__dict__.get("_served")


@pytest.mark.parametrize("change", ["copy_thread", "prune", "delete_for_runs"])
def test_a_served_checkpoint_is_dropped_by_every_other_write_of_the_saver(
        tmp_path: Path, change: str) -> None:
    """Copying onto the thread, pruning it, deleting runs' checkpoints (which do not say their
    threads): each drops what was served, before the saver's own method runs (which a saver
    may not implement)."""
    from graphkit._latest import ServesLatest

    agent, _ = agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                           "ok"], checkpointer=f"sqlite:///{tmp_path / 's.db'}")
    saver: Any = agent.graph.checkpointer
    assert isinstance(saver, ServesLatest)
    thread_id = agent.generate("go").thread_id
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    stale = saver.get_tuple(config)._replace(metadata={"stale": True})
    saver.serve(config, stale)
    write = {"copy_thread": lambda: saver.copy_thread("another thread", thread_id),
             "prune": lambda: saver.prune([thread_id], strategy="delete"),
             "delete_for_runs": lambda: saver.delete_for_runs(["a run"])}[change]
    with contextlib.suppress(NotImplementedError):
        write()
    found = saver.get_tuple(config)
    assert found is None or found.metadata != {"stale": True}


@pytest.mark.parametrize("durable_url", ["sqlite", "postgres"], indirect=True)
def test_deleting_a_thread_withdraws_what_waits_in_it(durable_url: str) -> None:
    """LangGraph's `delete_thread` (sync or async) on graphkit's saver: what waited on a
    decision in the thread leaves the inbox, declined as superseded and audited, and a run
    decided before the delete is no longer queued for a worker (whose resume of a thread
    without checkpoints would fail, and be tried again, for ever). Other threads keep theirs."""
    from graphkit import ApprovalAlreadyResolvedError, Inbox

    pay = {"amount": 40, "payee": {"name": "ACME"}}
    agent, ledger = agent_with([turn(call("pay", pay, "c1")), "paid"], checkpointer=durable_url)
    (gone,) = agent.generate("pay", thread_id="gone").pending_approvals
    kept_run = agent.generate("pay", thread_id="kept")
    (kept,) = kept_run.pending_approvals
    decided = agent.generate("pay", thread_id="decided")
    (later,) = agent.generate("pay", thread_id="later").pending_approvals
    inbox = Inbox(durable_url, agents=[agent])
    inbox.approve(decided.pending_approvals[0].id, decided_by="cfo")
    assert ledger_of(agent).queued(decided.run_id)

    saver = agent.graph.checkpointer
    assert saver is not None and not isinstance(saver, bool)
    saver.delete_thread("gone")
    saver.delete_thread("decided")
    asyncio.run(saver.adelete_thread("later"))

    assert [p.id for p in Inbox(durable_url).pending()] == [kept.id]
    for withdrawn in (gone, later):
        assert Inbox(durable_url).get(withdrawn.id).status == "rejected"
        last = Inbox(durable_url).audit(id=withdrawn.id)[-1]
        assert last["event"] == "superseded" and "thread was deleted" in last["comment"]
        with pytest.raises(ApprovalAlreadyResolvedError):
            Inbox(durable_url).approve(withdrawn.id, decided_by="cfo")
    assert not ledger_of(agent).queued(decided.run_id)
    assert ledger.ran == []
    assert agent.approve_tool_call_generate(run_id=kept_run.run_id).text == "paid"
    assert len(ledger.ran) == 1


def ledger_of(agent: Any) -> Any:
    return agent._storage.ledger


def test_a_deleted_thread_takes_its_grants_and_a_delete_that_deletes_nothing_withdraws_nothing(
        sqlite_url: str) -> None:
    """Attacks (adversary review): a reviewer's "remember for this thread" outlived the
    thread's delete, and approved a call of a new conversation under the same id that nobody
    reviewed; an empty id revoked every thread's grants; and LangGraph's InMemorySaver, given
    the id as a UUID object, deleted nothing while the ledger (which knows it as text)
    withdrew its live approval."""
    import uuid

    from graphkit import Inbox

    pay = {"amount": 40, "payee": {"name": "ACME"}}
    agent, ledger = agent_with([turn(call("pay", pay, "c1")), "paid"], checkpointer=sqlite_url)
    first = agent.generate("pay ACME", thread_id="ticket-1")
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo", remember="thread")
    assert len(ledger.ran) == 1
    saver = agent.graph.checkpointer
    assert saver is not None and not isinstance(saver, bool)
    other = agent.generate("pay ACME", thread_id="ticket-2")
    agent.approve_tool_call_generate(run_id=other.run_id, decided_by="cfo", remember="thread")
    saver.delete_thread("")  # names no thread: revokes no grant of any
    assert [g["revoked"] for g in Inbox(sqlite_url).grants()] == [None, None]
    saver.delete_thread("ticket-1")
    again = agent.generate("pay ACME", thread_id="ticket-1")  # a new conversation, same id
    assert again.finish_reason == "suspended" and len(ledger.ran) == 2
    assert {g["thread_id"]: g["revoked"] is not None for g in Inbox(sqlite_url).grants()} == {
        "ticket-1": True, "ticket-2": False}
    (revoked,) = [e for e in Inbox(sqlite_url).audit(thread_id="ticket-1")
                  if e["event"] == "revoked"]
    assert revoked["tool_call_id"] == "c1"  # (it had none: helper-97)

    memory, memory_ledger = agent_with([turn(call("pay", pay, "c1")), "paid"])
    thread = uuid.uuid4()
    paused = memory.generate("pay", thread_id=str(thread))
    memory_saver = memory.graph.checkpointer
    assert memory_saver is not None and not isinstance(memory_saver, bool)
    memory_saver.delete_thread(thread)  # type: ignore[arg-type]  # (deletes nothing)
    assert [p.id for p in memory.pending_approvals(run_id=paused.run_id)] == [
        p.id for p in paused.pending_approvals]
    assert memory.approve_tool_call_generate(run_id=paused.run_id).text == "paid"
    assert len(memory_ledger.ran) == 1


def test_withdrawing_a_thread_declines_only_what_was_seen_before_it_was_found_gone(
        sqlite_url: str) -> None:
    """Attack (adversary review): a thread deleted on a LangGraph server and recreated under
    its id while the inbox looked it up; the approval the new conversation asked for was
    declined with the old one. What is withdrawn is what was read before the lookup."""
    from graphkit import Inbox
    from graphkit._review import withdraw_thread

    pay = {"amount": 40, "payee": {"name": "ACME"}}
    agent, _ = agent_with([turn(call("pay", pay, "c1"), call("pay", {**pay, "amount": 2}, "c2"))],
                          checkpointer=sqlite_url)
    first, second = agent.generate("pay twice", thread_id="t").pending_approvals
    assert withdraw_thread(agent._storage.ledger, "t", only={first.id}) == [first.id]
    assert [p.id for p in Inbox(sqlite_url).pending()] == [second.id]
    assert withdraw_thread(agent._storage.ledger, "", only=None) == []
    assert [p.id for p in Inbox(sqlite_url).pending()] == [second.id]


def test_a_threads_later_run_is_the_last_its_agent_started_after_it(durable_url: str) -> None:
    """`later_run`: runs started one after another on a thread are told apart in that order,
    even within one tick of the database's clock (SQLite's is a millisecond: helper-18 found
    13 of 30 back-to-back runs tied, which hid each other); another thread's runs do not
    count, on either engine. A thread is one agent's: another agent's run on it is refused
    (helper-20: a second agent's message on the thread was lost, and the first agent's
    decision landed on the second's call)."""
    from graphkit._ledger import RunToRecord
    from graphkit._storage import open_storage
    from graphkit.errors import GraphkitError

    ledger = open_storage(durable_url).ledger
    started = [("r1", "t1", "bank"), ("r2", "t1", "bank"), ("r3", "t1", "bank"),
               ("o1", "t2", "bank")]
    for run_id, thread_id, agent in started:
        with ledger.lease(thread_id, run=RunToRecord(run_id, agent)):
            pass
    with pytest.raises(GraphkitError, match="thread 't1' belongs to agent 'bank'"), ledger.lease(
            "t1", run=RunToRecord("s1", "shop")):
        pass
    with ledger.lease("t1", wait=0.0):  # (refused before the lease was taken)
        pass
    assert ledger.run("s1") is None and ledger.current_run("t1", "bank") == "r3"
    assert [ledger.later_run(r) for r in ("r1", "r2", "r3", "o1", "unknown")] == [
        "r3", "r3", None, None, None]
    times = [t for (t,) in ledger._sql.query(
        "SELECT created_at FROM graphkit_runs WHERE thread_id = 't1' AND agent = 'bank' "
        "ORDER BY created_at")]
    assert len(set(times)) == 3
