"""The example agents of the seeds: deploy, bash, weather and a supervisor with subagents.

`graphs/` serves them to LangGraph Studio and `graphkit demo` runs the deploy one. Offline they
run on small deterministic models that read the conversation (so every example works without
a network or a key); with `OPENAI_API_KEY` set (or `GRAPHKIT_MODEL`, e.g.
`openai:gpt-4o-mini`; `OPENAI_BASE_URL` for any OpenAI-compatible server) they use a real one.
"""

from __future__ import annotations

import os
import re
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic import BaseModel

from graphkit.agent import Agent
from graphkit.testing import ScriptedChatModel, reply_text
from graphkit.tools import GraphkitTool, ToolContext, create_tool

__all__ = [
    "DEPLOY_INSTRUCTIONS",
    "bash_agent",
    "demo_model",
    "deploy_agent",
    "deploy_tools",
    "pick_model",
    "supervisor_agent",
    "weather_agent",
]

DEPLOY_INSTRUCTIONS = (
    "You are a release assistant. Check a build's status before rolling it out, then deploy it "
    "with deploy_service. Deployments need a human's approval; if one is rejected, say so."
)
DESTRUCTIVE = re.compile(r"^\s*(rm|shutdown|mkfs)\b")


def pick_model(offline: BaseChatModel) -> BaseChatModel | str:
    """A real model when the environment names one, else the offline stand-in."""
    named = os.environ.get("GRAPHKIT_MODEL")
    if named:
        return named
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    return offline


def _since_user(messages: list[BaseMessage]) -> tuple[str, list[BaseMessage]]:
    """The last user message and what came after it."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return str(messages[index].content), messages[index + 1 :]
    return "", messages


def _last_result(since: list[BaseMessage]) -> ToolMessage | None:
    results = [m for m in since if isinstance(m, ToolMessage)]
    return results[-1] if results else None


def _call(name: str, args: dict[str, Any], turn: int, index: int = 0) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"call_{name}_{turn}_{index}"}


# ---------------------------------------------------------------------------------- deploy


def deploy_tools() -> list[GraphkitTool]:
    """`build_status` (runs freely) and the seed's `deploy_service` (always asks first)."""

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


def _deploy_reply(messages: list[BaseMessage]) -> AIMessage:
    asked, since = _since_user(messages)
    match = re.search(r"\d+(?:\.\d+)+", asked)
    version = match.group(0) if match else "1.4.2"
    turn = sum(isinstance(m, AIMessage) for m in since)
    last = _last_result(since)
    if last is None:
        return AIMessage(f"Checking build {version} first.",
                         tool_calls=[_call("build_status", {"version": version}, turn)])
    if last.name == "build_status":
        return AIMessage(f"Build {version} is green. Requesting a production rollout.",
                         tool_calls=[_call("deploy_service", {"version": version}, turn)])
    if last.status == "error":
        return AIMessage(f"The rollout was not done: {last.content}")
    return AIMessage(f"Done: {last.content}.")


def demo_model() -> ScriptedChatModel:
    """The offline model of the deploy demo."""
    return ScriptedChatModel(_deploy_reply)


def deploy_agent(**kwargs: Any) -> Agent:
    """The seed's deploy flow: `build_status`, then `deploy_service` with a review card."""
    kwargs.setdefault("model", pick_model(demo_model()))
    return Agent(name="release", tools=deploy_tools(), instructions=DEPLOY_INSTRUCTIONS, **kwargs)


# ---------------------------------------------------------------------------------- bash


def _bash_reply(messages: list[BaseMessage]) -> AIMessage:
    asked, since = _since_user(messages)
    if not any(isinstance(m, AIMessage) for m in since):
        commands = [c.strip() for c in re.split(r"[;\n]", asked.split(":", 1)[-1]) if c.strip()]
        return AIMessage("", tool_calls=[_call("bash", {"command": c}, 0, i)
                                         for i, c in enumerate(commands)])
    results = [m for m in since if isinstance(m, ToolMessage)]
    return AIMessage("\n".join(f"{m.status}: {m.content}" for m in results) or "Nothing ran.")


def bash_agent(**kwargs: Any) -> Agent:
    """A shell tool that asks only before `rm`, `shutdown` and `mkfs` (the seed's predicate)."""

    @create_tool(
        needs_approval=lambda args: bool(DESTRUCTIVE.match(args["command"])),
        approval_prompt=lambda args: f"Run `{args['command']}`?",
    )
    def bash(command: str) -> str:
        """Run a shell command (simulated: nothing touches this machine)."""
        return f"$ {command}\n(simulated) ok"

    kwargs.setdefault("model", pick_model(ScriptedChatModel(_bash_reply)))
    return Agent(name="shell", tools=[bash], **kwargs,
                 instructions="Run the commands the user asks for, one tool call each.")


# ---------------------------------------------------------------------------------- weather


class AskCity(BaseModel):
    message: str


class City(BaseModel):
    city: str


