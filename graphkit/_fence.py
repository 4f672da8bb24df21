"""A run stops where another process took over its thread's lease.

One process at a time advances a thread: it holds the thread's lease, which a daemon thread
renews (`graphkit._ledger._keeper`). A process that stalls for longer than the lease (a paused
VM, renewals that cannot reach the database) may find, when it wakes, that another process
took the thread over and is advancing it. Its run must then stop, not go on beside the new
holder: each would record its own turns and write its own checkpoints, and the later writer's
would hide the other's. So every graphkit node checks before it runs, and the savers graphkit
opens check before each write (the step that was running when the process stalled).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)

from graphkit._context import lease_of, thread_id_of
from graphkit._ledger import RunBusyError
from graphkit._ledger._keeper import KEEPER
from graphkit._offload import offload

__all__ = ["FencedWrites", "fenced_node"]


def _stop_if_lapsed(config: RunnableConfig) -> None:
    owner = lease_of(config)
    if owner is not None and KEEPER.lapsed(thread_id := thread_id_of(config), owner):
        raise _lapsed(thread_id)


def _lapsed(thread_id: str) -> RunBusyError:
    msg = (f"thread {thread_id!r}: this process's lease on it lapsed and another process took "
           "it over; the run stopped before writing beside it")
    return RunBusyError(msg)


def fenced_node(func: Callable[..., Any], afunc: Callable[..., Any]
                ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A node's bodies, checking first. A run without a lease (of a graph compiled from an
    agent's builder by hand, not the agent's own, which takes one: `graphkit._leased_graph`)
    is not checked."""

    def fenced(value: Any, config: RunnableConfig) -> Any:
        _stop_if_lapsed(config)
        return func(value, config)

    async def afenced(value: Any, config: RunnableConfig) -> Any:
        owner = lease_of(config)
        if owner is not None and KEEPER.late(thread_id_of(config), owner):
            await offload(_stop_if_lapsed, config)  # a statement: off the event loop
        else:
            _stop_if_lapsed(config)
        return await afunc(value, config)

    return fenced, afenced


class FencedWrites(BaseCheckpointSaver[Any]):
    """Mixin for the savers graphkit opens on a database other processes share: a write for a
    run whose lease was taken over is refused (`RunBusyError`). The async methods of
    graphkit's savers run these in a worker thread."""

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        _stop_if_lapsed(config)
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        _stop_if_lapsed(config)
        super().put_writes(config, writes, task_id, task_path)
