"""Async runs keep the application's code off the event loop: approval predicates, prompt
functions and approvers policies may block (a database, a directory lookup), so they run in a
thread even when the storage is in memory and graphkit's own work stays on the loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, turn


def test_predicates_prompts_and_policies_never_run_on_the_event_loop() -> None:
    seen: list[tuple[str, bool]] = []
    loop_thread: list[threading.Thread] = []

    def on_loop(what: str) -> None:
        seen.append((what, threading.current_thread() is loop_thread[0]))

    def big(args: dict[str, Any]) -> bool:
        on_loop("predicate")
        return bool(args["amount"] > 10)

    def prompt(args: dict[str, Any]) -> str:
        on_loop("prompt")
        return f"Pay {args['amount']}?"

    def approvers(decided_by: str, pending: Any) -> bool:
        on_loop("policy")
        return decided_by == "cfo"

    @create_tool(needs_approval=big, approval_prompt=prompt)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    agent = Agent(name="billing", tools=[pay], approvers=approvers,
                  model=ScriptedChatModel([turn(call("pay", {"amount": 40}, "c1")), "done"]))

    async def main() -> str:
        loop_thread.append(threading.current_thread())
        first = await agent.agenerate("pay")
        done = await agent.aapprove_tool_call_generate(run_id=first.run_id, decided_by="cfo")
        return done.text

    assert asyncio.run(main()) == "done"
    assert {what for what, _ in seen} == {"predicate", "prompt", "policy"}
    assert not [what for what, on in seen if on], seen


def test_validators_of_edited_args_and_resume_data_never_run_on_the_event_loop() -> None:
    """An in-memory agent with no policy prepares its async runs on the loop; a decision that
    runs a tool's validators (edited arguments, resume data) still prepares in a thread."""
    from pydantic import BaseModel, field_validator

    from graphkit import ToolContext

    seen: list[tuple[str, bool]] = []
    loop_thread: list[threading.Thread] = []

    def note(what: str) -> None:
        seen.append((what, threading.current_thread() is loop_thread[0]))

    class Payment(BaseModel):
        amount: int

        @field_validator("amount")
        @classmethod
        def positive(cls, v: int) -> int:
            note("args")
            return v

    class City(BaseModel):
        city: str

        @field_validator("city")
        @classmethod
        def known(cls, v: str) -> str:
            note("resume")
            return v

    def pay(amount: int) -> str:
        return f"paid {amount}"

    @create_tool(resume_schema=City)
    def weather(ctx: ToolContext) -> str:
        """Weather for a city."""
        if ctx.resume_data is None:
            return ctx.suspend({"message": "Which city?"})
        return f"{ctx.resume_data.city}: sunny"

    tool = create_tool(pay, name="pay", description="Pay.", args_schema=Payment,
                       needs_approval=True)
    agent = Agent(name="billing", tools=[tool, weather], model=ScriptedChatModel([
        turn(call("pay", {"amount": 40}, "c1")), "paid",
        turn(call("weather", {}, "w1")), "sunny"]))

    async def main() -> tuple[str, str]:
        loop_thread.append(threading.current_thread())
        first = await agent.agenerate("pay")
        seen.clear()  # planning validated the model's arguments: graphkit's own step
        paid = await agent.aapprove_tool_call_generate(run_id=first.run_id, args={"amount": 30})
        asked = await agent.agenerate("weather?", thread_id=first.thread_id)
        told = await agent.aresume_generate({"city": "Oslo"}, run_id=asked.run_id)
        return paid.text, told.text

    assert asyncio.run(main()) == ("paid", "sunny")
    assert {"args", "resume"} <= {what for what, _ in seen}, seen
    on_loop = [what for what, on in seen if on and what in {"args", "resume"}]
    assert not on_loop, seen


def test_an_async_run_waits_for_a_thread_another_run_holds_without_blocking_the_loop() -> None:
    """Preparing on the loop never waits there: a thread whose lease another run holds (a
    sync run with a slow tool, in another thread) is waited for in a thread."""
    import time

    from langchain_core.messages import AIMessage, ToolMessage

    started = threading.Event()

    def slow(seconds: float) -> str:
        started.set()
        time.sleep(seconds)
        return "slept"

    def reply(messages: list[Any]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage("rested")
        if "nap" in str(last.content):
            return AIMessage("", tool_calls=[call("slow", {"seconds": 0.5}, "s1")])
        return AIMessage("hello")

    agent = Agent(name="sleepy", tools=[create_tool(slow, name="slow", description="Sleep.")],
                  model=ScriptedChatModel(reply))
    thread_id = agent.generate("hi").thread_id
    sync_run = threading.Thread(target=agent.generate, args=("nap",),
                                kwargs={"thread_id": thread_id})
    sync_run.start()
    assert started.wait(5)

    async def main() -> tuple[str, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        result = await agent.agenerate("hi again", thread_id=thread_id)
        ticker.cancel()
        return result.text, ticks

    text, ticks = asyncio.run(main())
    sync_run.join(5)
    assert text == "hello"
    assert ticks >= 10, f"the event loop was blocked while the thread was busy ({ticks} ticks)"


def test_a_fresh_process_s_first_async_run_reads_nothing_on_the_loop(tmp_path: Any) -> None:
    """The first lease a process takes names its owner from /proc (`graphkit._owner`): that
    is read as graphkit is imported, never by the first async run, on its event loop (a
    suite that ran a sync run first would hide it)."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import asyncio\n"
        "from graphkit import Agent, create_tool\n"
        "from graphkit.testing import ScriptedChatModel\n"
        "from tests.blocking import no_blocking\n"
        "from tests.helpers import call, turn\n"
        "def pay(amount: int) -> str:\n"
        "    return 'paid'\n"
        "tool = create_tool(pay, name='pay', description='Pay.', needs_approval=True)\n"
        "agent = Agent(name='a', tools=[tool], model=ScriptedChatModel(\n"
        "    [turn(call('pay', {'amount': 5}, 'p1')), 'done']))\n"
        "async def main():\n"
        "    with no_blocking():\n"
        "        first = await agent.agenerate('pay')\n"
        "        done = await agent.aapprove_tool_call_generate(run_id=first.run_id)\n"
        "    print(first.finish_reason, done.text)\n"
        "asyncio.run(main())\n")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["suspended", "done"]


def test_a_forked_child_runs_sync_tools_from_async_runs(tmp_path: Any) -> None:
    """The pool that runs sync tools for async runs: a child forked after the parent used it
    has none of its threads, and gets a pool of its own (it waited for ever on the dead ones,
    helper-37)."""
    import multiprocessing
    import os

    def run(db: str) -> str:
        def nap(i: int) -> str:
            """Nap."""
            return f"napped {i}"

        agent = Agent(name="a", tools=[create_tool(nap, name="nap")], checkpointer=db,
                      model=ScriptedChatModel([turn(call("nap", {"i": 1}, "n1")), "done"]))
        return asyncio.run(agent.agenerate("nap")).text

    assert run(f"sqlite:///{tmp_path / 'parent.db'}") == "done"
    context = multiprocessing.get_context("fork")
    child = context.Process(target=lambda: os._exit(
        0 if run(f"sqlite:///{tmp_path / 'child.db'}") == "done" else 3))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0
