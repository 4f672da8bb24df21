"""`graphkit worker`: runs decided in the inbox are resumed by workers, each exactly once.

Real worker processes (the CLI) on PostgreSQL and SQLite share the ready queue; a worker that
dies holding a run lets another take it once its claim lapses.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graphkit import Inbox
from graphkit._ledger import RunBusyError, RunToRecord
from graphkit._worker import Worker
from tests.worker_agent import effects, make

ROOT = Path(__file__).resolve().parent.parent


def ran(path: Path) -> list[tuple[str, int]]:
    return [(r[0], r[1]) for r in effects(str(path)).execute("SELECT tool_call_id, pid FROM ran")]


def wait_for(condition: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_worker_resumes_what_the_inbox_decided(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "effects.db"
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(path))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = make(url)
    runs = [agent.generate("move 1") for _ in range(5)]
    worker = Worker(make(url), concurrency=2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        inbox = Inbox(url)
        pending = inbox.pending()
        assert len(pending) == 5 and ran(path) == []
        for item in pending[:4]:
            inbox.approve(item.id, decided_by="ops")
        wait_for(lambda: len(ran(path)) == 4)
        inbox.decline(pending[4].id, decided_by="ops")
        wait_for(lambda: worker.resumed == 5)
        time.sleep(0.3)
        assert sorted(c for c, _ in ran(path)) == sorted(p.tool_call_id for p in pending[:4])
        assert all(agent.snapshot(run_id=r.run_id)["status"] == "stop" for r in runs)
    finally:
        worker.stop()
        thread.join(timeout=10)


def _first_line(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The first line `proc` wrote to its stdout pipe while it runs on ('' if none came)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()),  # type: ignore[union-attr]
                              daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0] if lines else ""


def test_worker_processes_share_the_queue_and_each_run_runs_once(
        durable_url: str, tmp_path: Path) -> None:
    path = tmp_path / "effects.db"
    env = {**os.environ, "GRAPHKIT_TEST_EFFECTS": str(path), "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONUNBUFFERED", None)  # stdout to a pipe is buffered, as under a supervisor
    os.environ["GRAPHKIT_TEST_EFFECTS"] = str(path)
    try:
        agent = make(durable_url)
        for _ in range(30):
            agent.generate("move 1")
    finally:
        del os.environ["GRAPHKIT_TEST_EFFECTS"]
    command = [sys.executable, "-m", "graphkit.cli", "worker", "--db", durable_url, "--agent",
               "tests.worker_agent:make", "--concurrency", "2"]
    procs = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for proc in procs:  # said at once, through a pipe (as to a supervisor's log)
            assert _first_line(proc).startswith("worker: resuming ready runs of 'bank'")
        inbox = Inbox(durable_url)
        pending = inbox.pending()
        assert len(pending) == 30
        for item in pending:
            inbox.approve(item.id, decided_by="ops")
        wait_for(lambda: len(ran(path)) == 30)
        time.sleep(0.5)
        calls = [c for c, _ in ran(path)]
        assert sorted(calls) == sorted(p.tool_call_id for p in pending)  # each exactly once
        assert inbox.ready() == []
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        outs = [proc.communicate(timeout=30) for proc in procs]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
        assert "stopped after resuming" in out


def test_a_dead_workers_claim_lapses_and_another_takes_the_run(tmp_path: Path) -> None:
    from graphkit._ledger import ApprovalRow, Ledger

    ledger = Ledger.sqlite(str(tmp_path / "q.db"))
    ledger.register(approvals=[ApprovalRow(approval_id="a1", thread_id="t", kind="approval",
                                           call_key="k", agent_path=["bank"], tool_name="x",
                                           args_digest="d", run_id="r1")])
    assert ledger.decide("a1", thread_id="t", args_digest="d", status="approved",
                         decision={"type": "approve"}, audits=[], enqueue=True)
    assert ledger.next_ready("another-agents-worker", "shop") is None
    first = ledger.next_ready("dead-worker", "bank")
    assert first is not None and first[0] == "r1"
    assert ledger.next_ready("other", "bank") is None  # held
    ledger._sql.execute("UPDATE graphkit_ready SET claimed_until = 0")  # it died: no renewal
    second = ledger.next_ready("other", "bank")
    assert second is not None and second[0] == "r1"
    ledger.done_ready("r1", "other", second[1])
    assert ledger.next_ready("third", "bank") is None


def _ready_rows(url: str) -> list[tuple[Any, ...]]:
    from graphkit._storage import open_storage

    return open_storage(url).ledger._sql.query(
        "SELECT run_id, claimed_by FROM graphkit_ready")


def _short_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leases and holds of 1 s (the keeper's pace restored after the test)."""
    from graphkit._ledger import _keeper, _schema

    monkeypatch.setattr(_schema, "LEASE_SECONDS", 1.0)
    monkeypatch.setattr(_keeper.KEEPER, "lease_seconds", _keeper.KEEPER.lease_seconds)


def _worker_resumes(url: str, count: int = 1) -> None:
    worker = Worker(make(url))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: worker.resumed == count)
    finally:
        worker.stop()
        thread.join(timeout=10)


def _paused_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, short: bool = True
                ) -> tuple[Any, str, Any, Path]:
    """`bank` on a SQLite file, a run of it paused on its call, and the file of what ran;
    `short`: leases and holds of 1 s."""
    path = tmp_path / "effects.db"
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(path))
    if short:
        _short_leases(monkeypatch)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = make(url)
    return agent, url, agent.generate("move 1"), path


