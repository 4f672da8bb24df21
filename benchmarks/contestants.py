"""The runtimes `make bench` compares, each driving one approval round trip the same way:
invoke to the pause, approve, run to the final answer; same scripted model, same storage."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt

from graphkit import Agent, create_tool
from graphkit._runs import DURABILITY
from graphkit.testing import ScriptedChatModel

Storage = Literal["memory", "sqlite"]
RoundTrip = Callable[[], Any]

EQUAL: dict[str, Any] = {"durability": DURABILITY}
"""How the peers are run: at the LangGraph durability graphkit runs its graphs at ("sync":
each step's checkpoint is written before the next step starts). LangGraph's default, "async",
writes it beside the next step, which is cheaper and loses the step on a crash: the issue asks
for figures at equal durability."""


def reply(messages: list[BaseMessage]) -> AIMessage:
    """One tool call after a user message, an answer after a tool result."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("Deployed.")
    return AIMessage("", tool_calls=[{"name": "deploy", "args": {"version": "1.4.2"},
                                      "id": f"call_{uuid.uuid4().hex[:8]}"}])


def model() -> ScriptedChatModel:
    return ScriptedChatModel(reply)


def _deploy(version: str) -> str:
    """Roll out a build."""
    return f"deployed {version}"


def top(messages: list[BaseMessage]) -> AIMessage:
    """The supervisor's model: delegate once, then answer with the result."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("Deployed.")
    return AIMessage("", tool_calls=[{"name": "worker", "args": {"task": "ship 1.4.2"},
                                      "id": f"call_{uuid.uuid4().hex[:8]}"}])


def saver(kind: Storage, directory: Path, name: str) -> Any:
    if kind == "memory":
        return InMemorySaver()
    conn = sqlite3.connect(directory / f"{name}.db", check_same_thread=False)
    return SqliteSaver(conn)


# ---------------------------------------------------------------------------------- graphkit


def graphkit_agent(kind: Storage, directory: Path, *, approval: bool = True) -> Agent:
    deploy = create_tool(_deploy, name="deploy", needs_approval=approval)
    url = "memory" if kind == "memory" else f"sqlite:///{directory / 'graphkit.db'}"
    return Agent(name="bench", model=model(), tools=[deploy], checkpointer=url)


def graphkit_round(agent: Agent, *, approval: bool = True) -> RoundTrip:
    def run() -> None:
        result = agent.generate("ship 1.4.2")
        if approval:
            assert result.finish_reason == "suspended"
            result = agent.approve_tool_call_generate(run_id=result.run_id)
        assert result.text == "Deployed.", result

    return run


def graphkit_async_round(agent: Agent, thread_id: str | None = None) -> Callable[[], Any]:
    """Each round on a new thread, or all on `thread_id`."""

    async def run() -> None:
        result = await agent.agenerate("ship 1.4.2", thread_id=thread_id)
        result = await agent.aapprove_tool_call_generate(run_id=result.run_id)
        assert result.text == "Deployed."

    return run


def graphkit_supervisor(kind: Storage, directory: Path) -> Agent:
    deploy = create_tool(_deploy, name="deploy", needs_approval=True)
    sub = Agent(name="worker", description="Deploys builds", model=model(), tools=[deploy])

    url = "memory" if kind == "memory" else f"sqlite:///{directory / 'graphkit-sup.db'}"
    return Agent(name="sup", model=ScriptedChatModel(top), agents={"worker": sub},
                 checkpointer=url)


# ---------------------------------------------------------------------------------- LangChain


def langchain_agent(kind: Storage, directory: Path, *, approval: bool = True) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    middleware = [HumanInTheLoopMiddleware(interrupt_on={"deploy": True})] if approval else []
    return create_agent(model(), tools=[tool("deploy")(_deploy)], middleware=middleware,
                        checkpointer=saver(kind, directory, "langchain"))


def langchain_round(graph: Any, *, approval: bool = True) -> RoundTrip:
    def run() -> None:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        out = graph.invoke({"messages": [("user", "ship 1.4.2")]}, config, **EQUAL)
        if approval:
            assert "__interrupt__" in out
            out = graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config,
                               **EQUAL)
        assert out["messages"][-1].text == "Deployed."

    return run


def langchain_async_round(graph: Any, thread_id: str | None = None) -> Callable[[], Any]:
    async def run() -> None:
        config = {"configurable": {"thread_id": thread_id or uuid.uuid4().hex}}
        await graph.ainvoke({"messages": [("user", "ship 1.4.2")]}, config, **EQUAL)
        out = await graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config,
                                  **EQUAL)
        assert out["messages"][-1].text == "Deployed."

    return run


def langchain_supervisor(kind: Storage, directory: Path) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    sub = create_agent(model(), tools=[tool("deploy")(_deploy)],
                       middleware=[HumanInTheLoopMiddleware(interrupt_on={"deploy": True})])

    @tool
    def worker(task: str) -> str:
        """Delegate to the worker agent."""
        return str(sub.invoke({"messages": [("user", task)]})["messages"][-1].text)

    return create_agent(ScriptedChatModel(top), tools=[worker],
                        checkpointer=saver(kind, directory, "langchain-sup"))


# ---------------------------------------------------------------------------------- hand-written


class _State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def _model_node(bound: ScriptedChatModel) -> Callable[[_State], dict[str, Any]]:
    """A hand-written graph's model node: one turn of `bound` over the conversation."""

    def call_model(state: _State) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    return call_model


def _minimal_builder(on_call: Callable[[str], Any] | None = None) -> StateGraph[Any]:
    """The least a LangGraph graph with an approval `interrupt()` needs (`on_call` hears each
    call id as its tool runs)."""
    call_model = _model_node(model())

    def route(state: _State) -> str:
        last = state["messages"][-1]
        return "approve" if isinstance(last, AIMessage) and last.tool_calls else "__end__"

    def approve(state: _State) -> dict[str, Any]:
        interrupt({"tool_calls": state["messages"][-1].tool_calls})  # type: ignore[union-attr]
        return {}

    def run_tools(state: _State) -> dict[str, Any]:
        calls = state["messages"][-1].tool_calls  # type: ignore[union-attr]
        for call in calls if on_call is not None else ():
            on_call(call["id"])
        return {"messages": [ToolMessage(_deploy(**c["args"]), tool_call_id=c["id"])
                             for c in calls]}

    builder = StateGraph(_State)
    builder.add_node("model", call_model)
    builder.add_node("approve", approve)
    builder.add_node("tools", run_tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route)
    builder.add_edge("approve", "tools")
    builder.add_edge("tools", "model")
    return builder


def minimal_graph(kind: Storage, directory: Path, *, checkpointer: Any = None,
                  on_call: Callable[[str], Any] | None = None) -> Any:
    """The minimal graph on `checkpointer`, or on a saver of `kind`."""
    return _minimal_builder(on_call).compile(
        checkpointer=checkpointer if checkpointer is not None
        else saver(kind, directory, "minimal"))


def minimal_supervisor(kind: Storage, directory: Path) -> Any:
    """A hand-written supervisor: its `worker` node runs the minimal graph as a subgraph (on
    the parent's checkpointer), whose approval `interrupt()` pauses the parent."""
    sub = _minimal_builder().compile()
    call_model = _model_node(ScriptedChatModel(top))

    def route(state: _State) -> str:
        last = state["messages"][-1]
        return "worker" if isinstance(last, AIMessage) and last.tool_calls else "__end__"

    def worker(state: _State) -> dict[str, Any]:
        (call,) = state["messages"][-1].tool_calls  # type: ignore[union-attr]
        out = sub.invoke({"messages": [("user", call["args"]["task"])]})
        return {"messages": [ToolMessage(out["messages"][-1].text, tool_call_id=call["id"])]}

    builder = StateGraph(_State)
    builder.add_node("model", call_model)
    builder.add_node("worker", worker)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route)
    builder.add_edge("worker", "model")
    return builder.compile(checkpointer=saver(kind, directory, "minimal-sup"))


