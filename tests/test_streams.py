"""Streams and results: chunk types, text_stream, telemetry, async twins."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import ToolMessage

from graphkit import AgentStream, AsyncAgentStream, SnapshotNotFoundError, StreamChunk
from tests.helpers import agent_with, call, turn

PAY = {"amount": 3, "payee": {"name": "Bo"}}


def types(chunks: list[StreamChunk]) -> list[str]:
    return [c.type for c in chunks]


def test_stream_emits_approval_chunks_and_telemetry_then_finishes_suspended() -> None:
    agent, _ = agent_with([turn(call("lookup", {"key": "a"}, "c0"), call("pay", PAY, "c1"),
                                text="Let me look and pay."), "All done now."])
    stream = agent.stream("go")
    assert isinstance(stream, AgentStream) and stream.run_id and stream.thread_id
    chunks = list(stream)
    assert chunks[0].type == "start" and chunks[-1].type == "finish"
    assert chunks[-1].payload["finish_reason"] == "suspended"
    assert {c.run_id for c in chunks} == {stream.run_id}
    kinds = types(chunks)
    assert kinds.index("tool-call") < kinds.index("tool-result") < kinds.index(
        "tool-call-approval")
    assert "".join(c.payload["text"] for c in chunks if c.type == "text-delta") == \
        "Let me look and pay."
    (approval,) = [c for c in chunks if c.type == "tool-call-approval"]
    assert approval.payload["tool_call_id"] == "c1" and approval.payload["args"] == PAY
    assert approval.payload["prompt"] == "Pay 3 to Bo?" and approval.payload["id"]
    (pending,) = [c for c in chunks if c.type == "tool-approval"]
    assert pending.payload["status"] == "pending" and pending.payload["tool_call_id"] == "c1"
    assert pending.payload["id"] == approval.payload["id"]
    assert stream.result().finish_reason == "suspended"

    approved = agent.approve_tool_call(run_id=stream.run_id, decided_by="eve", comment="go")
    text = "".join(approved.text_stream)
    assert text == "All done now."
    assert approved.result().finish_reason == "stop"


def test_rejected_telemetry_carries_who_and_comment() -> None:
    agent, _ = agent_with([turn(call("pay", PAY, "c1")), "ok"])
    first = agent.stream("go").result()
    chunks = list(agent.decline_tool_call(run_id=first.run_id, decided_by="sam", comment="no"))
    telemetry = [c.payload for c in chunks if c.type == "tool-approval"]
    assert telemetry == [{"status": "rejected", "id": first.pending_approvals[0].id,
                          "tool_name": "pay", "tool_call_id": "c1", "decided_by": "sam",
                          "comment": "no", "agent_path": ["assistant"]}]
    results = [c.payload for c in chunks if c.type == "tool-result"]
    assert results[0]["status"] == "error"


def test_full_stream_and_iteration_share_one_run() -> None:
    agent, ledger = agent_with([turn(call("lookup", {"key": "a"}, "c0")), "done"])
    stream = agent.stream("go")
    first = next(iter(stream.full_stream))
    rest = list(stream)
    assert first.type == "start" and rest[-1].type == "finish"
    assert ledger.names() == ["lookup"]


async def test_async_twins() -> None:
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "Paid async."])
    stream = agent.astream("go")
    assert isinstance(stream, AsyncAgentStream)
    chunks = [c async for c in stream]
    assert chunks[-1].payload["finish_reason"] == "suspended"
    result = await agent.agenerate("again", thread_id="other")
    assert result.finish_reason == "suspended"

    resumed = await agent.aapprove_tool_call(run_id=stream.run_id)
    assert resumed.thread_id == stream.thread_id
    text = [t async for t in resumed.text_stream]
    assert "".join(text) == "Paid async."
    final = await agent.adecline_tool_call_generate(run_id=result.run_id, comment="no")
    assert final.finish_reason == "stop"
    assert ledger.names() == ["pay"]
    assert (await agent.asnapshot(run_id=result.run_id))["status"] == "stop"


async def test_async_resolve_and_resume() -> None:
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "done"])
    result = await agent.agenerate("go")
    pending = (await agent.apending_approvals(run_id=result.run_id))[0]
    recorded = await agent.aresolve_tool_approval(run_id=result.run_id, id=pending.id,
                                                  approved=True, decided_by="x")
    assert recorded.status == "approved" and ledger.ran == []
    final = await agent.aresume(run_id=result.run_id)
    assert final.text == "done" and ledger.names() == ["pay"]


async def test_async_errors_surface_when_awaited() -> None:
    from graphkit import SnapshotNotFoundError

    agent, _ = agent_with(["hi"])
    with pytest.raises(SnapshotNotFoundError):
        await agent.aapprove_tool_call(run_id="missing")


def test_a_decision_stream_dropped_unread_warns_that_the_run_did_not_continue() -> None:
    import gc
    import warnings

    from tests.helpers import agent_with, call, turn

    agent, ran = agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                             "done"])
    first = agent.generate("pay")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        agent.approve_tool_call(run_id=first.run_id, decided_by="alice")  # dropped unread
        gc.collect()
    (warning,) = [w for w in seen if issubclass(w.category, RuntimeWarning)]
    assert "approve_tool_call() recorded its decision" in str(warning.message)
    assert "did not continue" in str(warning.message) and ran.ran == []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert agent.resume(run_id=first.run_id).text == "done"  # the decision stood
        stream = agent.approve_tool_call  # a read stream warns of nothing
        del stream
        gc.collect()
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)]

    second = agent_with([turn(call("pay", {"amount": 2, "payee": {"name": "y"}}, "c1")),
                         "done"])[0]
    paused = second.generate("pay")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        second.aapprove_tool_call(run_id=paused.run_id, decided_by="alice")  # never awaited
        gc.collect()
    (warning,) = [w for w in seen if issubclass(w.category, RuntimeWarning)]
    assert "never awaited" in str(warning.message) and "nothing was decided" in str(
        warning.message)


async def test_a_stream_awaited_by_two_tasks_at_once_prepares_once() -> None:
    """Two tasks awaiting one decision stream at the same time take its decision once (the
    second got "already approved" for its own stream's decision) and share one run."""
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "Paid."])
    paused = await agent.agenerate("go")
    stream = agent.aapprove_tool_call(run_id=paused.run_id, decided_by="alice")

    async def awaited() -> AsyncAgentStream:
        return await stream

    first, second = await asyncio.gather(awaited(), awaited())
    assert first is stream and second is stream
    assert (await stream.result()).text == "Paid."
    assert ledger.names() == ["pay"]