def _claims_while_the_tool_runs(agent: Any, url: str, monkeypatch: pytest.MonkeyPatch, *,
                                seconds: float = 0.0, every: float = 0.1
                                ) -> list[tuple[list[tuple[Any, ...]], Any]]:
    """Have the agent's tools node, as it starts, try a worker's claim (every `every` s for
    `seconds`; once for 0): the list gets the queue's rows and what each try took."""
    from graphkit._owner import new_owner

    ledger = agent._storage.ledger
    tries: list[tuple[list[tuple[Any, ...]], Any]] = []
    real = agent.graph.nodes["tools"].bound.func

    def tools(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + seconds
        while True:
            tries.append((_ready_rows(url), ledger.next_ready(new_owner(), "bank")))
            if time.monotonic() >= deadline:
                return real(*args, **kwargs)
            time.sleep(every)

    monkeypatch.setattr(agent.graph.nodes["tools"].bound, "func", tools)
    return tries


def test_a_run_the_api_decides_and_resumes_is_held_from_the_workers_until_it_went_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Agent API's decision queues its run held by the caller, which resumes it: no
    worker takes it meanwhile, and once the run went on the queue forgets it."""
    agent, url, paused, _ = _paused_run(tmp_path, monkeypatch, short=False)
    seen = _claims_while_the_tool_runs(agent, url, monkeypatch)
    done = agent.approve_tool_call_generate(run_id=paused.run_id, decided_by="ops")
    assert done.text == "done"
    [(rows, taken)] = seen
    assert [r[0] for r in rows] == [paused.run_id] and rows[0][1] is not None  # held
    assert taken is None  # no worker takes it
    assert _ready_rows(url) == []


def test_a_run_whose_deciding_process_died_before_it_went_on_is_resumed_by_a_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`approve_tool_call` took the decision and this process died before the run went on:
    nothing is pending, so nothing would ever continue the run but a hand `resume`. The run
    stays queued, held by the dead caller, until its claim lapses; then a worker resumes it,
    and the approved call runs once."""
    path = tmp_path / "effects.db"
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(path))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    paused = make(url).generate("move 1")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "tests.worker_agent", url, paused.run_id, "1.0"],
                   cwd=ROOT, env=env, check=True, timeout=120)
    assert ran(path) == [] and Inbox(url).pending() == []
    assert [r[0] for r in _ready_rows(url)] == [paused.run_id]
    _worker_resumes(url)
    assert [c for c, _ in ran(path)] == [paused.pending_approvals[0].tool_call_id]
    assert make(url).snapshot(run_id=paused.run_id)["status"] == "stop"
    assert _ready_rows(url) == []


@pytest.mark.parametrize("unread", ["iterator never advanced", "awaited, never iterated"])
def test_a_decided_runs_stream_never_read_leaves_the_run_to_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unread: str) -> None:
    """A stream the API returned after its decision, that nobody reads (its iterator made but
    never advanced; an async one awaited, which takes the thread, but never iterated): its
    hold lapses, the thread is free, and a worker finishes the run, its call run once."""
    import asyncio
    import gc

    agent, url, paused, path = _paused_run(tmp_path, monkeypatch)
    if unread == "iterator never advanced":
        with pytest.warns(RuntimeWarning, match="dropped unread"):
            stream = agent.approve_tool_call(run_id=paused.run_id, decided_by="ops")
            chunks = stream.full_stream
            del chunks, stream
            gc.collect()
    else:
        async def awaited() -> None:
            await agent.aapprove_tool_call(run_id=paused.run_id, decided_by="ops")

        with pytest.warns(RuntimeWarning, match="aapprove_tool_call.. recorded its decision"):
            asyncio.run(awaited())
            gc.collect()
    assert [r[0] for r in _ready_rows(url)] == [paused.run_id] and ran(path) == []
    _worker_resumes(url)
    assert [c for c, _ in ran(path)] == [paused.pending_approvals[0].tool_call_id]
    assert agent.snapshot(run_id=paused.run_id)["status"] == "stop"
    assert _ready_rows(url) == []


