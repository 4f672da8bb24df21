"""Tools and agents the tests share. Each tool records what actually ran."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from graphkit import Agent, create_tool
from graphkit._owner import holder_is_dead, new_owner
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


# ---------------------------------------------------------------- forged state and tasks
# What the adversarial tests share: a client of a LangGraph server writing state and forging
# tasks against a paused payment (`pay` of 40 to ACME, approved only by the CFO).

PAY = {"amount": 40, "payee": {"name": "ACME"}}


def pay_then_done(messages: list[Any]) -> Any:
    if not any(isinstance(m, AIMessage) for m in messages):
        return turn(call("pay", PAY, "c1"))
    return "done"


EVIL_PAY = {"amount": 99, "payee": {"name": "EVIL"}}


def two_payments(messages: list[Any]) -> Any:
    """A turn of two payments, c1 (`PAY`) and c2 (`EVIL_PAY`), then "done"."""
    if not any(isinstance(m, AIMessage) for m in messages):
        return turn(call("pay", PAY, "c1"), call("pay", EVIL_PAY, "c2"))
    return "done"


def config(thread_id: str, identity: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if identity is not None:
        configurable["langgraph_auth_user"] = {"identity": identity}
    return {"configurable": configurable}


def plan_of(agent: Agent, thread_id: str) -> dict[str, Any]:
    """The gate's plan of the thread's last turn, as the ledger keeps it (a copy to forge)."""
    plan: dict[str, Any] = ledger_plan(agent, thread_id)
    return plan


def pay_call(plan: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in plan["calls"] if c["tool_name"] == "pay")


def task(plan_call: dict[str, Any], agent_path: Any, **changes: Any) -> dict[str, Any]:
    return {"tool_call_id": plan_call["tool_call_id"], "tool_name": plan_call["tool_name"],
            "key": plan_call["key"], "args": plan_call["args"], "metadata": {},
            "agent_path": agent_path, "options": {}, "then": "model", **changes}


def cfo_only(decided_by: str | None, pending: Any) -> bool:
    return decided_by == "cfo"


def dead_owner() -> str:
    """The lease token of a process that died (this pid, another start time: pid reused)."""
    parts = new_owner().split(":", 7)
    parts[5] = str(int(parts[5]) + 1)
    token = ":".join(parts)
    assert holder_is_dead(token)
    return token


def lax_inbox(url: str, **kwargs: Any) -> Any:
    """An inbox with an approvers policy of its own that admits anyone: a door whose policy
    is not the agent's, so the gate judges each decision it records again by the agent's (an
    inbox without any policy refuses at once to decide for an agent that has one)."""
    from graphkit import Inbox

    return Inbox(url, approvers=lambda who, pending: True, **kwargs)


def boss_over_billing(url: str, paid: list[int] | None = None, **boss: Any) -> Agent:
    """A supervisor `boss` whose turn delegates to its subagent `billing` (call id "d1"),
    which plans a gated `pay` of 7; each payment that runs is noted in `paid`."""
    from langchain_core.messages import ToolMessage

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        if paid is not None:
            paid.append(amount)
        return f"paid {amount}"

    def sub_reply(messages: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return turn(call("pay", {"amount": 7}, "p1"))
        return "sub done"

    sub = Agent(name="billing", model=ScriptedChatModel(sub_reply), tools=[pay])
    return Agent(name="boss", model=ScriptedChatModel(
        [turn(call("billing", {"task": "pay"}, "d1")), "ok", "ok"]),
        agents={"billing": sub}, checkpointer=url, **boss)


def null_default_agent(ran: list[dict[str, Any]], checkpointer: Any = None) -> Agent:
    """An agent whose tool is written with the implicit Optional some tools have
    (`daily_limit: int = None`), paused on a call that leaves those arguments out."""
    from graphkit import create_tool
    from graphkit.testing import ScriptedChatModel

    @create_tool(needs_approval=True)
    def withdraw(account: str,
                 daily_limit: int = None,  # type: ignore[assignment]  # noqa: RUF013
                 notify: bool = None,  # type: ignore[assignment]  # noqa: RUF013
                 ) -> str:
        """Withdraw."""
        ran.append({"account": account, "daily_limit": daily_limit, "notify": notify})
        return "ok"

    return Agent(name="bank", tools=[withdraw], checkpointer=checkpointer,
                 model=ScriptedChatModel([turn(call("withdraw", {"account": "A-1"}, "w1")),
                                          "done"]))


def copy_thread(agent: Agent, source: str, target: str) -> None:
    """What the LangGraph server's thread copy does: the checkpoints (and their pending writes,
    the interrupts) under a new thread id."""
    saver = agent._storage.checkpointer
    tuples = list(saver.list({"configurable": {"thread_id": source}}))
    for tup in reversed(tuples):
        ns = tup.config["configurable"].get("checkpoint_ns", "")
        parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
        cfg: dict[str, Any] = {"configurable": {"thread_id": target, "checkpoint_ns": ns}}
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent
        saved = saver.put(cfg, tup.checkpoint, tup.metadata, tup.checkpoint["channel_versions"])
        for task_id, channel, value in tup.pending_writes or []:
            saver.put_writes(saved, [(channel, value)], task_id)
