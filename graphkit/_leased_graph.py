"""Every run of an agent's graph advances its thread under the thread's lease, whoever starts it.

graphkit's API and workers take a thread's lease before they stream its graph
(`Agent._prepare`), so two of them never advance one thread at once. LangGraph itself does not
order a thread's runs: graph input given to the compiled graph directly (`agent.graph.invoke`,
a notebook, an app of the user's own) beside a worker's run wrote from the same checkpoint as
it, and the later writer's checkpoints hid the other's: the user's message and its answer were
lost, and a delegation the message stopped was told it "did not run" while it paid (helper-95).

So the graph's own `stream` and `astream`, which `invoke`, `ainvoke`, `astream_events` and
the LangGraph server all go through, and its state writes (`update_state` and its kin), take
the lease as graphkit's doors do, waiting for its holder as they do, unless the config names
one this process holds for the thread (a door's, or the enclosing run's for a nested graph).
The run's nodes and writes then check that it is still theirs (`graphkit._fence`). A config
that names a lease this process does not hold (a client's guess) gets a lease of its own: the
key is no way around the order.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateUpdate

from graphkit._context import LEASE_KEY, lease_of, thread_id_of
from graphkit._ledger import Ledger, RunBusyError, _keeper, _schema
from graphkit._offload import apart, offload

__all__ = ["LeasedGraph"]


class LeasedGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled agent graph whose runs hold their thread's lease in `leases`."""

    def __init__(self, *, leases: Ledger, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.leases = leases  # (an attribute of its own name: `copy` passes it back in)

    @classmethod
    def of(cls, compiled: CompiledStateGraph[Any, Any, Any, Any], leases: Ledger) -> LeasedGraph:
        attrs = {k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"}
        return cls(leases=leases, **attrs)

    def _unleased(self, config: RunnableConfig | None) -> str:
        """The thread a run with `config` advances without holding its lease here; "" when
        it holds it (or names no thread)."""
        merged = merge_configs(self.config, config)
        thread_id = thread_id_of(merged)
        owner = lease_of(merged)
        if not thread_id or (owner is not None and _keeper.KEEPER.holds(thread_id, owner)):
            return ""
        return thread_id

    def stream(self, input: Any, config: RunnableConfig | None = None,
               **kwargs: Any) -> Iterator[Any]:
        thread_id = self._unleased(config)
        if not thread_id:
            yield from super().stream(input, config, **kwargs)
            return
        with self.leases.lease(thread_id, wait=_schema.WAIT_SECONDS) as owner:
            yield from super().stream(input, _leased(config, owner), **kwargs)

    async def astream(self, input: Any, config: RunnableConfig | None = None,
                      **kwargs: Any) -> AsyncIterator[Any]:
        thread_id = self._unleased(config)
        if not thread_id:
            async for part in super().astream(input, config, **kwargs):
                yield part
            return
        owner = await _ahold(self.leases, thread_id)
        try:
            async for part in super().astream(input, _leased(config, owner), **kwargs):
                yield part
        finally:  # (shielded: a cancel while it is given back still gives it back)
            await asyncio.shield(offload(self.leases.release_thread, thread_id, owner))

    def bulk_update_state(self, config: RunnableConfig,
                          supersteps: Sequence[Sequence[StateUpdate]]) -> RunnableConfig:
        thread_id = self._unleased(config)
        if not thread_id:
            return super().bulk_update_state(config, supersteps)
        with self.leases.lease(thread_id, wait=_schema.WAIT_SECONDS) as owner:
            return super().bulk_update_state(_leased(config, owner), supersteps)

    async def abulk_update_state(self, config: RunnableConfig,
                                 supersteps: Sequence[Sequence[StateUpdate]]
                                 ) -> RunnableConfig:
        thread_id = self._unleased(config)
        if not thread_id:
            return await super().abulk_update_state(config, supersteps)
        owner = await _ahold(self.leases, thread_id)
        try:
            return await super().abulk_update_state(_leased(config, owner), supersteps)
        finally:
            await asyncio.shield(offload(self.leases.release_thread, thread_id, owner))


def _leased(config: RunnableConfig | None, owner: str) -> RunnableConfig:
    config = config or {}
    return {**config, "configurable": {**(config.get("configurable") or {}), LEASE_KEY: owner}}


async def _ahold(leases: Ledger, thread_id: str) -> str:
    """The thread's lease, as `Ledger.hold_thread` takes it, but waiting for its holder on the
    event loop: runs that waited in worker threads filled the loop's default pool, which the
    holder needs to finish (helper-8). Each try is a statement in a worker thread; one
    cancelled as it tries gives the lease back once taken (kept, it would be renewed for as
    long as the process lives)."""
    deadline = time.monotonic() + _schema.WAIT_SECONDS
    pause = 0.005
    while True:
        taking = asyncio.ensure_future(offload(_try_hold, leases, thread_id))
        try:
            owner = await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(functools.partial(_give_back, leases, thread_id))
            raise
        if owner is not None:
            return owner
        if time.monotonic() >= deadline:
            msg = f"thread {thread_id!r} is being advanced by another process"
            raise RunBusyError(msg)
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.1)


def _try_hold(leases: Ledger, thread_id: str) -> str | None:
    try:
        return leases.hold_thread(thread_id, wait=0.0)
    except RunBusyError:
        return None


def _give_back(leases: Ledger, thread_id: str, taking: asyncio.Future[str | None]) -> None:
    if not taking.cancelled() and taking.exception() is None and (owner := taking.result()):
        apart(leases.release_thread, thread_id, owner, name="graphkit-release")