def test_a_decided_run_that_outlasts_its_hold_is_renewed_while_it_advances(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's hold is renewed while its run advances: a worker never takes a run whose
    tool outlasts the hold's span, and the queue forgets the run once it went on."""
    agent, url, paused, _ = _paused_run(tmp_path, monkeypatch)
    tries = _claims_while_the_tool_runs(agent, url, monkeypatch, seconds=3.0)  # 3 holds' span
    done = agent.approve_tool_call_generate(run_id=paused.run_id, decided_by="ops")
    assert done.text == "done" and len(tries) > 20
    assert {claim for _, claim in tries} == {None}  # never taken from the caller
    assert _ready_rows(url) == []


def test_a_hold_whose_stream_starts_late_is_renewed_as_it_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream started near the end of its decision's hold renews the hold as it takes the
    thread: the keeper's first renewal, a third of a lease later, would come after the hold
    lapsed, and a worker would take the run mid-advance (helper-13)."""
    agent, url, paused, _ = _paused_run(tmp_path, monkeypatch)  # holds of 1 s, renewed every 1/3
    tries = _claims_while_the_tool_runs(agent, url, monkeypatch, seconds=1.5, every=0.02)
    stream = agent.approve_tool_call(run_id=paused.run_id, decided_by="ops")
    time.sleep(0.9)  # the hold has 0.1 s left as the stream starts
    assert stream.result().text == "done" and len(tries) > 30
    assert {claim for _, claim in tries} == {None}
    assert _ready_rows(url) == []


def test_a_run_whose_resume_failed_is_left_to_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's resume raised after the approved call ran: its hold is left to lapse, a
    worker then finishes the run, and the call does not run again."""
    agent, url, paused, path = _paused_run(tmp_path, monkeypatch)
    real = agent.graph.nodes["model"].bound.func

    def model(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the model's provider is down")

    monkeypatch.setattr(agent.graph.nodes["model"].bound, "func", model)
    with pytest.raises(RuntimeError, match="provider is down"):
        agent.approve_tool_call_generate(run_id=paused.run_id, decided_by="ops")
    monkeypatch.setattr(agent.graph.nodes["model"].bound, "func", real)
    assert len(ran(path)) == 1
    assert [r[0] for r in _ready_rows(url)] == [paused.run_id]
    _worker_resumes(url)
    assert len(ran(path)) == 1
    assert agent.snapshot(run_id=paused.run_id)["status"] == "stop"
    assert _ready_rows(url) == []


@pytest.fixture
def queue(durable_url: str) -> Iterator[Any]:
    """The ledger of a storage on `durable_url` (its PostgreSQL pool closed after the test)."""
    from graphkit._storage import open_storage

    storage = open_storage(durable_url)
    yield storage.ledger
    pool = getattr(storage.ledger._sql, "pool", None)
    if pool is not None:
        pool.close()


def _decided_in_the_inbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                          ) -> tuple[str, Any, Any, Any]:
    """A run A paused on a call the inbox then approved (A is queued for the workers): the
    database's url, the agent, A's result and the approved item."""
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(tmp_path / "effects.db"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = make(url)
    older = agent.generate("move 1")
    (item,) = Inbox(url).pending()
    Inbox(url).approve(item.id, decided_by="ops")
    return url, agent, older, item


def test_a_queued_run_whose_thread_went_on_in_a_later_run_is_not_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inbox decided run A (queued for the workers); before a worker took it, a new
    message started run B in the thread, which paused on its own call. A's row is over: the
    worker drops it without resuming anything (before, it resumed B's pause under A's id,
    one more pass and checkpoint, and would have run B's call once decided, under A)."""
    from graphkit._owner import new_owner

    url, agent, older, _ = _decided_in_the_inbox(tmp_path, monkeypatch)
    assert [r[0] for r in _ready_rows(url)] == [older.run_id]
    newer = agent.generate("move 2", thread_id=older.thread_id)
    assert newer.finish_reason == "suspended"
    config = {"configurable": {"thread_id": older.thread_id}}
    before = [c.config["configurable"]["checkpoint_id"]
              for c in agent.graph.get_state_history(config)]
    worker = Worker(make(url))
    assert worker._resume_one(new_owner()) is True  # it took A's row...
    assert [c.config["configurable"]["checkpoint_id"]
            for c in agent.graph.get_state_history(config)] == before  # ...and ran nothing
    assert _ready_rows(url) == []
    (waiting,) = agent.pending_approvals(run_id=newer.run_id)
    assert waiting.status == "pending" and agent.snapshot(run_id=newer.run_id)[
        "status"] == "suspended"
    # B goes on under its own id once decided
    Inbox(url).approve(waiting.id, decided_by="ops")
    assert worker._resume_one(new_owner()) is True
    assert agent.snapshot(run_id=newer.run_id)["status"] == "stop"
    assert waiting.tool_call_id in [c for c, _ in ran(tmp_path / "effects.db")]


@pytest.mark.parametrize("later", ["paused", "never reached the state"])
def test_a_claim_that_could_not_read_the_later_run_under_its_lease_leaves_it_to_the_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later: str) -> None:
    """On PostgreSQL the claim is one statement, whose snapshot may predate a run B started
    (and its lease released) on the thread before the claim's lease was taken: the claim
    cannot say there is no later run; the resume reads it under the lease. B paused on its
    own call: A's row is dropped, nothing runs under A's id. B's stream was left before its
    graph ran (its input never reached the state, which still names A): the thread goes on
    as B, with B's options. Trusting the claim, the worker resumed A under A's id, and B's
    message was answered under A's options: a call B required approval for ran without one
    (helper-36 and helper-38, with a trigger sleeping in the claim on PostgreSQL)."""
    from graphkit._owner import new_owner

    url, agent, older, _ = _decided_in_the_inbox(tmp_path, monkeypatch)
    if later == "paused":
        newer_id = agent.generate("move 2", thread_id=older.thread_id).run_id
    else:
        stream = agent.stream("move 2", thread_id=older.thread_id, require_tool_approval=True)
        chunks = iter(stream)
        assert next(chunks).type == "start"
        newer_id = stream.run_id
        chunks.close()  # type: ignore[attr-defined]
        del chunks, stream
    worker = Worker(make(url))
    ledger = worker.agent._storage.ledger
    claim = ledger.next_ready

    def in_one_statement(*args: Any, **kwargs: Any) -> Any:  # as PostgreSQL's claim is
        ready = claim(*args, **kwargs)
        return ready and ready._replace(later_run=None, later_read=False)

    monkeypatch.setattr(ledger, "next_ready", in_one_statement)
    config = {"configurable": {"thread_id": older.thread_id}}
    before = [c.config["configurable"]["checkpoint_id"]
              for c in agent.graph.get_state_history(config)]
    assert worker._resume_one(new_owner()) is True
    after = agent.graph.get_state_history(config)
    if later == "paused":
        assert [c.config["configurable"]["checkpoint_id"] for c in after] == before
    else:
        assert agent.graph.get_state(config).values["options"]["run_id"] == newer_id
    (waiting,) = Inbox(url).pending()  # B's call, filed under B
    assert waiting.status == "pending" and waiting.run_id == newer_id


@pytest.mark.parametrize("door", ["worker", "resume by hand"])
def test_a_queued_run_whose_later_run_stopped_mid_step_is_continued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, door: str) -> None:
    """The inbox approved run A's call (A queued); a new message started run B, whose gate
    cleared that call, and B stopped before its tools ran (`on_state_change` here; a process
    that died there leaves the same checkpoint). The thread did not come to rest in B: a
    worker taking A's row, or a resume naming A, continues B, under B's id (the approved call
    runs, once), rather than dropping A's row with nothing else queued (helper-15 against
    531986f: the call never ran), or going on under A's id (helper-16 against a0251df)."""
    from graphkit._owner import new_owner

    url, agent, older, item = _decided_in_the_inbox(tmp_path, monkeypatch)
    newer = agent.generate("move 2", thread_id=older.thread_id,
                           on_state_change=lambda state: state.step >= 2)
    assert newer.finish_reason == "checkpoint"
    config = {"configurable": {"thread_id": older.thread_id}}
    state = agent.graph.get_state(config)
    assert state.next == ("tools",) and not state.interrupts and ran(tmp_path / "effects.db") == []
    if door == "worker":
        assert Worker(make(url))._resume_one(new_owner()) is True
        assert _ready_rows(url) == []
    else:
        assert agent.resume(run_id=older.run_id).run_id == newer.run_id
    assert [c for c, _ in ran(tmp_path / "effects.db")] == [item.tool_call_id]
    # B went on under its own id: the message that started it reached the conversation, and
    # the model asked anew
    assert [p.status for p in agent.pending_approvals(run_id=newer.run_id)] == ["pending"]
    assert agent.graph.get_state(config).metadata["graphkit_run_id"] == newer.run_id


@pytest.mark.parametrize("when", ["before the graph ran", "after its first step"])
def test_a_new_message_whose_stream_was_left_leaves_its_run_to_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """A new message declined the call run A waited on and was queued, both in the ledger,
    then its stream was left (the same as its process dying there): the run it started, B,
    is queued for the workers, held by the stream until the hold lapses; a worker then goes
    on as B, with B's options: the declined call never runs, the message reaches the
    conversation, and what the model asks next waits under B (helper-18: nothing was queued,
    and the thread stood still until someone resumed it by hand)."""
    agent, url, older, path = _paused_run(tmp_path, monkeypatch)
    stream = agent.stream("stop, move nothing", thread_id=older.thread_id)
    events = iter(stream)
    next(events)  # the run's start: the ledger took the message, the graph has not run
    if when == "after its first step":
        next(events)
    events.close()  # type: ignore[attr-defined]
    newer = stream.run_id
    assert [r[0] for r in _ready_rows(url)] == [newer]
    assert Inbox(url).pending() == []  # A's call was declined
    _worker_resumes(url)
    assert ran(path) == []
    state = agent.graph.get_state({"configurable": {"thread_id": older.thread_id}})
    assert "stop, move nothing" in [m.content for m in state.values["messages"]]
    assert state.values["options"]["run_id"] == newer
    (waiting,) = agent.pending_approvals(run_id=newer)  # asked anew, under B
    assert waiting.tool_call_id != older.pending_approvals[0].tool_call_id
    assert agent.decline_tool_call_generate(run_id=newer, decided_by="ops").text == "done"
    assert _ready_rows(url) == []


@pytest.mark.parametrize("left", ["before its gate read it", "after the tool ran"])
def test_a_reply_auto_resume_may_read_whose_stream_was_left_leaves_its_run_to_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, left: str) -> None:
    """'Paris' may answer the suspended weather call; its stream is left (the same as its
    process dying there). Its run is queued for the workers, held by the stream until the
    hold lapses: left after the tool ran, a worker goes on and the message and the answer
    reach the conversation; left before its gate read the message, the worker's pass asks
    again, the message waiting in the queue. Before, nothing was queued and the thread stood
    still, the message undelivered (helper-23)."""
    from graphkit._owner import new_owner
    from tests.test_suspension import weather_agent

    _short_leases(monkeypatch)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True, checkpointer=url)
    first = agent.generate("weather?")
    stream = agent.stream("Paris", thread_id=first.thread_id)
    events = iter(stream)
    next(events)  # the run's start: the ledger took the message, the graph has not run
    if left == "after the tool ran":
        assert next(events).type == "tool-result"
    events.close()  # type: ignore[attr-defined]
    assert [r[0] for r in _ready_rows(url)] == [stream.run_id]
    time.sleep(1.1)  # the stream's hold lapses
    worker = Worker(weather_agent(log, auto_resume_suspended_tools=True, checkpointer=url))
    assert worker._resume_one(new_owner()) is True
    assert _ready_rows(url) == []
    said = [(type(m).__name__, m.text) for m in agent.graph.get_state(
        {"configurable": {"thread_id": first.thread_id}}).values["messages"]]
    queued = agent._storage.ledger.queue_of(first.thread_id, "wx")
    if left == "after the tool ran":
        assert log == ["started", "started", "fetched Paris"] and queued == []
        assert said[2:] == [("ToolMessage", "Paris: sunny, +72F"), ("HumanMessage", "Paris"),
                            ("AIMessage", "The weather in Paris: sunny, +72F")]
    else:
        assert log == ["started"] and len(queued) == 1
        assert [p.kind for p in Inbox(url).pending()] == ["suspension"]
        assert said == [("HumanMessage", "weather?"), ("AIMessage", "")]