def _weather_reply(messages: list[BaseMessage]) -> AIMessage:
    # A tool result at the end (or just before the reply that resumed it) is the answer.
    tail = messages[-2:] if isinstance(messages[-1], HumanMessage) else messages[-1:]
    result = next((m for m in reversed(tail) if isinstance(m, ToolMessage)), None)
    if result is not None:
        return AIMessage(f"The weather in {result.content}")
    turn = sum(isinstance(m, AIMessage) for m in messages)
    return AIMessage("", tool_calls=[_call("weather", {}, turn)])


def _city_from(schema: Any, messages: list[BaseMessage]) -> dict[str, Any]:
    """Offline stand-in for structured output: a short reply is taken as the city."""
    said = reply_text(messages).strip().rstrip(".!?")
    return {"city": said} if said and len(said.split()) <= 4 else {}


def weather_agent(**kwargs: Any) -> Agent:
    """A tool that suspends to ask for the city; the next message resumes it (auto-resume)."""

    @create_tool(suspend_schema=AskCity, resume_schema=City)
    def weather(ctx: ToolContext) -> Any:
        """Fetch the weather for a city, asking the user which one."""
        if ctx.resume_data is None:
            return ctx.suspend({"message": "What city do you want to know the weather for?"})
        return f"{ctx.resume_data.city}: sunny, +22°C (simulated)"

    kwargs.setdefault("model", pick_model(ScriptedChatModel(_weather_reply,
                                                            structured=_city_from)))
    kwargs.setdefault("auto_resume_suspended_tools", True)
    return Agent(name="weather", tools=[weather], **kwargs,
                 instructions="Use the weather tool; it asks the user for the city.")


# ---------------------------------------------------------------------------------- supervisor


def _delegate_or_answer(target: str, task: str) -> Any:
    def reply(messages: list[BaseMessage]) -> AIMessage:
        asked, since = _since_user(messages)
        last = _last_result(since)
        if last is None:
            return AIMessage("", tool_calls=[_call(target, {"task": task.format(asked=asked)},
                                                   0)])
        return AIMessage(str(last.content))

    return reply


def _supervisor_reply(messages: list[BaseMessage]) -> AIMessage:
    asked, since = _since_user(messages)
    last = _last_result(since)
    if last is not None:
        return AIMessage(f"Here is what the team found: {last.content}")
    if re.search(r"purge|logs?|clean", asked, re.I):
        return AIMessage("", tool_calls=[_call("ops_team", {"task": asked}, 0)])
    user = re.search(r"\d+", asked)
    return AIMessage("", tool_calls=[_call("data_agent", {
        "task": f"find user {user.group(0) if user else '12345'}"}, 0)])


def _find_user_reply(messages: list[BaseMessage]) -> AIMessage:
    asked, since = _since_user(messages)
    last = _last_result(since)
    if last is None:
        user = re.search(r"\d+", asked)
        return AIMessage("", tool_calls=[_call("find-user", {
            "userId": user.group(0) if user else "12345"}, 0)])
    if last.status == "error":
        return AIMessage(f"I could not look the user up: {last.content}")
    return AIMessage(f"Found {last.content}")


def supervisor_agent(**kwargs: Any) -> Agent:
    """supervisor -> data_agent -> find-user (the seed), and supervisor -> ops_team ->
    audit_agent -> purge_logs (a third level). Both tools ask for approval."""

    @create_tool(name="find-user", needs_approval=True)
    def find_user(userId: str) -> dict[str, str]:
        """Finds user by ID in the database."""
        return {"id": userId, "name": "John", "email": "john@example.com"}

    @create_tool(needs_approval=True, approval_prompt="Purge logs older than {{days}} days?")
    def purge_logs(days: int = 30) -> str:
        """Delete old logs (simulated)."""
        return f"purged logs older than {days} days (simulated)"

    def model(offline: Any) -> BaseChatModel | str:
        return pick_model(ScriptedChatModel(offline))

    data_agent = Agent(name="data_agent", description="Handles database queries and user data",
                       tools=[find_user], model=model(_find_user_reply))
    audit_agent = Agent(name="audit_agent", description="Maintains audit logs",
                        tools=[purge_logs],
                        model=model(_purge_reply))
    ops_team = Agent(name="ops_team", description="Operations: logs, cleanups, maintenance",
                     agents={"audit_agent": audit_agent},
                     model=model(_delegate_or_answer("audit_agent", "{asked}")))
    kwargs.setdefault("model", model(_supervisor_reply))
    return Agent(name="supervisor", agents={"data_agent": data_agent, "ops_team": ops_team},
                 instructions="You coordinate data retrieval and operations. Delegate to "
                              "data_agent for user lookups and to ops_team for maintenance.",
                 **kwargs)


def _purge_reply(messages: list[BaseMessage]) -> AIMessage:
    asked, since = _since_user(messages)
    last = _last_result(since)
    if last is None:
        days = re.search(r"\d+", asked)
        return AIMessage("", tool_calls=[_call("purge_logs", {
            "days": int(days.group(0)) if days else 30}, 0)])
    return AIMessage(str(last.content))