def _slow_reads(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The API's read of a thread's latest checkpoint takes `seconds` (slow storage)."""
    import time

    import graphkit.agent

    real = graphkit.agent.latest

    def slow(*args: object, **kwargs: object) -> object:
        time.sleep(seconds)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(graphkit.agent, "latest", slow)


def test_a_decision_stream_cancelled_while_it_is_prepared_leaves_nothing_held(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task cancelled while its decision stream is prepared in a thread (a timeout): the
    invocation that thread then makes is dropped, and releases itself (`Invocation`): the
    thread's lease and the checkpoint it served go, and the agent reads the thread as it is
    after another process finished the run, not as it was (helper-14: its next run started
    from the stale checkpoint, and the thread's history lost the run's end)."""
    import gc
    import time
    from pathlib import Path

    from tests.worker_agent import make

    monkeypatch.setenv("GRAPHKIT_TEST_EFFECTS", str(Path(str(tmp_path)) / "effects.db"))
    url = f"sqlite:///{Path(str(tmp_path)) / 'runs.db'}"
    agent = make(url)
    paused = agent.generate("move 1")

    async def cancelled() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.aapprove_tool_call(run_id=paused.run_id,
                                                            decided_by="ops"), 0.2)
        await asyncio.sleep(1.0)  # the thread finishes preparing, for nobody

    with monkeypatch.context() as slow:
        _slow_reads(slow, 0.5)
        asyncio.run(cancelled())
        gc.collect()
    deadline = time.monotonic() + 10
    while agent._storage.ledger._sql.query("SELECT 1 FROM graphkit_leases"):
        assert time.monotonic() < deadline, "the thread was never given back"
        time.sleep(0.05)
    assert make(url).resume(run_id=paused.run_id).text == "done"  # another process finishes
    assert agent.snapshot(run_id=paused.run_id)["status"] == "stop"
    again = agent.generate("move 2", thread_id=paused.thread_id)
    assert again.finish_reason == "suspended"  # a new call to approve, as after any run