def test_an_earlier_runs_row_never_advances_a_later_runs_turn_under_its_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inbox approved run A's call (A queued); a new message started run B and its stream
    was left before B's graph ran, so the state still names A. A worker that takes A's row
    first asks the ledger which run is the thread's, not the state: it goes on as B (the
    approved call runs once, B's message and what the model asks next are filed under B), and
    B's row finds nothing more to do (helper-19: the turn after B's message was filed under
    A, then the state switched to B, which left the ledger and the state disagreeing)."""
    _short_leases(monkeypatch)
    url, agent, older, item = _decided_in_the_inbox(tmp_path, monkeypatch)
    stream = agent.stream("move 2", thread_id=older.thread_id)
    events = iter(stream)
    next(events)
    events.close()  # type: ignore[attr-defined]
    newer = stream.run_id
    config = {"configurable": {"thread_id": older.thread_id}}
    assert agent.graph.get_state(config).values["options"]["run_id"] == older.run_id
    assert sorted(r[0] for r in _ready_rows(url)) == sorted([older.run_id, newer])
    time.sleep(1.1)  # B's hold lapses
    _worker_resumes(url, count=2)
    assert [c for c, _ in ran(tmp_path / "effects.db")] == [item.tool_call_id]
    assert agent.graph.get_state(config).values["options"]["run_id"] == newer
    (waiting,) = Inbox(url).pending()
    assert waiting.run_id == newer and waiting.tool_call_id != item.tool_call_id
    steps = [c.metadata.get("graphkit_run_id") for c in agent.graph.get_state_history(config)
             if c.metadata.get("step", -1) > 1]  # (steps 0 and 1: A's first turn)
    assert older.run_id not in steps and _ready_rows(url) == []
    requested = [e for e in Inbox(url).audit(thread_id=older.thread_id)
                 if e["event"] == "requested"]
    assert [e["run_id"] for e in requested] == [older.run_id, newer]


def _ready_run(ledger: Any, run_id: str, thread_id: str) -> None:
    """One decided run of `bank`, ready for a worker."""
    from graphkit._ledger import ApprovalRow

    ledger.register(approvals=[ApprovalRow(
        approval_id=f"a-{run_id}", thread_id=thread_id, kind="approval", call_key=f"k-{run_id}",
        agent_path=["bank"], tool_name="x", args_digest="d", run_id=run_id)])
    assert ledger.decide(f"a-{run_id}", thread_id=thread_id, args_digest="d", status="approved",
                         decision={"type": "approve"}, audits=[], enqueue=True)


def _lease_owner(ledger: Any, thread_id: str) -> str | None:
    rows = ledger._sql.query("SELECT owner FROM graphkit_leases WHERE thread_id = ?",
                             (thread_id,))
    return str(rows[0][0]) if rows else None


def test_a_workers_claim_takes_the_runs_thread_lease_and_its_done_releases_both(
        queue: Any) -> None:
    """One statement on PostgreSQL (one transaction on SQLite) claims the run and its thread;
    another door cannot take the thread meanwhile; `done_ready` frees both."""
    from graphkit._owner import new_owner

    ledger = queue
    _ready_run(ledger, "r1", "t1")
    worker = new_owner()
    claimed = ledger.next_ready(worker, "bank", lease=True)
    assert claimed is not None and claimed.leased and claimed.thread_id == "t1"
    assert _lease_owner(ledger, "t1") == worker
    with pytest.raises(RunBusyError), ledger.lease("t1", wait=0.0):
        pass  # someone else's resume of the thread waits for the worker
    ledger.done_ready("r1", worker, claimed.ready_at, thread_id="t1")
    assert _lease_owner(ledger, "t1") is None and not ledger.queued("r1")
    with ledger.lease("t1", wait=0.0):
        pass


def test_a_workers_claim_reads_the_later_run_only_under_the_lease_it_took(queue: Any) -> None:
    """On SQLite the claim says which later run of its agent the thread went on in, read in
    the transaction that took the lease (the resume then asks nothing more): none, or the
    last one. PostgreSQL's claim, one statement under one snapshot, leaves it to the resume."""
    from graphkit._owner import new_owner

    ledger = queue
    for run, thread in (("r1", "t1"), ("r2", "t2")):
        with ledger.lease(thread, run=RunToRecord(run, "bank")):
            pass
        _ready_run(ledger, run, thread)
    for run in ("r3", "r4"):
        with ledger.lease("t2", run=RunToRecord(run, "bank")):
            pass
    first = ledger.next_ready(new_owner(), "bank", lease=True)
    second = ledger.next_ready(new_owner(), "bank", lease=True)
    if ledger._sql.writes_with:  # PostgreSQL
        assert (first.run_id, second.run_id) == ("r1", "r2")
        assert not first.later_read and not second.later_read
        return
    assert first.later_read and (first.run_id, first.later_run) == ("r1", None)
    assert second.later_read and (second.run_id, second.later_run) == ("r2", "r4")


