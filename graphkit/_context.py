"""Small readers of a node's config and state that every node needs."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_store, get_stream_writer
from langgraph.store.base import BaseStore

try:
    from langgraph._internal._constants import (
        CONFIG_KEY_CHECKPOINT_MAP,
        CONFIG_KEY_CHECKPOINTER,
        CONFIG_KEY_DURABILITY,
        NS_SEP,
    )
except ImportError:  # pragma: no cover - a LangGraph without them: no run is known durable
    CONFIG_KEY_CHECKPOINT_MAP = CONFIG_KEY_CHECKPOINTER = CONFIG_KEY_DURABILITY = NS_SEP = ""

__all__ = ["DELEGATION_KEY", "EVENT_KEY", "LEASE_KEY", "PATH_KEY", "agent_path_of",
           "delegation_of", "durability_of", "emit", "last_ai", "lease_of", "never_written",
           "scope_of", "step_of", "store", "thread_id_of"]

PATH_KEY = "graphkit_agent_path"
"""Key of `config["configurable"]` holding the agent path of an enclosing supervisor."""
DELEGATION_KEY = "graphkit_delegation"
"""Key of `config["configurable"]` holding, for a subagent, the key of the supervisor's call
it works for (its turns are planned under it: parallel delegations never share a plan)."""
CONVERSATION_KEY = "graphkit_conversation"
"""Key of `config["configurable"]` holding, for a subagent, the conversation of the thread's
top-level agent (`AgentState.conversation`), as the delegation node sets it."""
EVENT_KEY = "graphkit_event"
"""Key marking graphkit's custom stream events (telemetry) among other custom events."""
LEASE_KEY = "__graphkit_lease"
"""Key of `config["configurable"]` holding the owner token of the thread lease the run holds
(graphkit's doors and the agent's graph set it; LangGraph keeps keys starting with "__" out
of checkpoint metadata), which its nodes check (`graphkit._fence`). It proves nothing: a run
holds the lease because its door or graph took it (`graphkit._leased_graph`), and a client
that names one only has its run fenced by a lease it does not hold."""


def agent_path_of(config: RunnableConfig, name: str) -> list[str]:
    parent = (config.get("configurable") or {}).get(PATH_KEY) or []
    if not isinstance(parent, list) or not all(isinstance(p, str) for p in parent):
        parent = []
    return [*parent, name]


def scope_of(config: RunnableConfig) -> str:
    """The scope a node's pass marks what its agent waits on in: the checkpoint namespace the
    agent runs in (its node's, without the node's own task), "" at the top."""
    task_ns = str((config.get("configurable") or {}).get("checkpoint_ns") or "")
    return task_ns.rpartition("|")[0]


def delegation_of(config: RunnableConfig) -> str:
    """The supervisor's call a subagent works for ("" at the top)."""
    key = (config.get("configurable") or {}).get(DELEGATION_KEY)
    return key if isinstance(key, str) else ""