def minimal_parallel(reply_of: Callable[[list[BaseMessage]], AIMessage], run: Callable[..., Any],
                     checkpointer: Any) -> Any:
    """The least graph that runs a turn's tool calls in parallel: one `Send` per call to a
    node that runs it (sync or async as `run` is), then back to the model."""
    import inspect

    call_model = _model_node(ScriptedChatModel(reply_of))

    def route(state: _State) -> Any:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return [Send("tool", call) for call in last.tool_calls]
        return "__end__"

    def one_call(call: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [ToolMessage(str(run(**call["args"])), tool_call_id=call["id"])]}

    async def one_acall(call: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [ToolMessage(str(await run(**call["args"])),
                                         tool_call_id=call["id"])]}

    builder = StateGraph(_State)
    builder.add_node("model", call_model)
    builder.add_node("tool", one_acall if inspect.iscoroutinefunction(run) else one_call)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tool", "__end__"])
    builder.add_edge("tool", "model")
    return builder.compile(checkpointer=checkpointer)


def minimal_round(graph: Any) -> RoundTrip:
    def run() -> None:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        graph.invoke({"messages": [("user", "ship 1.4.2")]}, config, **EQUAL)
        out = graph.invoke(Command(resume=True), config, **EQUAL)
        assert out["messages"][-1].text == "Deployed."

    return run


def minimal_async_round(graph: Any, thread_id: str | None = None) -> Callable[[], Any]:
    async def run() -> None:
        config = {"configurable": {"thread_id": thread_id or uuid.uuid4().hex}}
        await graph.ainvoke({"messages": [("user", "ship 1.4.2")]}, config, **EQUAL)
        out = await graph.ainvoke(Command(resume=True), config, **EQUAL)
        assert out["messages"][-1].text == "Deployed."

    return run