def test_a_workers_claim_leaves_a_thread_another_process_holds(queue: Any) -> None:
    """The thread is being advanced elsewhere: the claim takes the run but not the lease,
    and the resume then waits for the lease as any other door does (`Agent._prepare`)."""
    from graphkit._owner import new_owner

    ledger = queue
    _ready_run(ledger, "r2", "t2")
    with ledger.lease("t2") as holder:
        claimed = ledger.next_ready(new_owner(), "bank", lease=True)
        assert claimed is not None and claimed.run_id == "r2" and not claimed.leased
        assert _lease_owner(ledger, "t2") == holder
        ledger.retry_ready("r2", claimed_by(ledger, "r2"))
    assert _lease_owner(ledger, "t2") is None


def test_a_resume_ended_by_what_is_not_an_exception_gives_the_thread_back(
        durable_url: str) -> None:
    """A gated tool ends in SystemExit inside a worker (an in-process CLI's `sys.exit`): it
    ends the worker's thread, but not before the claim and the thread lease its claim took are
    given back; the keeper renews neither, and the user's next message on the thread runs."""
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

    from graphkit import Agent, create_tool
    from graphkit._ledger import _keeper
    from graphkit.testing import ScriptedChatModel

    ran: list[str] = []

    @create_tool(needs_approval=True)
    def deploy(service: str) -> str:
        """Deploy a service (by a CLI run in-process, which ends in sys.exit)."""
        ran.append(service)
        raise SystemExit(0)

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("done")
        return AIMessage("", tool_calls=[{"name": "deploy", "args": {"service": "api"},
                                          "id": f"call-{time.time_ns()}"}])

    agent = Agent(name="ops", model=ScriptedChatModel(reply), tools=[deploy],
                  checkpointer=durable_url)
    first = agent.generate("deploy api")
    inbox = Inbox(agent._storage)
    inbox.approve(inbox.pending()[0].id, decided_by="ops-lead")
    with pytest.raises(SystemExit):
        Worker(agent)._resume_one("gk-worker-thread")
    assert ran == ["api"]
    assert _lease_owner(agent._storage.ledger, first.thread_id) is None
    assert not [w for w, _ in _keeper.KEEPER._held if w == ("thread", first.thread_id)]
    later = agent.generate("status?", thread_id=first.thread_id)  # not RunBusyError
    assert later.run_id != first.run_id and later.thread_id == first.thread_id


