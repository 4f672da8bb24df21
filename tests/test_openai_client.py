"""The OpenAI path for real: langchain-openai's ChatOpenAI against a local OpenAI-compatible
server that streams scripted tool calls as deltas. No Python-level mock of the client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_openai import ChatOpenAI

from graphkit import Agent, create_tool
from tests.openai_server import OpenAIServer, Reply, last_tool_result


def deploy_script(body: dict[str, Any]) -> Reply:
    result = last_tool_result(body)
    if result is None:
        assert any(t["function"]["name"] == "deploy_service" for t in body.get("tools", []))
        return Reply("Deploying 3.1.0 now.",
                     [("call_dep_1", "deploy_service", {"version": "3.1.0", "dry_run": False})])
    return Reply(f"Result: {result['content']}")


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(deploy_script) as running:
        yield running


def deploy_tool(ran: list[dict[str, Any]]) -> Any:
    @create_tool(needs_approval=True, approval_prompt="Send build {{version}} to prod?")
    def deploy_service(version: str, dry_run: bool = False) -> str:
        """Roll out a build."""
        ran.append({"version": version, "dry_run": dry_run})
        return f"rolled out {version}"

    return deploy_service


def client(server: OpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="sk-test",  # type: ignore[arg-type]
                      max_retries=0, timeout=30)


def test_approval_round_trip_with_streamed_tool_call_deltas(server: OpenAIServer) -> None:
    ran: list[dict[str, Any]] = []
    agent = Agent(name="release", model=client(server), tools=[deploy_tool(ran)])
    stream = agent.stream("ship 3.1.0")
    chunks = list(stream)
    assert server.requests[0]["stream"] is True  # the tool call arrived as SSE deltas
    text = "".join(c.payload["text"] for c in chunks if c.type == "text-delta")
    assert text == "Deploying 3.1.0 now."
    (approval,) = [c for c in chunks if c.type == "tool-call-approval"]
    assert approval.payload["tool_call_id"] == "call_dep_1"
    assert approval.payload["args"] == {"version": "3.1.0", "dry_run": False}
    assert approval.payload["prompt"] == "Send build 3.1.0 to prod?"
    assert ran == []

    final = agent.approve_tool_call_generate(run_id=stream.run_id, decided_by="ops",
                                             args={"version": "3.1.0", "dry_run": True})
    assert ran == [{"version": "3.1.0", "dry_run": True}]
    assert final.text == "Result: rolled out 3.1.0"
    sent = server.requests[-1]["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["tool_call_id"] == "call_dep_1"
    assert sent[-1]["content"] == "rolled out 3.1.0"
    calls = next(m for m in sent if m["role"] == "assistant")["tool_calls"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"version": "3.1.0", "dry_run": True}


def test_decline_through_the_real_client(server: OpenAIServer) -> None:
    ran: list[dict[str, Any]] = []
    agent = Agent(name="release", model=client(server), tools=[deploy_tool(ran)])
    result = agent.generate("ship 3.1.0")
    final = agent.decline_tool_call_generate(run_id=result.run_id, decided_by="ops",
                                             comment="code freeze")
    assert ran == []
    rejection = server.requests[-1]["messages"][-1]
    assert rejection["role"] == "tool" and "code freeze" in rejection["content"]
    assert final.text.startswith("Result: Tool call 'deploy_service' was rejected")


def weather_script(body: dict[str, Any]) -> Reply:
    result = last_tool_result(body)
    if result is None:
        return Reply("", [("call_wx", "weather", {})])
    return Reply(f"Weather: {result['content']}")


def test_suspension_through_the_real_client() -> None:
    from pydantic import BaseModel

    from graphkit import ToolContext

    class City(BaseModel):
        city: str

    @create_tool(resume_schema=City)
    def weather(ctx: ToolContext) -> Any:
        """Weather for a city."""
        if ctx.resume_data is None:
            return ctx.suspend({"message": "Which city?"})
        return f"{ctx.resume_data.city}: sunny"

    with OpenAIServer(weather_script) as server:
        agent = Agent(name="wx", model=client(server), tools=[weather])
        result = agent.generate("weather?")
        assert result.finish_reason == "suspended"
        assert result.suspend_payload is not None
        assert result.suspend_payload["message"] == "Which city?"
        final = agent.resume_generate({"city": "Oslo"}, run_id=result.run_id)
        assert final.text == "Weather: Oslo: sunny"
        assert any(isinstance(m, ToolMessage) and m.text == "Oslo: sunny"
                   for m in final.messages)


def test_examples_use_a_real_model_named_by_the_environment(
        server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphkit.examples import deploy_agent

    def script(body: dict[str, Any]) -> Reply:
        result = last_tool_result(body)
        if result is None:
            return Reply("", [("call_env", "deploy_service", {"version": "9.9.9"})])
        return Reply("done via env")

    server.script = script
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("GRAPHKIT_MODEL", "openai:gpt-4o-mini")
    agent = deploy_agent()
    assert isinstance(agent.model, ChatOpenAI)
    result = agent.generate("ship it")
    assert result.suspend_payload is not None
    assert result.suspend_payload["prompt"] == "Send build 9.9.9 to prod?"
    assert agent.approve_tool_call_generate(run_id=result.run_id).text == "done via env"
