"""A thread's latest checkpoint as the Agent API reads it to decide and to resume.

Deciding and resuming need what the thread waits on: the interrupts, which LangGraph keeps in
the checkpoint's pending writes. `get_state` also restores every channel and prepares the next
tasks, which the resumed run then does again; here the values are restored only when a
request needs them (a new message on a thread, an error that explains itself). The savers
graphkit opens then hand that same read to the run's graph as its first (`ServesLatest`),
instead of reading the checkpoint, its blobs and its writes a second time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Literal, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.pregel import Pregel
from langgraph.types import Interrupt

try:
    from langgraph._internal._constants import NULL_TASK_ID, RESUME
    from langgraph.pregel._task_status import read_task_statuses
except ImportError:  # pragma: no cover - a LangGraph before it: its full snapshot is read
    read_task_statuses = None  # type: ignore[assignment]

__all__ = ["Latest", "Paused", "ServesLatest", "latest", "options_of"]


class Paused(Protocol):
    """What deciding and resuming read of a thread's state (a `StateSnapshot` is one)."""

    @property
    def interrupts(self) -> tuple[Interrupt, ...]: ...

    @property
    def values(self) -> dict[str, Any] | Any: ...

    @property
    def config(self) -> RunnableConfig: ...


class Latest:
    """The latest checkpoint of a thread: its open interrupts, its values on demand."""

    __slots__ = ("__dict__", "_graph", "_options", "_query", "config", "interrupts")

    def __init__(self, graph: Pregel[Any, Any], query: RunnableConfig,
                 saved: CheckpointTuple | None) -> None:
        self._graph = graph
        self._query = query
        self.config: RunnableConfig = saved.config if saved is not None else query
        self.interrupts: tuple[Interrupt, ...] = _open_interrupts(saved)
        # the request's options as the checkpoint keeps them (a plain channel, written only
        # by input, which `_written_in` sends to the full snapshot)
        self._options: Any = (saved.checkpoint["channel_values"].get("options")
                              if saved is not None else None)

    @cached_property
    def values(self) -> dict[str, Any] | Any:
        # As `get_state` shows them (with the writes of tasks that finished in the paused
        # step); under the thread's lease the latest checkpoint is still this one.
        return self._graph.get_state(self._query).values


def stalled(snapshot: Paused) -> Literal["mid-step", "ended"] | None:
    """How the thread's run stopped where no next task waits on an interrupt: caught
    mid-step (its process died, or `on_state_change` stopped it: it has next tasks), or
    ended (a client's state write may have left it with nothing next while a call waited: a
    resume takes it back to its gate, `_control.left_waiting`); None where a task waits
    on an interrupt. What waits is then what the ledger says."""
    tasks = _next_tasks(snapshot)
    if any(task.interrupts for task in tasks):
        return None
    return "mid-step" if tasks else "ended"


def _next_tasks(snapshot: Paused) -> Any:
    """The thread's next tasks, as `get_state` lists them (a `Latest` reads them now)."""
    state: Any = (snapshot._graph.get_state(snapshot._query) if isinstance(snapshot, Latest)
                  else snapshot)
    return getattr(state, "tasks", ())


def written(snapshot: Paused) -> bool:
    """Whether the thread has a checkpoint at all (a run recorded before its graph wrote its
    input has none: there is nothing to continue)."""
    return bool((snapshot.config.get("configurable") or {}).get("checkpoint_id"))


def options_of(snapshot: Paused) -> Mapping[str, Any]:
    """The run options the thread's state holds, without restoring every channel when the
    checkpoint says them."""
    if isinstance(snapshot, Latest):
        found = snapshot._options
    else:
        found = (snapshot.values or {}).get("options")
    return found if isinstance(found, Mapping) else {}


def _open_interrupts(saved: CheckpointTuple | None) -> tuple[Interrupt, ...]:
    """The interrupts still waiting for an answer, as `get_state` lists them for the latest
    checkpoint (LangGraph's own reading of the step's writes)."""
    if saved is None or not saved.pending_writes:
        return ()
    statuses = read_task_statuses(saved.pending_writes)
    return tuple(i for status in statuses.values() for i in status.pending_interrupts)


def _written_in(saved: CheckpointTuple | None) -> bool:
    """Whether a client's input was written into the paused step (a `Command`'s update or
    `goto`): LangGraph's snapshot then leaves out tasks that input would add, and so must we."""
    return saved is not None and any(
        task_id == NULL_TASK_ID and channel != RESUME
        for task_id, channel, _ in saved.pending_writes or ())


def latest(graph: Pregel[Any, Any], config: RunnableConfig, *, serve: bool = False) -> Paused:
    """The thread's latest checkpoint, read once; LangGraph's own snapshot where the pending
    writes alone do not say what it shows (input written into the paused step), or for a graph
    that has no checkpointer of its own (it then reads the one its caller configured). With
    `serve` (a run about to advance the thread, under its lease) the read is also what the
    run's graph reads first, where the saver is one that serves it (`ServesLatest`)."""
    saver = graph.checkpointer
    if not isinstance(saver, BaseCheckpointSaver) or read_task_statuses is None:
        return graph.get_state(config)
    saved = saver.get_tuple(config)
    if _written_in(saved):
        return graph.get_state(config)
    if serve and isinstance(saver, ServesLatest):  # (get_state above would take it, and
        saver.serve(config, saved)                 # change it as it applies the writes)
    return Latest(graph, config, saved)


_UNSERVED: Any = object()


class ServesLatest(BaseCheckpointSaver[Any]):
    """Mixin for the savers graphkit opens: the checkpoint a run read as it took its thread's
    lease (`serve`) is what its graph's first read of the thread returns, once.

    Why it is the same row: every door advances a thread only under its lease, so nothing in
    this process writes the thread between the two reads, and any write through this saver
    (a checkpoint, a task's writes, a deleted thread) drops what was served first. A served
    read not taken is dropped as the lease is released (`unserve`). Only the latest checkpoint
    of the root graph is served: a read of a named checkpoint, or of a subgraph's, goes to the
    database."""

    def serve(self, config: RunnableConfig, saved: CheckpointTuple | None) -> None:
        """Hand `saved` (None: the thread has no checkpoint) to the next read of the thread."""
        served: dict[str, Any] = self.__dict__.setdefault("_served", {})
        served[str(config["configurable"]["thread_id"])] = saved

    def unserve(self, thread_id: str) -> None:
        self.__dict__.get("_served", {}).pop(thread_id, None)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        served = self.__dict__.get("_served")
        conf = config.get("configurable") or {}
        if served and not conf.get("checkpoint_ns") and not conf.get("checkpoint_id"):
            saved = served.pop(str(conf.get("thread_id")), _UNSERVED)
            if saved is not _UNSERVED:
                return saved  # type: ignore[no-any-return]
        return super().get_tuple(config)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        self.unserve(str(config["configurable"]["thread_id"]))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        self.unserve(str(config["configurable"]["thread_id"]))
        super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.unserve(str(thread_id))
        super().delete_thread(thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.unserve(str(target_thread_id))
        super().copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            self.unserve(str(thread_id))
        super().prune(thread_ids, strategy=strategy)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.__dict__.get("_served", {}).clear()  # (which threads they ran on is not said)
        super().delete_for_runs(run_ids)