def test_a_worker_thread_outlives_a_queue_it_cannot_read(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database is away for a moment (the claim raises): the worker's thread logs it and
    looks again, instead of ending and leaving the worker with nothing resuming."""
    from graphkit import Agent
    from graphkit.testing import ScriptedChatModel

    worker = Worker(Agent(name="ops", model=ScriptedChatModel(["hi"]), checkpointer=sqlite_url))
    calls: list[int] = []

    def flaky(owner: str) -> bool:
        calls.append(1)
        if len(calls) >= 3:
            worker.stop()
        raise OSError("connection lost")

    monkeypatch.setattr(worker, "_resume_one", flaky)
    runner = threading.Thread(target=worker._loop, daemon=True)
    runner.start()
    runner.join(timeout=10)
    assert not runner.is_alive() and len(calls) == 3


def claimed_by(ledger: Any, run_id: str) -> str:
    rows = ledger._sql.query("SELECT claimed_by FROM graphkit_ready WHERE run_id = ?", (run_id,))
    return str(rows[0][0])


def test_the_worker_cli_refuses_an_agent_on_other_storage(tmp_path: Path) -> None:
    from graphkit.cli import main

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["worker", "--db", url, "--agent", "graphkit.examples:deploy_agent"]) == 1
    assert main(["worker", "--db", url, "--agent", "nope"]) == 1


def test_a_run_id_written_into_another_threads_state_files_nothing_under_that_run(
        sqlite_url: str) -> None:
    """A client of the graph names the victim's run id in its own thread's `options`: the
    ledger knows which thread that run is, so the client's call is filed under no run. The
    victim's run is ready once its own call is decided, and the ready queue names the
    victim's thread, never the client's."""
    from langchain_core.messages import HumanMessage

    from graphkit import Inbox
    from tests.helpers import agent_with, config, pay_then_done

    agent, _ran = agent_with(pay_then_done, checkpointer=sqlite_url)
    victim = agent.generate("pay acme")
    agent.graph.invoke({"messages": [HumanMessage("pay", id="h1")],
                        "options": {"run_id": victim.run_id}}, config("attacker-thread"))
    inbox = Inbox(sqlite_url)
    mine = next(p for p in inbox.pending() if p.thread_id == "attacker-thread")
    assert mine.run_id is None
    theirs = next(p for p in inbox.pending() if p.thread_id == victim.thread_id)
    inbox.approve(theirs.id, decided_by="cfo")
    assert inbox.ready() == [victim.run_id]
    assert agent._storage.ledger._sql.query("SELECT run_id, thread_id FROM graphkit_ready") == [
        (victim.run_id, victim.thread_id)]


def _worker_process(url: str, *, tool_seconds: str) -> subprocess.Popen[str]:
    """A `graphkit worker` process resuming `tests.worker_agent`'s runs on `url`, its tool
    taking `tool_seconds`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRAPHKIT_TEST_TOOL_SECONDS": tool_seconds}
    return subprocess.Popen(
        [sys.executable, "-m", "graphkit.cli", "worker", "--db", url, "--agent",
         "tests.worker_agent:make"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _approved_and_started(proc: subprocess.Popen[str], url: str, paused: Any,
                          effects_path: Path) -> None:
    """Once the worker says it is ready: every call of the paused run approved in the inbox,
    and each of them started in the worker's tool."""
    assert _first_line(proc).startswith("worker: resuming ready runs")
    for pending in paused.pending_approvals:
        Inbox(url).approve(pending.id, decided_by="ops")
    started = effects(str(effects_path))
    count = len(paused.pending_approvals)
    wait_for(lambda: started.execute("SELECT COUNT(*) FROM started").fetchone()[0] == count)


def test_sigterm_lets_a_tool_in_progress_finish_however_long_it_takes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker SIGTERM'd while an approved tool ran waited 5 s, then exited with the tool cut
    off: the run stayed queued and the next worker ran the call again (helper-56: a rolling
    deploy runs a slow deploy twice). It now exits once the run in progress finished, the
    call run once."""
    path = tmp_path / "effects.db"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(path))
    agent = make(url)
    paused = agent.generate("move 1")
    proc = _worker_process(url, tool_seconds="7")
    try:
        _approved_and_started(proc, url, paused, path)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "stopping after the 1 run(s) in progress finish" in err
    assert "stopped after resuming 1 run(s)" in out
    assert [pid for _, pid in ran(path)] == [proc.pid]  # it ran, once, in that worker
    assert agent.snapshot(run_id=paused.run_id)["status"] == "stop"
    assert Inbox(url).ready() == []


def test_graph_input_beside_a_workers_payment_comes_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker was paying an approved transfer when the user's next message came as graph
    input given to the agent's graph directly: the two runs wrote from the same checkpoint,
    and the thread's final state lost the message and its answer (helper-95). The input now
    waits for the worker's thread lease (`graphkit._leased_graph`) and goes on from the paid
    turn."""
    from langchain_core.messages import HumanMessage

    path = tmp_path / "effects.db"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(path))
    agent = make(url)
    paused = agent.generate("move 1")
    config: Any = {"configurable": {"thread_id": paused.thread_id}}
    proc = _worker_process(url, tool_seconds="3")
    try:
        _approved_and_started(proc, url, paused, path)
        agent.graph.invoke({"messages": [HumanMessage("and now?")]}, config)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert [pid for _, pid in ran(path)] == [proc.pid]
    said = [(type(m).__name__, m.content)
            for m in agent.graph.get_state(config).values["messages"]]
    assert said[2:] == [("ToolMessage", "moved"), ("AIMessage", "done"),
                        ("HumanMessage", "and now?"), ("AIMessage", "")]
    (asked,) = Inbox(url).pending()  # the message's own turn
    assert asked.tool_call_id != paused.pending_approvals[0].tool_call_id


def test_a_second_stop_leaves_the_runs_in_progress_to_another_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second SIGTERM or Ctrl-C while the runs in progress finish: the worker leaves now,
    as a killed one would (for a tool that hangs)."""
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(tmp_path / "effects.db"))
    monkeypatch.setenv("GRAPHKIT_TEST_TOOL_SECONDS", "3")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = make(url)
    paused = agent.generate("move 1")
    worker = Worker(make(url))
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    Inbox(url).approve(paused.pending_approvals[0].id, decided_by="ops")
    started = effects(str(tmp_path / "effects.db"))
    wait_for(lambda: started.execute("SELECT COUNT(*) FROM started").fetchone()[0] == 1)
    worker.stop()
    runner.join(1.0)
    assert runner.is_alive()  # waiting for the tool
    worker.stop()
    runner.join(1.0)
    assert not runner.is_alive()
    assert agent._storage.ledger.queued(paused.run_id)  # another worker continues it


@pytest.mark.parametrize("signals", [(signal.SIGTERM, signal.SIGTERM),
                                     (signal.SIGINT, signal.SIGTERM)])
def test_a_second_signal_leaves_at_once_while_calls_run_in_parallel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signals: tuple[int, int]) -> None:
    """A worker process whose run had two calls running hung after a second SIGTERM until
    its tools returned (an interpreter's exit waits for LangGraph's pool threads), and a
    Ctrl-C then a SIGTERM counted as one stop (helper-89). Either two leaves at once."""
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(tmp_path / "effects.db"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    monkeypatch.setenv("GRAPHKIT_TEST_CALLS", "2")
    agent = make(url)
    paused = agent.generate("move 1")
    proc = _worker_process(url, tool_seconds="120")
    try:
        _approved_and_started(proc, url, paused, tmp_path / "effects.db")
        for signum in signals:
            proc.send_signal(signum)
            time.sleep(0.5)
        out, err = proc.communicate(timeout=30)  # (the tools take 120 s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "left 1 run(s) in progress" in err and "stopped after resuming" in out
    assert agent._storage.ledger.queued(paused.run_id)  # another worker continues it


def test_a_stop_from_a_signal_takes_no_lock_the_interrupted_thread_may_hold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's SIGTERM handler runs in the main thread between any two of its steps, also
    inside `Event.wait` on the worker's stop event, which holds that event's lock: `stop()`
    there waited on the lock for good (a worker process of a CI run was still alive an hour
    after its SIGTERM, every run of it done). The handler's stop takes no lock, and `run`
    acts on it: one stops the worker, two leave the runs in progress."""
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(tmp_path / "effects.db"))
    worker = Worker(make(f"sqlite:///{tmp_path / 'runs.db'}"))
    asked = threading.Thread(target=worker.stop_from_signal, daemon=True)
    with worker._stop._cond:  # what the main thread holds inside `Event.wait`
        asked.start()
        asked.join(2.0)
        assert not asked.is_alive()
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    runner.join(5.0)
    assert not runner.is_alive()


@pytest.mark.parametrize("ready_at", ["'NaN'", "'soon'", "x'00ff'"])
def test_a_queued_run_whose_time_is_no_number_is_made_ready_and_runs_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ready_at: str) -> None:
    """A queue row written by hand with a `ready_at` that is no number: text crashed the claim
    with the thread's lease taken and never renewed (a user's resume of that thread waited
    for it to lapse, again and again); 'NaN', never equal to itself, was never taken off the
    queue, and the worker resumed the run thousands of times a second (helper-59). Such a
    run is made ready now: it runs once, and its thread is free."""
    path = tmp_path / "effects.db"
    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(path))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = make(url)
    paused = agent.generate("move 1")
    Inbox(url).approve(paused.pending_approvals[0].id, decided_by="ops")
    ledger = agent._storage.ledger
    ledger._sql.execute(f"UPDATE graphkit_ready SET ready_at = {ready_at}")
    worker = Worker(make(url))
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: not ledger.queued(paused.run_id), timeout=20)
        time.sleep(0.5)
    finally:
        worker.stop()
        runner.join(10)
    assert len(ran(path)) == 1 and worker.resumed == 1
    assert agent.snapshot(run_id=paused.run_id)["status"] == "stop"
    assert ledger._sql.query("SELECT 1 FROM graphkit_leases") == []


