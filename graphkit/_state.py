"""The agent graph's state (messages, the request's options, a pointer to the turn's plan),
and the plan's shape, which the ledger keeps.

Everything here is JSON-shaped so that any checkpointer (and the ledger) stores it and another
process (or LangGraph Studio) reads it back unchanged.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from typing import Annotated, Any, NotRequired, TypedDict

from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    convert_to_messages,
    message_to_dict,
)
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import _messages_delta_reducer
from langgraph.types import Command

from graphkit._digest import json_digest
from graphkit.types import ApprovalRecord

__all__ = [
    "AgentState",
    "CallPlan",
    "RunOptions",
    "SuspensionReport",
    "ToolTask",
    "TurnPlan",
    "TurnPointer",
    "merge_reports",
    "turn_key",
]

DEFAULT_MAX_STEPS = 25


class RunOptions(TypedDict, total=False):
    """Per-request options, kept in state so a resume in another process obeys them too."""

    run_id: str
    require_tool_approval: bool
    auto_resume_suspended_tools: bool
    max_steps: int
    approval_ttl: float | None
    """Seconds an approval may wait before it is declined as expired (the agent's default)."""


DELEGATED_OPTIONS = frozenset({"run_id", "require_tool_approval", "max_steps"})
"""The request options a supervisor's delegation passes down to its subagent (whose own
`auto_resume_suspended_tools` is its agent's)."""


class CallPlan(TypedDict):
    """What the gate decided about one tool call of the current model turn."""

    tool_call_id: str
    tool_name: str
    key: str
    """The call's own id in the ledger (fresh per planned call, never a model's id)."""
    args: dict[str, Any]
    """The validated arguments the call runs with (edited ones once a reviewer edits)."""
    sequential: bool
    """Predicate-bearing tools run one at a time, never beside another call."""
    approval: ApprovalRecord | None
    """Set when the call needs a decision before it runs."""
    suspension: ApprovalRecord | None
    """Set while the tool is suspended, waiting for resume data."""
    resume_values: list[Any]
    """Resume data given so far, for display: the tools node reads it from the ledger."""
    metadata: dict[str, Any]
    """Tracing metadata for the tool's callback run (`approval.required` / `.conditional`)."""
    node: str
    """The node that runs the call: `tools`, or a subagent's delegation node."""
    answer: str | None
    """Set when the call will not run (rejected, superseded, cancelled, answered by a
    reviewer): what the model is told."""
    answer_status: NotRequired[str]
    """`error` (the default) or `success` (a reviewer's `respond`)."""
    secrets: NotRequired[list[list[str | int]]]
    """Where `args` hold secret values (`graphkit._secrets`): every view masks them."""


class TurnPlan(TypedDict):
    """The gate's plan for the tool calls of one AI message: kept in the ledger
    (`graphkit_turns`), written by gates only."""

    ai_message_id: str
    turn_key: NotRequired[str]
    """`turn_key` of the AI message as planned (or as edited): the ledger's key of the plan."""
    calls: list[CallPlan]
    error: NotRequired[str | None]
    """Why the last resume value was refused; shown in the next interrupt."""


class TurnPointer(TypedDict):
    """What the graph state keeps of a turn's plan: which turn, and its calls' ledger keys.
    Nothing reads it as true (a client may write it); it tells a reader of the state (Studio,
    a debugger) where the plan is."""

    ai_message_id: str
    keys: list[str]


class SuspensionReport(TypedDict):
    """What the tools node reports when a tool calls `ctx.suspend(...)`."""

    payload: dict[str, Any]
    key: NotRequired[str]


class ToolTask(TypedDict):
    """The payload of one `Send` to the tools node: exactly one tool call."""

    tool_call_id: str
    tool_name: str
    key: str
    """The planned call's ledger key: the tools node runs what the ledger holds for it (its
    arguments too), and nothing the ledger does not allow."""
    metadata: dict[str, Any]
    agent_path: list[str]
    options: RunOptions
    then: str
    """Where the result goes: `model` when this batch finishes the turn, else back to the gate."""


def turn_key(ai: BaseMessage, scope: str = "") -> str:
    """The ledger's key of an AI message's plan: its id and what its calls are (ids, names,
    arguments as written), and for a subagent the delegation it works for (`scope`). A
    message rewritten under a reused id (a client, a model that reuses ids) is another turn,
    planned anew; it never takes an earlier turn's plan, nor a parallel delegation's."""
    calls = [[c.get("id"), c.get("name"), c.get("args")]
             for c in getattr(ai, "tool_calls", None) or []]
    digest = json_digest(calls)
    return f"{ai.id or ''}#{digest[:32]}" + (f"@{scope}" if scope else "")


_TURN_KEY = re.compile(r"(.*)#[0-9a-f]{32}(?:@[^#]*)?", re.DOTALL)
"""A turn's key: its message's id, `#`, a digest of its calls, and `@` a scope, if any."""


def message_of_turn(key: str) -> str:
    """The AI message id a turn's key (`turn_key`) files the turn under."""
    found = _TURN_KEY.fullmatch(key)
    return found.group(1) if found else key


def delegation_of_turn(key: str | None) -> str | None:
    """The delegation call a subagent's turn works for (`turn_key`'s scope)."""
    return key.rpartition("@")[2] or None if key and "@" in key else None


def merge_reports(
    old: dict[str, SuspensionReport] | None, new: dict[str, SuspensionReport] | None
) -> dict[str, SuspensionReport]:
    """Reducer: tools add reports by tool_call_id; the gate clears them with an empty write."""
    if not new:
        return {}
    return {**(old or {}), **new}


def _messages(state: list[AnyMessage], writes: list[Any]) -> list[AnyMessage]:
    """LangGraph's delta reducer of messages, taking only writes that are messages, each
    message named (`_named`)."""
    return _reduced(state, _named(state, writes))


def _reduced(state: list[AnyMessage], writes: list[Any]) -> list[AnyMessage]:
    """LangGraph's delta reducer, taking only writes that are messages: a write a client sent
    that is not (`update_state(..., {"messages": {}})`) would be kept among the thread's
    writes and fail every later read of its state; it is left out instead. (Each write is
    judged alone, so the reducer stays batching-invariant.)"""
    try:
        return _messages_delta_reducer(state, writes)
    except (ValueError, KeyError, TypeError, NotImplementedError, AttributeError):
        return _messages_delta_reducer(state, [w for w in writes if _read(w) is not None])


def named_input(value: Any) -> Any:
    """Graph input, a state write's values or a `Command`'s update, with an id on each
    message it brings, drawn at random as it enters (`LeasedGraph`, whatever the door).
    LangGraph's delta reducer names none that comes without one (`add_messages` would), and
    each check that finds a message again by its id passed such a one by: a user's message
    sent without an id (a tuple; a server client's JSON) after a waiting run a client's state
    write had ended was not queued behind the decision taken before it, and the approved
    call was told superseded instead of run. Drawn, not derived: a derived id can be
    foretold, and a client that wrote a message under the id a user's answer would get had
    the answer dropped (helper-107)."""
    if isinstance(value, Command):
        update = value.update
        if isinstance(update, dict) and "messages" in update:
            return dataclasses.replace(value, update={**update,
                                                      "messages": _drawn(update["messages"])})
        return value
    if isinstance(value, dict) and "messages" in value:
        return {**value, "messages": _drawn(value["messages"])}
    return value


def brings_messages(value: Any, *, users: bool = False) -> bool:
    """Whether graph input, a state write's values or a `Command`'s update brings messages
    (with `users`, a user's), read as LangGraph reads them: a dict, a `Command` (its update
    a dict, (key, value) pairs or an object with fields), a list of `Command`s, an object
    with fields. (A client's new words: `LeasedGraph` starts a run for them; a list of
    `Command`s or a dataclass brought them past a dict-only reading: helper-110.)"""
    return any(key == "messages" and _holds(found, users) for key, found in _pairs(value))


def _pairs(value: Any) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if isinstance(value, Command):
        return [] if value.graph == Command.PARENT else list(value._update_as_tuples())
    if isinstance(value, list | tuple) and any(isinstance(i, Command) for i in value):
        return [pair for item in value for pair in _pairs(item)]
    try:
        return [p for p in Command(update=value)._update_as_tuples() if p[0] != "__root__"]
    except Exception:  # (not an update: LangGraph refuses it)
        return []


def _holds(found: Any, users: bool) -> bool:
    """Whether `found` (a messages update) holds messages; with `users`, one a user said: a
    `HumanMessage` (or a chunk of one), a chat message in the user's role; what cannot be
    read at all counts as one (a chunk, a "chat" message and a tuple of messages passed a
    reading by type: helper-111)."""
    if not found:
        return False
    if not users:
        return True
    readings = [list(found) if isinstance(found, list) else [found]]
    if isinstance(found, tuple):
        readings.append(list(found))  # (one (role, content) message, or several messages)
    read = [m for items in readings for item in items if (m := _message(item)) is not None]
    return not read or any(isinstance(m, HumanMessage) or (
        isinstance(m, ChatMessage) and m.role in ("user", "human")) for m in read)


def _message(item: Any) -> BaseMessage | None:
    read = _read([item])
    return read[0] if read else None


def _drawn(messages: Any) -> Any:
    if not _unnamed(messages):
        return messages
    read = _read(messages)
    if read is None:
        return messages  # (not messages: the reducer leaves them out)
    return [m if m.id is not None else m.model_copy(update={"id": str(uuid.uuid4())})
            for m in read]


def _named(state: list[AnyMessage], writes: list[Any]) -> list[Any]:
    """`writes` with an id on every message, for those that did not come through the graph's
    doors (`named_input`): a node's own writes, a graph of the user's that runs the agent
    inside it. The id is derived from the whole message and the one it comes after once the
    writes before it are applied, so that reading the thread again (the channel replays its
    writes, batched or one by one) names it alike."""
    if not any(_unnamed(w) for w in writes):
        return writes
    named: list[Any] = []
    for write in writes:
        messages = _read(write)
        if messages is None:
            named.append(write)  # (not messages: `_reduced` leaves it out)
            continue
        done: list[BaseMessage] = []
        for message in messages:
            if message.id is None:
                before = _reduced(state, [*named, done])
                after = before[-1].id if before else None
                message = message.model_copy(update={"id": "msg-" + json_digest(
                    [after, message_to_dict(message)])[:32]})
            done.append(message)
        named.append(done)
    return named


def _unnamed(write: Any) -> bool:
    """Whether a write holds a message-like without an id (a tuple or text has none)."""
    for item in write if isinstance(write, list) else [write]:
        if isinstance(item, BaseMessage):
            if item.id is None:
                return True
        elif not isinstance(item, dict) or item.get("id") is None:
            return True
    return False


def _read(write: Any) -> list[BaseMessage] | None:
    """A write (a message-like, or a list of them) as messages; None if it is not messages."""
    try:
        return convert_to_messages(write if isinstance(write, list) else [write])
    except (ValueError, KeyError, TypeError, NotImplementedError, AttributeError):
        return None


Messages = Annotated[list[AnyMessage], DeltaChannel(_messages)]
"""The conversation, stored as LangGraph's delta channel: each checkpoint keeps the new
messages, not the whole list again, so a long thread grows linearly on disk."""


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _maybe(check: Any, value: Any) -> bool:
    return value is None or check(value)


def _obj(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _shaped(value: Any, required: dict[str, Any], optional: dict[str, Any]) -> bool:
    return (isinstance(value, dict) and all(k in value and ok(value[k])
                                            for k, ok in required.items())
            and all(ok(value[k]) for k, ok in optional.items() if k in value))


def _pointer(value: Any) -> bool:
    return value is None or _shaped(value, {"ai_message_id": _text, "keys": _texts}, {})


def well_typed_task(value: Any) -> bool:
    """A `ToolTask` of the shape the gate sends, every field of its type (`args`, which an
    earlier graphkit's checkpoints carry, is ignored: the ledger holds the arguments)."""
    return _shaped(value, {
        "tool_call_id": _text, "tool_name": _text, "key": _text,
        "metadata": _obj, "agent_path": _texts, "options": _well_typed_options,
        "then": _text}, {"args": _obj})


def well_typed_state(value: Any) -> bool:
    """A node's state (or a `Send` payload standing for it) of the graph's shape, with a
    conversation to act on."""
    return isinstance(value, dict) and _shaped(value, {
        "messages": lambda v: isinstance(v, list) and bool(v) and all(
            isinstance(m, BaseMessage) for m in v)}, {
        "options": _well_typed_options, "turn": _pointer,
        "reports": lambda v: isinstance(v, dict)})


def keep_pointer(old: TurnPointer | None, new: TurnPointer | None) -> TurnPointer | None:
    """Reducer of `turn`: any number of writes per step (a node's, `update_state`'s, a
    `Command`'s), and a value not of the pointer's shape is not taken, so no write to it
    can become an error that wedges the thread."""
    return new if _pointer(new) else old


def _well_typed_options(value: Any) -> bool:
    return _shaped(value, {}, {
        "run_id": _text, "require_tool_approval": lambda v: isinstance(v, bool),
        "auto_resume_suspended_tools": lambda v: isinstance(v, bool),
        "max_steps": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "approval_ttl": lambda v: v is None or isinstance(v, int | float)})


def keep_typed_options(old: RunOptions | None, new: RunOptions | None) -> RunOptions | None:
    """Reducer of `options`: a write not of their shape is not taken."""
    return new if _well_typed_options(new) else old


def keep_typed_reports(old: dict[str, SuspensionReport] | None,
                       new: dict[str, SuspensionReport] | None
                       ) -> dict[str, SuspensionReport]:
    """`merge_reports`, taking only reports of their shape."""
    if new is not None and not (isinstance(new, dict) and all(
            isinstance(k, str) and isinstance(v, dict) and _obj(v.get("payload", {}))
            for k, v in new.items())):
        return old or {}
    return merge_reports(old, new)


class AgentState(TypedDict, total=False):
    """The state of an agent graph."""

    messages: Messages
    options: Annotated[RunOptions, keep_typed_options]
    turn: Annotated[TurnPointer | None, keep_pointer]
    reports: Annotated[dict[str, SuspensionReport], keep_typed_reports]
    conversation: Annotated[str | None, keep_first]
    """This thread's conversation: set at its first planned turn, never by graph input. A
    thread deleted and created again under its id is another conversation (grants)."""


def keep_first(old: Any, new: Any) -> str | None:
    """Once set, kept: no later write (a state update) moves a conversation to another."""
    if isinstance(old, str) and old:
        return old
    return new if isinstance(new, str) and new else None


class InputState(TypedDict, total=False):
    """What a caller (or LangGraph Studio) passes to start a run."""

    messages: Messages
    options: Annotated[RunOptions, keep_typed_options]
