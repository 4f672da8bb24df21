"""Delegation to subagents, each a LangGraph subgraph of its supervisor.

A subagent is offered to the supervisor's model as a tool named after its key that takes
`task: str`. The approval gate sends such a call to a node of the same name, which runs the
subagent's graph inside the supervisor's task: LangGraph then checkpoints the subagent under
the supervisor's thread, lets its interrupts (approvals, suspensions) surface at the top, and
resumes it from where it paused when the decision comes back down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER, CONFIG_KEY_REPLAY_STATE
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from pydantic import BaseModel, Field

from graphkit._context import (
    CONVERSATION_KEY,
    DELEGATION_KEY,
    PATH_KEY,
    delegation_of,
    thread_id_of,
)
from graphkit._ledger import DONE, CallRow, Ledger
from graphkit._new_message import (
    mapped_messages,
    resumed_message,
    said_of,
    stopped_above,
    take_for_the_top,
)
from graphkit._review import identity_of
from graphkit._state import DELEGATED_OPTIONS, ToolTask, well_typed_task
from graphkit._tools_node import result_command, runs_as_recorded
from graphkit.tools import DelegationTool

__all__ = ["DelegationTool", "delegation_tool", "make_delegate_nodes"]

NO_ANSWER = "{name} finished without an answer."


class Delegate(BaseModel):
    task: str = Field(description="What the subagent should do, in plain words.")


def delegation_tool(key: str, description: str) -> DelegationTool:
    def refuse(task: str) -> str:
        msg = f"{key!r} is a subagent; it runs inside its supervisor's graph"
        raise RuntimeError(msg)

    return DelegationTool(
        name=key,
        description=description or f"Delegate a task to the {key} agent.",
        func=refuse,
        args_schema=Delegate,
    )


def _final_text(messages: Sequence[BaseMessage], name: str) -> str:
    if messages and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls:
        text = str(messages[-1].text)
        if text:
            return text
    return NO_ANSWER.format(name=name)


def make_delegate_nodes(
    key: str, subgraph: CompiledStateGraph[Any, Any, Any, Any], ledger: Ledger,
    path_of: Callable[[RunnableConfig], list[str]],
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The node (sync and async) that runs one delegation to `subgraph` and returns its answer.

    A delegation is not an action: the subagent's own gate guards its tools. Its answer is
    recorded in the ledger as the call's outcome, like a tool's result.
    """

    def prepare(task: ToolTask, planned: CallRow, config: RunnableConfig
                ) -> tuple[dict[str, Any], RunnableConfig]:
        args: Mapping[str, Any] = planned.args or {}
        options = task.get("options") or {}
        sub_input = {
            "messages": [HumanMessage(str(args.get("task", "")))],
            "options": {k: v for k, v in options.items() if k in DELEGATED_OPTIONS},
        }
        sub_config: RunnableConfig = {
            **config,
            # the subagent's place in the chain is this agent's own path, never the task's;
            # its conversation is the one the delegation was planned in (its grants')
            "configurable": {**(config.get("configurable") or {}),
                             PATH_KEY: path_of(config), DELEGATION_KEY: task["key"],
                             CONVERSATION_KEY: planned.conversation},
        }
        return sub_input, sub_config

    def answer(task: ToolTask, output: dict[str, Any], config: RunnableConfig) -> Command[Any]:
        text = _final_text(output.get("messages") or [], key)
        message = ToolMessage(text, tool_call_id=task["tool_call_id"], name=key)
        # Only the delegation call planned under this key takes the answer as its outcome;
        # one the ledger settled while its subagent ran (a new message that reached the
        # subagent's gate stopped it: `_new_message.take_for_the_top`) answers as settled,
        # and where that message stopped the delegation this agent works for too, this
        # agent ends here, its own node answering so, up to the delegation it stopped first.
        path = path_of(config)
        if not ledger.settle_call(task["key"], {"content": message.content,
                                                "status": message.status},
                                  thread_id=thread_id_of(config), agent_path=path,
                                  tool_name=key):
            done = settled(task, config)
            if isinstance(done, Command) and done.update:
                above = delegation_of(config) if len(path) > 1 else ""
                return Command(update=done.update, goto="__end__") \
                    if stopped_above(ledger, above) else done
        return result_command(task, message)

    def settled(task: ToolTask, config: RunnableConfig) -> Command[Any] | CallRow:
        """What the ledger planned for this delegation: its call (the task it hands down, in
        its arguments, and the conversation it was planned in), or its recorded answer once
        the ledger settled it (it answered, or a new user message stopped it): a replay of an
        earlier step gets that, and the subagents do not run again (an approval given below
        since would otherwise run its call). A delegation the ledger did not plan here does
        nothing."""
        call_key = task.get("key")
        row = ledger.call(call_key) if isinstance(call_key, str) else None
        if (row is None or row.thread_id != thread_id_of(config) or row.tool_name != key
                or row.tool_call_id not in (None, task.get("tool_call_id"))
                or list(row.agent_path) != list(path_of(config))
                or task.get("agent_path") != list(path_of(config))):
            return Command()
        if row.executed != DONE:
            if not runs_as_recorded(row.args, row.args_digest):
                return Command()
            return row
        outcome = row.outcome or {}
        message = ToolMessage(str(outcome.get("content", "")), tool_call_id=task["tool_call_id"],
                              name=key,
                              status="success" if outcome.get("status") == "success" else "error")
        return result_command(task, message)

    def entry(task: ToolTask, config: RunnableConfig, sub_input: dict[str, Any]) -> Any:
        """What the subagent is invoked with: its task (LangGraph ignores it where the subagent
        has a checkpoint to go on from), or, where its gate waits with nothing to go on, a
        return to that gate, which applies what was decided or asks again, as a top-level run
        goes back to its own (`_control.left_waiting`):
        - a client's state write on its namespace left it with nothing next (the write's
          words stood as its answer, and its approved call never ran: helper-83);
        - the delegation is handed out again (a state write on the supervisor's namespace
          ended the task it waited in; LangGraph gives the new task a new namespace): the
          subagent's state where it waited is carried over, and so are its gate's waits (the
          subagent planned again and asked again, and the first approval stayed listed,
          decidable, with nothing to apply it: helper-85, helper-86)."""
        configurable = config.get("configurable") or {}
        scope = str(configurable.get("checkpoint_ns") or "")
        saver = configurable.get(CONFIG_KEY_CHECKPOINTER)
        thread_id = thread_id_of(config)
        # (the subagent's path goes by its name, which its key need not be: helper-85)
        path = [*path_of(config), subgraph.name]
        waits = ledger.waits_beneath(thread_id, path) if saver is not None else []
        if not waits:
            return sub_input

        def at(ns: str) -> RunnableConfig:
            return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                     CONFIG_KEY_CHECKPOINTER: saver}}

        if any(ns == scope or ns.startswith(f"{scope}|") for ns, _, _ in waits):
            state = subgraph.get_state(at(scope))
            return sub_input if state.next or not state.values else Command(
                goto="approval_gate")
        if configurable.get(CONFIG_KEY_REPLAY_STATE) is not None:
            # time travel: the fork's subagent reads only checkpoints from before the one it
            # replays (it never saw a copy, and ended with no answer: helper-90), and starts
            # over; what waited in the branch left is the gate's to judge
            # (`supersede_abandoned`)
            return sub_input
        # where it waited (or a subagent below it did) for this delegation: the same depth
        depth = scope.count("|") + 1
        for old in dict.fromkeys("|".join(ns.split("|")[:depth]) for ns, _, turn in waits
                                 if ledger.works_for(turn, task["key"])):
            left = subgraph.get_state(at(old))
            if not left.values or subgraph.get_state(at(scope)).values:
                continue
            # the state first: a process that dies before the waits move leaves them where
            # the next hand-out finds them again
            subgraph.update_state(at(scope), left.values, as_node="model")
            ledger.move_waits(thread_id, path, old, scope)
            return Command(goto="approval_gate")
        return sub_input

    def take(task: ToolTask, config: RunnableConfig, raw: Any) -> None:
        """A new message this delegation's resume value carries (the server's thread
        protocol), where its subagent, whose gate would take it, does not run again: the
        ledger settled the delegation (a first message stopped it, and the process died
        before the thread went on; a fork of a checkpoint from before). Left unread, LangGraph
        dropped it, or handed it to the next pause of the run (helper-132); it is the top
        agent's, as at the subagent's gate."""
        path = path_of(config)
        messages, said = said_of(raw, config, keep_ids=False)
        run_id = (task.get("options") or {}).get("run_id")
        take_for_the_top(ledger, thread_id=thread_id_of(config), top=path[:1],
                         start=task["key"], messages=messages, said=said,
                         run_id=run_id if isinstance(run_id, str) else None,
                         decided_by=identity_of(config))

    def left_unread(done: Command[Any], config: RunnableConfig) -> list[Any]:
        """The new messages this run's resume brought for the subagent a delegation answered
        from the ledger will not run (`take`): its own resume value's, and those a resume map
        names the subagent's pauses with (a fork of the pause, resumed by interrupt id, lost
        the message: helper-134)."""
        if not done.update:
            return []
        own = resumed_message()
        return [*([own] if own is not None else []), *mapped_messages(config)]

    def delegate(task: ToolTask, config: RunnableConfig) -> Command[Any]:
        if not well_typed_task(task):  # a client's `Send` of anything: it does nothing
            return Command()
        done = settled(task, config)
        if isinstance(done, Command):
            for raw in left_unread(done, config):
                take(task, config, raw)
            return done
        sub_input, sub_config = prepare(task, done, config)
        return answer(task, subgraph.invoke(entry(task, config, sub_input), sub_config), config)

    async def adelegate(task: ToolTask, config: RunnableConfig) -> Command[Any]:
        if not well_typed_task(task):
            return Command()
        done = await asyncio.to_thread(settled, task, config)
        if isinstance(done, Command):
            for raw in left_unread(done, config):
                await asyncio.to_thread(take, task, config, raw)
            return done
        sub_input, sub_config = prepare(task, done, config)
        given = await asyncio.to_thread(entry, task, config, sub_input)
        output = await subgraph.ainvoke(given, sub_config)
        return await asyncio.to_thread(answer, task, output, config)

    return delegate, adelegate