def test_a_run_that_failed_a_thousand_times_still_waits_its_pause(tmp_path: Path) -> None:
    """The pause after a failed resume doubles up to 5 minutes; its exponent grew with every
    attempt, and from the 1,024th (about 85 hours of a run that keeps failing) `2.0 **
    attempts` overflowed: the hand-back raised, and the run waited only for its claim to
    lapse (helper-60)."""
    from graphkit._ledger import Ledger

    ledger = Ledger.sqlite(str(tmp_path / "q.db"))
    ledger._sql.execute("INSERT INTO graphkit_ready (run_id, thread_id, agent, ready_at, "
                        "attempts, claimed_by) VALUES ('r1', 't1', 'bank', 1.0, 5000, 'me')")
    ledger.retry_ready("r1", "me")
    ((pause,),) = ledger._sql.query(f"SELECT claimed_until - {ledger._sql.now} "
                                    "FROM graphkit_ready")
    assert 290 < pause <= 300


def test_the_last_two_decisions_of_a_run_taken_at_once_queue_it_for_the_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_url: str) -> None:
    """Two reviewers decide a run's two calls at the same moment: on PostgreSQL each
    decision's transaction saw the other call still pending (it reads what was committed as
    each statement starts), so neither queued the run, and no worker ever went on with it
    (helper-109). Deciders of one run now take turns where they queue it."""
    from graphkit._ledger import Ledger

    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(tmp_path / "effects.db"))
    monkeypatch.setenv("GRAPHKIT_TEST_CALLS", "2")
    agent = make(postgres_url)
    paused = agent.generate("move 1")
    first, second = paused.pending_approvals
    together = threading.Barrier(2, timeout=20)
    enqueue = Ledger._enqueue

    def at_once(self: Any, *args: Any, **kwargs: Any) -> Any:
        together.wait()  # both decisions are written, neither committed
        return enqueue(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "_enqueue", at_once)
    inbox = Inbox(postgres_url)
    deciders = [threading.Thread(target=inbox.approve, args=(first.id,),
                                 kwargs={"decided_by": "alice"}),
                threading.Thread(target=inbox.decline, args=(second.id,),
                                 kwargs={"decided_by": "bob"})]
    for decider in deciders:
        decider.start()
    for decider in deciders:
        decider.join(timeout=30)
    monkeypatch.setattr(Ledger, "_enqueue", enqueue)
    assert [inbox.get(first.id).status, inbox.get(second.id).status] == ["approved", "rejected"]
    assert [row[0] for row in _ready_rows(postgres_url)] == [paused.run_id]
    _worker_resumes(postgres_url)
    assert [c for c, _ in ran(tmp_path / "effects.db")] == [first.tool_call_id]


