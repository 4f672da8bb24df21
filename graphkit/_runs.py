"""Running a graph invocation as a stream of chunks, sync or async, and summing it up.

`AgentStream` advances the run as it is iterated (like any Python generator); `result()`
drains it. Both share one `_Run`, so streaming and `generate` cannot drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import warnings
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability, Interrupt, StreamMode

from graphkit._events import (
    ArgsView,
    ChunkTranslator,
    Observed,
    RunView,
    awaiting,
    finish_reason,
    pending_chunks,
    pending_from_interrupts,
    run_text,
    suspend_payload,
    with_waiting_beside,
)
from graphkit._leased_graph import LeasedGraph, until_free
from graphkit._ledger import WAIT_SECONDS, Ledger, RunBusyError
from graphkit._offload import apart, offload
from graphkit._review import shown
from graphkit.types import GenerateResult, PendingApproval, RunState, StreamChunk

__all__ = ["AgentStream", "AsyncAgentStream", "Invocation"]

STREAM_MODES: list[StreamMode] = ["updates", "messages", "custom", "values"]
RESULT_MODES: list[StreamMode] = ["updates", "values"]
"""All a result needs: no token streaming (the model then answers in one call), no telemetry."""
DURABILITY: Durability = "sync"
"""Each step's checkpoint is written before the next step starts: a crash loses no step, and
no checkpoint write hops to a background thread."""
StateHook = Callable[[RunState], Any]
Prepare = Callable[[bool], "Invocation"]
"""What a stream does first (take the thread's lease, read its state, build the input). With
`False` it does not wait for a lease another run holds: it raises `RunBusyError` at once."""


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Invocation:
    """One call into the graph: its input (or resume Command) and where it runs. One that is
    dropped unreleased (its stream never read, or cancelled while it was prepared) releases
    itself as it is collected (`released_when_dropped`)."""

    input: Any
    config: RunnableConfig
    run_id: str
    thread_id: str
    on_state_change: StateHook | None = None
    release: Callable[[bool], None] | None = None
    """Called when the run stops advancing (frees the thread's lease), with whether it ended
    without an error (else a decided run it held is left to the workers)."""
    agent: str | None = None
    """The agent that runs (the root of its subagents' `agent_path`)."""
    ledger: Ledger | None = None
    """Where the agent's plans are (what a run stopped early waits on)."""
    shown_args: ArgsView | None = None
    """How the stream shows a call's arguments (secrets masked)."""


def pending_of(snapshot: RunView, *, stopped: bool, ledger: Ledger | None, thread_id: str,
               agent: str | None) -> list[PendingApproval]:
    """What waits on a human in this state: interrupts, or (when stopped early) the plan.
    What waits beside the interrupts (a supervisor's own call) shows the ledger's decision
    on it: listed as the plan asked it, an approval taken on it read as still pending, with
    the arguments before its edit (helper-108)."""
    found = with_waiting_beside(pending_from_interrupts(snapshot.interrupts, ledger), ledger,
                                thread_id, agent)
    beside = [r["id"] for i, r in found if not i]
    rows = ledger.approvals(beside) if beside and ledger is not None else {}
    records = [PendingApproval.from_record(shown(r, rows.get(r["id"])) if not i else r)
               for i, r in found]
    if not records and stopped:
        records = awaiting(snapshot.values, ledger, thread_id, agent)
    return records


class _Run:
    """The parts of a run that do not care whether it is sync or async."""

    def __init__(self, invocation: Invocation) -> None:
        self.invocation = invocation
        self.translator = ChunkTranslator(invocation.run_id, invocation.agent,
                                          invocation.shown_args)
        self.stopped = False
        self.step = 0
        self.node: str | None = None
        self.result: GenerateResult | None = None
        self.values: dict[str, Any] | None = None
        self.interrupts: dict[str, Interrupt] = {}

    def start(self) -> StreamChunk:
        return self.translator.chunk(
            "start", {"run_id": self.invocation.run_id, "thread_id": self.invocation.thread_id}
        )

    def feed(self, part: tuple[Any, ...], shown: bool = True) -> tuple[list[StreamChunk], bool]:
        """Chunks for one stream part (none where nobody is `shown` them: a `result()` that
        nobody iterated reads the end state only), and whether the state hook asked to stop
        here."""
        if len(part) == 2:  # streamed without subgraphs: every part is the root's
            part = ((), *part)
        namespace, mode, data = part
        if mode == "values":
            if not namespace:
                self.values = data
            return [], (not namespace) and self._hook(data)
        if mode == "updates" and not namespace and isinstance(data, dict):
            self.node = next(iter(data), self.node)
            for item in data.get("__interrupt__") or ():
                self.interrupts[item.id] = item
        return (list(self.translator.feed(namespace, mode, data)) if shown else []), False

    def _hook(self, values: dict[str, Any]) -> bool:
        hook = self.invocation.on_state_change
        self.step += 1
        if hook is None:
            return False
        pending = awaiting(values, self.invocation.ledger, self.invocation.thread_id,
                           self.invocation.agent)
        state = RunState(
            run_id=self.invocation.run_id,
            thread_id=self.invocation.thread_id,
            step=self.step,
            node=self.node,
            # copies: the values are the run's own, and a hook that changed a call's
            # arguments in them changed what the reviewer was asked (helper-60)
            messages=[m.model_copy(deep=True) for m in values.get("messages") or []],
            pending_approvals=pending,
            awaiting_approval=any(p.status == "pending" for p in pending),
        )
        self.stopped = bool(hook(state))
        return self.stopped

    def observed(self) -> Observed | None:
        """The end state as streamed, when the stream showed it (else read the checkpoint)."""
        if self.values is None:
            return None
        return Observed(self.values, tuple(self.interrupts.values()))

    def finish(self, snapshot: RunView) -> list[StreamChunk]:
        messages = list(snapshot.values.get("messages") or [])
        reason = finish_reason(snapshot, stopped=self.stopped)
        pending = pending_of(snapshot, stopped=self.stopped, ledger=self.invocation.ledger,
                             thread_id=self.invocation.thread_id, agent=self.invocation.agent)
        first = next((p for p in pending if p.status == "pending"), pending[0] if pending else None)
        self.result = GenerateResult(
            text=run_text(messages),
            finish_reason=reason,
            run_id=self.invocation.run_id,
            thread_id=self.invocation.thread_id,
            suspend_payload=suspend_payload(first) if first else None,
            pending_approvals=pending,
            messages=messages,
        )
        chunks = list(pending_chunks(self.invocation.run_id, pending)) if reason == "suspended" \
            else []
        chunks.append(self.translator.chunk(
            "finish", {"finish_reason": reason, "text": self.result.text}))
        return chunks


def _finished(run: _Run, snapshot: RunView) -> list[StreamChunk]:
    """`run.finish`, then what the run held freed as after a run that went on (as the error
    says otherwise): one thread hop for an async run's end, not two."""
    final = run.finish(snapshot)
    if run.invocation.release is not None:
        run.invocation.release(True)
    return final


DROPPED = ("{method}() recorded its decision for run {run_id!r}, but the stream it returned "
           "was dropped unread, so the run did not continue. Iterate the stream or call its "
           ".result() (or use {method}_generate()); agent.resume(run_id=...) continues it now, "
           "and a `graphkit worker` of this agent does once the decision's hold on it lapses.")
KEPT = ("{error}. {method}() recorded its decision for run {run_id!r} all the same, and it "
        "stays: it applies when the run goes on (agent.resume(run_id=...) once the thread is "
        "free, a `graphkit worker` of this agent once the decision's hold lapses, or the run "
        "that holds the thread, at its gate); deciding again is refused as already decided.")
NEVER_AWAITED = ("{method}() returned a stream that was never awaited or iterated: nothing was "
                 "decided for run {run_id!r} and the run did not continue. Await it (`await "
                 "stream.result()`), or use {method}_generate().")


def _until_written(parts: Iterator[Any]) -> list[Any]:
    """A run's first stream parts, up to the one that says its graph input (a new message) is
    in its thread: the stream's first chunk comes once it is. A stream closed at its "start"
    chunk (or a process that stopped there) lost the message before, and `resume` of its
    run raised LangGraph's `EmptyInputError`."""
    written = []
    for part in parts:
        written.append(part)
        if _is_root_values(part):
            break
    return written


def _is_root_values(part: tuple[Any, ...]) -> bool:
    """Whether a stream part is the root's values: LangGraph streams them once a step's
    checkpoint is written (`DURABILITY` "sync"), the input's first, before any node runs."""
    return part[-2] == "values" and (len(part) == 2 or not part[0])


def _unfinished(closed: bool, run_id: str) -> RuntimeError:
    if closed:
        return RuntimeError(f"the stream of run {run_id!r} was closed before the run ended; "
                            "agent.resume(run_id=...) continues it")
    return RuntimeError("the run ended without a result")  # pragma: no cover


class Release:
    """Frees what an invocation holds (the thread's lease, the checkpoint it served, a
    decision's hold on its run), once: at its stream's end, or when it is dropped."""

    def __init__(self, free: Callable[[bool], None]) -> None:
        self._free = free
        self._lock = threading.Lock()
        self.done = False

    def __call__(self, resumed: bool) -> None:
        with self._lock:
            if self.done:
                return
            self.done = True
        self._free(resumed)


def released_when_dropped(invocation: Invocation) -> Invocation:
    """Have the invocation's `Release` called with False if the invocation is collected
    before it was: in a thread of its own, since the collection may happen on an event loop,
    which must not wait on storage. Whatever drops an invocation (a stream never read, a task
    cancelled while its invocation was prepared in a thread) then gives back the thread's
    lease and the checkpoint it served, and leaves a decided run to the workers."""
    if isinstance(invocation.release, Release):
        weakref.finalize(invocation, _release_apart, invocation.release)
    return invocation


def _release_apart(release: Release) -> None:
    if not release.done:  # (the stream's end released it: no thread to start)
        apart(release, False, name="graphkit-release")


@contextlib.contextmanager
def _kept(method: str | None, run_id: str) -> Iterator[None]:
    """A decision's stream that gave up waiting for its thread says that the decision it
    carried stays recorded: the error alone read as if nothing had happened, and deciding
    again was refused as already decided."""
    try:
        yield
    except RunBusyError as exc:
        if method is None:
            raise
        raise RunBusyError(KEPT.format(error=exc, method=method, run_id=run_id)) from exc


def _finished_html(run: _Run | None, how: str) -> str:
    """A finished stream shows as its result; an unfinished one says how to finish it."""
    if run is None or run.result is None:
        return f"<p>An agent stream that has not finished: iterate it, or {how}.</p>"
    return run.result._repr_html_()


class AgentStream:
    """A run in progress. Iterate it (or `full_stream`) for chunks, `text_stream` for text.

    The run advances as the stream is consumed; `result()` consumes the rest and returns the
    `GenerateResult`. `run_id` names the run it advances from the stream's first chunk on (a
    decision's stream goes on as the thread's later run, if one started since: until then it
    names the run the decision named).
    """

    def __init__(self, graph: CompiledStateGraph[Any, Any, Any, Any],
                 prepare: Prepare, run_id: str, thread_id: str, *,
                 decided_by: str | None = None) -> None:
        self._graph = graph
        self._prepare = prepare
        self._run: _Run | None = None
        self._chunks: Generator[StreamChunk, None, None] | None = None
        self._closed = False
        self._modes = STREAM_MODES
        self._decided_by = decided_by
        """The method that recorded a decision before returning this stream, if one did."""
        self._started = False
        self.run_id = run_id
        self.thread_id = thread_id

    def __del__(self) -> None:
        if not self._started and self._decided_by is not None:
            warnings.warn(DROPPED.format(method=self._decided_by, run_id=self.run_id),
                          RuntimeWarning, stacklevel=2)

    def _generate(self) -> Generator[StreamChunk, None, None]:
        self._started = True
        with _kept(self._decided_by, self.run_id):
            inv = self._prepare(True)
        self.run_id = inv.run_id  # (a decision's stream may go on as a later run)
        run = self._run = _Run(inv)
        resumed = False
        try:
            # (it holds the thread's lease: the graph does not take it again)
            stream = (self._graph.stream_held if isinstance(self._graph, LeasedGraph)
                      else self._graph.stream)
            parts: Any = stream(inv.input, inv.config, stream_mode=self._modes,
                                durability=DURABILITY, subgraphs=self._modes is STREAM_MODES)
            try:
                written = _until_written(parts) if isinstance(inv.input, dict) else []
                yield run.start()
                for part in itertools.chain(written, parts):
                    chunks, stop = run.feed(part, self._modes is STREAM_MODES)
                    yield from chunks
                    if stop:
                        break
            finally:
                parts.close()
            final = run.finish(run.observed() or self._graph.get_state(inv.config))
            resumed = True
        finally:
            if inv.release is not None:
                inv.release(resumed)
        yield from final

    def __iter__(self) -> Iterator[StreamChunk]:
        if self._chunks is None:
            self._chunks = self._generate()
        return self._chunks

    def close(self) -> None:
        """Stop reading: the run stops after the step it is in and gives its thread back. A
        stream read only in part holds the thread's lease until it is closed (or collected),
        and every other door to the thread waits for it meanwhile; `resume(run_id=...)`
        continues the run from where it stopped. Also what leaving a `with` block does."""
        if self._chunks is None:
            self._chunks = self._generate()  # (closed unstarted: it never runs)
        self._chunks.close()
        self._closed = True

    def __enter__(self) -> AgentStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def full_stream(self) -> Iterator[StreamChunk]:
        return iter(self)

    @property
    def text_stream(self) -> Iterator[str]:
        for chunk in self:
            if chunk.type == "text-delta" and "agent_path" not in chunk.payload:
                yield chunk.payload["text"]  # the agent's own words, not its subagents'

    def _repr_html_(self) -> str:
        return _finished_html(self._run, "call result()")

    def result(self) -> GenerateResult:
        if self._chunks is None:  # nobody is watching the chunks: stream only what it needs
            self._modes = RESULT_MODES
        for _ in self:
            pass
        if self._run is None or self._run.result is None:
            raise _unfinished(self._closed, self.run_id)
        return self._run.result


class AsyncAgentStream:
    """The async twin of `AgentStream`: `async for chunk in stream`, `await stream.result()`.

    It is also awaitable (`stream = await agent.astream(...)`), which runs any checks the call
    needs before the first chunk.
    """

    def __init__(
        self,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        prepare: Prepare,
        run_id: str,
        thread_id: str,
        *,
        decides: str | None = None,
        wait: float = WAIT_SECONDS,
    ) -> None:
        self._graph = graph
        self._prepare = prepare
        self._wait = wait
        """Seconds it waits for its thread while another run holds it."""
        self._decides = decides
        """The method whose decision this stream takes when first awaited, if any."""
        self._awaited = False
        self._started = False
        self._preparing: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        """Held while the stream prepares (once, however many tasks await it at a time), on
        the loop it was made for (an earlier loop's, from a try that failed, is not reused)."""
        self._run: _Run | None = None
        self._chunks: AsyncGenerator[StreamChunk, None] | None = None
        self._closed = False
        self._modes = STREAM_MODES
        self.run_id = run_id
        self.thread_id = thread_id

    async def _ready(self) -> _Run:
        self._awaited = True
        loop = asyncio.get_running_loop()
        if self._preparing is None or self._preparing[0] is not loop:
            self._preparing = (loop, asyncio.Lock())
        async with self._preparing[1]:
            if self._run is None:
                with _kept(self._decides, self.run_id):
                    invocation = await self._prepared()
                self._run = _Run(invocation)
                self.thread_id = invocation.thread_id
                self.run_id = invocation.run_id  # (a decision's stream may go on as a later run)
        return self._run

    async def _prepared(self) -> Invocation:
        """The invocation, prepared in a thread (it reads storage, and may run an approvers
        policy), each try refused at once while another run holds the thread: the wait is
        on the event loop (`until_free`)."""
        return await until_free(lambda: offload(self._prepare, False), self._wait)

    def __await__(self) -> Generator[Any, None, AsyncAgentStream]:
        async def ready() -> AsyncAgentStream:
            await self._ready()
            return self

        return ready().__await__()

    async def _generate(self) -> AsyncGenerator[StreamChunk, None]:
        self._started = True
        run = await self._ready()
        inv = run.invocation
        resumed = False
        try:
            astream = (self._graph.astream_held if isinstance(self._graph, LeasedGraph)
                       else self._graph.astream)
            parts: Any = astream(inv.input, inv.config, stream_mode=self._modes,
                                 durability=DURABILITY, subgraphs=self._modes is STREAM_MODES)
            stop, between = False, True  # (`between`: no step in progress)
            try:
                written = []
                if isinstance(inv.input, dict):  # (as `AgentStream._generate`)
                    async for part in parts:
                        written.append(part)
                        if _is_root_values(part):
                            break
                yield run.start()
                for part in written:
                    chunks, stop = run.feed(part, self._modes is STREAM_MODES)
                    for chunk in chunks:
                        yield chunk
                    if stop:
                        break
                while not stop and (part := await anext(parts, None)) is not None:
                    chunks, stop = run.feed(part, self._modes is STREAM_MODES)
                    between = _is_root_values(part)
                    for chunk in chunks:
                        yield chunk
            except GeneratorExit:
                # Closed (`aclose`) mid-step: the step ends first, as the sync twin's does (a
                # close waits for its tools' threads). Closed at once, an async tool was
                # cancelled after its payment went through, and the model told its outcome
                # is unknown (helper-107).
                if not between:
                    async for part in parts:
                        if _is_root_values(part):
                            break
                raise
            finally:
                await parts.aclose()
            # (what waits is read from the ledger too: off the event loop, in the hop that
            # frees what the run held)
            final = await offload(_finished, run, run.observed()
                                  or await self._graph.aget_state(inv.config))
            resumed = True
        finally:
            if inv.release is not None and not resumed:
                await offload(inv.release, False)
        for chunk in final:
            yield chunk

    def __del__(self) -> None:
        if not self._awaited and self._decides is not None:
            warnings.warn(NEVER_AWAITED.format(method=self._decides, run_id=self.run_id),
                          RuntimeWarning, stacklevel=2)
        if self._run is not None and not self._started and self._decides is not None:
            # awaited (it holds the thread), never read: its invocation releases itself
            warnings.warn(DROPPED.format(method=self._decides, run_id=self.run_id),
                          RuntimeWarning, stacklevel=2)

    def __aiter__(self) -> AsyncIterator[StreamChunk]:
        if self._chunks is None:
            self._chunks = self._generate()
        return self._chunks

    async def aclose(self) -> None:
        """Stop reading (`AgentStream.close`): the run stops after the step it is in and gives
        its thread back, as does a stream that was awaited (which took the thread) and never
        read. Also what leaving an `async with` block does."""
        if self._chunks is None:
            self._chunks = self._generate()  # (closed unstarted: it never runs)
            if self._run is not None and self._run.invocation.release is not None:
                await offload(self._run.invocation.release, False)
        await self._chunks.aclose()
        self._closed = True

    async def __aenter__(self) -> AsyncAgentStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def full_stream(self) -> AsyncIterator[StreamChunk]:
        return self.__aiter__()

    @property
    async def text_stream(self) -> AsyncIterator[str]:
        async for chunk in self:
            if chunk.type == "text-delta" and "agent_path" not in chunk.payload:
                yield chunk.payload["text"]  # the agent's own words, not its subagents'

    def _repr_html_(self) -> str:
        return _finished_html(self._run, "await result()")

    async def result(self) -> GenerateResult:
        if self._chunks is None:
            self._modes = RESULT_MODES
        async for _ in self:
            pass
        if self._run is None or self._run.result is None:
            raise _unfinished(self._closed, self.run_id)
        return self._run.result
