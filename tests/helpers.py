"""Tools and agents the tests share. Each tool records what actually ran."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel


def call(name: str, args: dict[str, Any], id: str) -> dict[str, Any]:
    """One scripted tool call."""
    return {"name": name, "args": args, "id": id}


def turn(*calls: dict[str, Any], text: str = "") -> AIMessage:
    """One scripted model turn with these tool calls."""
    return AIMessage(text, tool_calls=list(calls))


class Ledger:
    """Tools for payments and shell commands that log every real execution."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.predicate_calls: list[dict[str, Any]] = []
        ledger = self

        @create_tool(
            needs_approval=True,
            approval_prompt="Pay {{amount}} to {{ payee.name }}?",
            approval_defaults={"channel": "finance"},
        )
        def pay(amount: int, payee: dict[str, Any]) -> str:
            """Send a payment."""
            ledger.ran.append(("pay", {"amount": amount, "payee": payee}))
            return f"paid {amount} to {payee.get('name')}"

        def destructive(args: dict[str, Any]) -> bool:
            ledger.predicate_calls.append(args)
            return args["command"].split()[0] in ("rm", "shutdown", "mkfs")

        @create_tool(needs_approval=destructive, approval_prompt=lambda a: f"Run `{a['command']}`?")
        def bash(command: str) -> str:
            """Run a shell command."""
            ledger.ran.append(("bash", {"command": command}))
            return f"ran {command}"

        @create_tool
        def lookup(key: str) -> str:
            """Look a value up (harmless)."""
            ledger.ran.append(("lookup", {"key": key}))
            return f"value of {key}"

        self.pay, self.bash, self.lookup = pay, bash, lookup

    @property
    def tools(self) -> list[Any]:
        return [self.pay, self.bash, self.lookup]

    def names(self) -> list[str]:
        return [name for name, _ in self.ran]


def agent_with(script: list[Any], ledger: Ledger | None = None, **kwargs: Any) -> tuple[Agent,
                                                                                       Ledger]:
    ledger = ledger or Ledger()
    kwargs.setdefault("name", "assistant")
    agent = Agent(model=ScriptedChatModel(script), tools=ledger.tools, **kwargs)
    return agent, ledger


def ledger_plan(agent: Agent, thread_id: str, agent_path: list[str] | None = None,
                ai_message_id: str | None = None) -> Any:
    """A copy of the gate's plan of the thread's last turn (or of the turn of the AI message
    `ai_message_id`), as the ledger keeps it: the one record of it (the state's `turn` only
    points to it)."""
    import copy

    from langchain_core.messages import AIMessage as _AI

    from graphkit._state import turn_key

    state = agent.graph.get_state({"configurable": {"thread_id": thread_id}})
    ais = [m for m in state.values.get("messages") or [] if isinstance(m, _AI)
           and (ai_message_id is None or m.id == ai_message_id)]
    if not ais:
        return None
    plan = agent._storage.ledger.turn(thread_id, agent_path or [agent.name], turn_key(ais[-1]))
    return copy.deepcopy(plan)