def test_a_stream_awaited_again_on_another_loop_prepares_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream whose first awaits failed (timed out on one event loop) is awaited by two
    tasks on another: both get it (helper-14: the lock of the first loop raised)."""
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "Paid."])
    paused = agent.generate("go")
    stream = agent.aapprove_tool_call(run_id=paused.run_id, decided_by="alice")

    async def first() -> list[object]:
        async def once() -> object:
            return await asyncio.wait_for(stream._ready(), 0.2)

        return await asyncio.gather(once(), once(), return_exceptions=True)

    with monkeypatch.context() as slow:
        _slow_reads(slow, 0.5)
        assert all(isinstance(r, TimeoutError) for r in asyncio.run(first()))

    async def second() -> str:
        async def awaited() -> AsyncAgentStream:
            return await stream

        assert await asyncio.gather(awaited(), awaited()) == [stream, stream]
        return (await stream.result()).text

    assert asyncio.run(second()) == "Paid."
    assert ledger.names() == ["pay"]


def _held(agent: object, thread_id: str) -> bool:
    """Whether another door would wait for the thread now (its lease is taken)."""
    from graphkit._ledger import RunBusyError

    try:
        with agent._storage.ledger.lease(thread_id, wait=0.2):  # type: ignore[attr-defined]
            return False
    except RunBusyError:
        return True


@pytest.mark.parametrize("how", ["close", "with"])
def test_a_stream_closed_part_read_gives_its_thread_back_and_its_run_goes_on(how: str) -> None:
    """A stream read in part held its thread's lease until it was collected, so every other
    door to the thread waited (or raised `RunBusyError`), and `RunBusyError` told the user to
    close a stream that had no `close`. Closed, it stops the run after its step and gives the
    thread back; `resume` goes on from there, and nothing is lost or run twice."""
    agent, ledger = agent_with([turn(call("lookup", {"key": "a"}, "c0"), call("pay", PAY, "c1"),
                                     text="Let me look and pay."), "All done now."])
    stream = agent.stream("go")
    if how == "close":
        first = next(iter(stream))
        assert _held(agent, stream.thread_id)
        stream.close()
    else:
        with stream:
            first = next(iter(stream))
    assert first.type == "start"  # (the message is in the thread already: resume reads it)
    assert not _held(agent, stream.thread_id)
    assert list(stream) == []  # closed: reading on advances nothing
    with pytest.raises(RuntimeError, match="closed before the run ended"):
        stream.result()
    resumed = agent.resume(run_id=stream.run_id)
    assert resumed.finish_reason == "suspended" and ledger.names() == ["lookup"]
    assert [p.tool_call_id for p in resumed.pending_approvals] == ["c1"]
    final = agent.approve_tool_call_generate(run_id=stream.run_id, decided_by="ops")
    assert final.text == "All done now." and ledger.names() == ["lookup", "pay"]


def test_a_stream_closed_before_it_is_read_never_runs() -> None:
    agent, ledger = agent_with([turn(call("lookup", {"key": "a"}, "c0")), "done"])
    stream = agent.stream("go")
    stream.close()
    assert list(stream) == [] and ledger.names() == []
    assert agent.generate("go", thread_id=stream.thread_id).text == "done"


@pytest.mark.parametrize("how", ["read in part", "awaited unread"])
async def test_an_async_stream_closed_gives_its_thread_back(how: str) -> None:
    """The async twin, and a stream that was awaited (which takes the thread) but never read:
    `aclose` (or leaving `async with`) gives the thread back at once, not when collected."""
    agent, ledger = agent_with([turn(call("lookup", {"key": "a"}, "c0"), call("pay", PAY, "c1")),
                                "Paid."])
    async with agent.astream("go") as stream:
        if how == "read in part":
            assert (await anext(aiter(stream))).type == "start"
        else:
            await stream
        assert await asyncio.to_thread(_held, agent, stream.thread_id)
    assert not await asyncio.to_thread(_held, agent, stream.thread_id)
    assert [c async for c in stream] == []
    with pytest.raises(RuntimeError, match="closed before the run ended"):
        await stream.result()
    if how == "awaited unread":  # its message never reached the thread: a typed error says so
        with pytest.raises(SnapshotNotFoundError, match="send the message again"):
            await agent.aresume(run_id=stream.run_id)
        assert ledger.names() == []
        stream = agent.astream("go", thread_id=stream.thread_id)
        assert (await stream.result()).finish_reason == "suspended"
    else:
        resumed = await agent.aresume(run_id=stream.run_id)
        assert resumed.finish_reason == "suspended"
    final = await agent.aapprove_tool_call_generate(run_id=stream.run_id, decided_by="ops")
    assert final.text == "Paid." and ledger.names() == ["lookup", "pay"]


async def test_an_async_stream_closed_mid_step_lets_the_step_end_as_the_sync_one_does(
        tmp_path: object) -> None:
    """`aclose` while an approved async tool was running cancelled it: its payment went
    through, and the model was told its outcome is unknown (helper-107). As the sync twin's
    close waits for its tools' threads, the async one lets the step in progress end: the
    tool finishes once, its result stands, and the run goes on from there."""
    from graphkit import Agent, create_tool
    from graphkit.testing import ScriptedChatModel

    done: list[str] = []
    started = asyncio.Event()

    @create_tool(needs_approval=True)
    async def note(x: int) -> str:
        """Note."""
        done.append("noted")
        return "noted"

    @create_tool(needs_approval=True)
    async def pay(amount: int) -> str:
        """Pay."""
        started.set()
        await asyncio.sleep(0.5)
        done.append(f"paid {amount}")
        return "paid"

    agent = Agent(name="a", tools=[note, pay], checkpointer=f"sqlite:///{tmp_path}/r.db",
                  model=ScriptedChatModel([turn(call("note", {"x": 1}, "n1"),
                                                call("pay", {"amount": 7}, "p1")), "done"]))
    paused = await agent.agenerate("go")
    (paying,) = [p for p in paused.pending_approvals if p.tool_call_id == "p1"]
    await agent.aresolve_tool_approval(run_id=paused.run_id, id=paying.id, approved=True)
    stream = agent.aapprove_tool_call(run_id=paused.run_id, tool_call_id="n1")
    async for chunk in stream:
        if chunk.type == "tool-result":
            break
    await started.wait()
    await stream.aclose()
    assert done == ["noted", "paid 7"]
    final = await agent.aresume(run_id=paused.run_id)
    assert final.text == "done" and done == ["noted", "paid 7"]
    assert [m.text for m in final.messages if isinstance(m, ToolMessage)] == ["noted", "paid"]