def thread_id_of(config: RunnableConfig) -> str:
    """The thread, as LangGraph's savers name it (`str`; a thread id of 0 is "0")."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    return "" if thread_id is None else str(thread_id)


def lease_of(config: RunnableConfig) -> str | None:
    """The owner token of the thread lease the run holds, None for a run without one (of a
    graph compiled from an agent's builder by hand: the agent's own graph takes one)."""
    owner = (config.get("configurable") or {}).get(LEASE_KEY)
    return owner if isinstance(owner, str) else None


def _own_checkpoint(conf: Mapping[str, Any]) -> tuple[str, str] | None:
    """(the node's graph's namespace, the id of the checkpoint its step runs from), read
    under that namespace in LangGraph's checkpoint map: never as the map's last entry, which
    a client's own map (in the run's config, merged before LangGraph's) put last (a forged
    step re-appended a queued message, or took one for delivered)."""
    found = conf.get(CONFIG_KEY_CHECKPOINT_MAP)
    namespace = str(conf.get("checkpoint_ns") or "").rpartition(NS_SEP)[0]
    step = found.get(namespace) if isinstance(found, dict) and NS_SEP else None
    return (namespace, step) if isinstance(step, str) else None


def step_of(config: RunnableConfig) -> str | None:
    """The id of the checkpoint the node's step runs from (a replay of the step after a crash
    runs from the same one); None in a graph without a checkpointer."""
    own = _own_checkpoint(config.get("configurable") or {})
    return own[1] if own is not None else None


_WRITTEN: OrderedDict[tuple[int, str, str, str], None] = OrderedDict()
"""Checkpoints `never_written` found written: (saver, thread, namespace, checkpoint id)."""
_KEPT_WRITTEN = 10_000


def _saver_of(config: RunnableConfig) -> tuple[BaseCheckpointSaver[Any], Any, str] | None:
    """The saver of the node's graph, its thread, and its namespace there; None without a
    saver."""
    conf = config.get("configurable") or {}
    saver, own = conf.get(CONFIG_KEY_CHECKPOINTER), _own_checkpoint(conf)
    if not isinstance(saver, BaseCheckpointSaver) or own is None:
        return None
    return saver, conf.get("thread_id"), own[0]


def never_written(config: RunnableConfig) -> Callable[[str], bool]:
    """Whether the checkpoint of an id (of the node's graph and thread) is missing from the
    saver: the step run from it was given up (a crash under LangGraph's "async" durability
    before the checkpoint was written), and the run replays from an earlier one. Reads the
    saver; False without one. (The saver is looked up when asked: rarely, not each pass.)"""

    def missing(checkpoint_id: str) -> bool:
        found_saver = _saver_of(config)
        if found_saver is None:
            return False
        saver, thread_id, namespace = found_saver
        key = (id(saver), str(thread_id), namespace, checkpoint_id)
        if key in _WRITTEN:
            return False
        found = saver.get_tuple({"configurable": {
            "thread_id": thread_id, "checkpoint_ns": namespace,
            "checkpoint_id": checkpoint_id}}) is not None
        if found:  # (a written checkpoint stays written: asked again, no read)
            _WRITTEN[key] = None
            while len(_WRITTEN) > _KEPT_WRITTEN:
                _WRITTEN.popitem(last=False)
        return not found

    return missing


def ran_past(config: RunnableConfig) -> Callable[[str], bool]:
    """Whether the saver holds a checkpoint a step run from the checkpoint of an id wrote (a
    child of it): that step ran to its end once, so a step run from there again is another
    branch's (a fork of it), not a replay of it after a crash. Reads the saver from its
    newest checkpoint down to that one; False without one. (Looked up when asked.)"""

    def child_written(checkpoint_id: str) -> bool:
        found_saver = _saver_of(config)
        if found_saver is None:
            return False
        saver, thread_id, namespace = found_saver
        for saved in saver.list({"configurable": {"thread_id": thread_id,
                                                  "checkpoint_ns": namespace}}):
            if str(saved.config["configurable"].get("checkpoint_id")) <= checkpoint_id:
                return False  # (listed newest first: a child is newer than its parent)
            parent = (saved.parent_config or {}).get("configurable") or {}
            if parent.get("checkpoint_id") == checkpoint_id:
                return True
        return False

    return child_written


def durability_of(config: RunnableConfig) -> str:
    """The run's LangGraph durability: "sync" (graphkit's own runs: each step's checkpoint is
    written before the next step starts, so the state a node reads is on disk), "async"
    (LangGraph's default for `invoke` and its server: written while the next step runs) or
    "exit" (written when the run ends)."""
    found = (config.get("configurable") or {}).get(CONFIG_KEY_DURABILITY)
    return found if found in ("sync", "exit") else "async"


def last_ai(messages: Sequence[AnyMessage]) -> AIMessage | None:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def open_turns(messages: Sequence[AnyMessage]) -> Iterator[tuple[int, int]]:
    """Where the model turns some of whose calls have no result are (`turn_span`), the last
    first: one pass back over the conversation, each turn's results being the tool messages
    right after it."""
    answered: set[Any] = set()
    end = len(messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
            continue
        if (isinstance(message, AIMessage) and message.tool_calls and message.id is not None
                and any(c.get("id") not in answered for c in message.tool_calls)):
            yield index, end
        answered = set()
        end = index


def store() -> BaseStore | None:
    try:
        return get_store()
    except RuntimeError:  # called outside a runnable context
        return None


def emit(events: list[dict[str, Any]]) -> None:
    if not events:
        return
    write = get_stream_writer()
    for event in events:
        write({EVENT_KEY: "tool-approval", **event})
