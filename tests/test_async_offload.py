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