def test_a_worker_started_before_its_database_server_waits_for_it_then_resumes(
        tmp_path: Path) -> None:
    """A worker started while its PostgreSQL server was down (a deploy that restarts both)
    exited with the connection error, and nobody resumed the runs decided since (helper-130).
    It says the server is away and tries again, with growing pauses, until it is up."""
    from tests.postgres_server import PostgresServer

    server = PostgresServer()
    url = f"postgresql://postgres@127.0.0.1:{server.port}/postgres"  # (not started yet)
    path = tmp_path / "effects.db"
    env = {**os.environ, "GRAPHKIT_TEST_EFFECTS": str(path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphkit.cli", "worker", "--db", url, "--agent",
         "tests.worker_agent:make"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    started = False
    try:
        assert "cannot be reached (OperationalError" in _first_line(proc)
        assert proc.poll() is None
        server.start()
        started = True
        os.environ["GRAPHKIT_TEST_EFFECTS"] = str(path)
        try:
            paused = make(url).generate("move 1")
        finally:
            del os.environ["GRAPHKIT_TEST_EFFECTS"]
        Inbox(url).approve(paused.pending_approvals[0].id, decided_by="ops")
        wait_for(lambda: len(ran(path)) == 1)
        # a server that answers, for a database it does not have: no wait mends that, and a
        # worker that waited for ever hid the mistake from its supervisor (helper-131)
        wrong = subprocess.run(
            [sys.executable, "-m", "graphkit.cli", "worker", "--db", url + "_typo", "--agent",
             "tests.worker_agent:make"], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=60)
        assert wrong.returncode != 0 and "does not exist" in wrong.stderr
        assert "cannot be reached" not in wrong.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        if started:
            server.stop()
        else:
            shutil.rmtree(server.root, ignore_errors=True)
    assert proc.returncode == 0, err
    assert "worker: resuming ready runs of 'bank'" in out
