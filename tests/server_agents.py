"""Graphkit agents for tests/test_server_enforcement.py, served by the real `langgraph dev`.

`deploy` may be approved by the release manager only; every real rollout appends a line to
the file named by $GRAPHKIT_TEST_RUNS, so a test can count executions from outside the server.
"""

from __future__ import annotations

import os
from typing import Any

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel


@create_tool(needs_approval=True, approval_prompt="Send build {{version}} to prod?")
def deploy_service(version: str) -> str:
    """Roll a build out to production."""
    with open(os.environ["GRAPHKIT_TEST_RUNS"], "a") as log:
        log.write(f"{version}\n")
    return f"rolled out {version} to production"


def _reply(messages: list[Any]) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    last_human = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    since = messages[last_human + 1:]
    if not since:
        version = str(messages[last_human].content).split()[-1]
        return AIMessage("", tool_calls=[{"name": "deploy_service", "args": {"version": version},
                                          "id": f"call_{len(messages)}"}])
    results = [m for m in since if isinstance(m, ToolMessage)]
    return AIMessage(results[-1].content if results else "ok")


def _release_manager_only(decided_by: str | None, pending: Any) -> bool:
    return decided_by == "release-manager"


graph = Agent(name="release", model=ScriptedChatModel(_reply), tools=[deploy_service],
              approvers=_release_manager_only).graph
