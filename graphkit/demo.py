"""The deploy example of the seeds, shared by `graphkit demo` and `graphs/deploy.py`.

Offline it runs on a deterministic model that reads the conversation; with `OPENAI_API_KEY`
(or `GRAPHKIT_MODEL`, e.g. `openai:gpt-4o-mini`; `OPENAI_BASE_URL` for any
OpenAI-compatible server) it runs on a real one.
"""

from __future__ import annotations

import os
import re
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from graphkit.agent import Agent
from graphkit.testing import ScriptedChatModel
from graphkit.tools import GraphkitTool, create_tool

__all__ = ["DEPLOY_INSTRUCTIONS", "demo_model", "deploy_agent", "deploy_tools", "pick_model"]

DEPLOY_INSTRUCTIONS = (
    "You are a release assistant. Check a build's status before rolling it out, then deploy it "
    "with deploy_service. Deployments need a human's approval; if one is rejected, say so."
)


def deploy_tools() -> list[GraphkitTool]:
    """`build_status` (runs freely) and `deploy_service` (always asks first)."""

    @create_tool
    def build_status(version: str) -> str:
        """Report whether a build passed CI and may be deployed."""
        return f"build {version}: CI green, 1,204 tests passed, signed"

    @create_tool(
        needs_approval=True,
        approval_prompt="Send build {{version}} to prod?",
        approval_defaults={"channel": "ops", "priority": "high"},
    )
    def deploy_service(version: str) -> str:
        """Roll out the given build of the service to production."""
        return f"rolled out {version} to production (3/3 regions healthy)"

    return [build_status, deploy_service]


def _demo_reply(messages: list[BaseMessage]) -> AIMessage:
    """A tiny rule-based stand-in for an LLM, so the demo runs offline and the same every time."""
    asked = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    text = str(asked.content) if asked else ""
    match = re.search(r"\d+(?:\.\d+)+", text)
    version = match.group(0) if match else "1.4.2"
    since = messages[messages.index(asked) + 1 :] if asked else messages
    results = [m for m in since if isinstance(m, ToolMessage)]
    turn = sum(isinstance(m, AIMessage) for m in since)
    if not results and turn == 0:
        return AIMessage(
            f"Checking build {version} first.",
            tool_calls=[{"name": "build_status", "args": {"version": version},
                         "id": f"call_status_{turn}"}],
        )
    last = results[-1]
    if last.name == "build_status":
        return AIMessage(
            f"Build {version} is green. Requesting a production rollout.",
            tool_calls=[{"name": "deploy_service", "args": {"version": version},
                         "id": f"call_deploy_{turn}"}],
        )
    if last.status == "error":
        return AIMessage(f"The rollout was not done: {last.content}")
    return AIMessage(f"Done: {last.content}.")


def demo_model() -> ScriptedChatModel:
    """The offline model of the demo and the example graphs."""
    return ScriptedChatModel(_demo_reply)


def pick_model() -> BaseChatModel | str:
    """A real model when the environment names one, else the offline demo model."""
    named = os.environ.get("GRAPHKIT_MODEL")
    if named:
        return named
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    return demo_model()


def deploy_agent(**kwargs: Any) -> Agent:
    """The deploy agent: `Agent(name="release", ...)` with the demo's tools and model."""
    kwargs.setdefault("model", pick_model())
    return Agent(name="release", tools=deploy_tools(), instructions=DEPLOY_INSTRUCTIONS, **kwargs)
