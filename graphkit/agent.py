"""`Agent`: builds the graph, starts runs, and turns human decisions into graph resumes.

The agent's settings (approvers, expiry, request-level approval) are compiled into its graph;
the `approval_gate` node enforces them. Every deciding method here finds the run, takes the
decision through `graphkit._review` (a refused one raises a typed error and changes nothing),
and asks the gate to apply it; the gate checks it again before anything runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, convert_to_messages, messages_to_dict
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from graphkit._context import LEASE_KEY, thread_id_of
from graphkit._control import (
    Request,
    agent_at,
    apply_command,
    continue_command,
    decide,
    is_current,
    left_waiting,
    of_run,
    policy_finder,
    shared_names,
    start_payload,
    waiting,
)
from graphkit._events import finish_reason
from graphkit._graph import build_graph
from graphkit._ids import given_id
from graphkit._latest import Paused, ServesLatest, latest, options_of
from graphkit._leased_graph import LeasedGraph
from graphkit._ledger import WAIT_SECONDS, Ledger, RunToRecord
from graphkit._notify import Dispatcher, Webhook, start_notifications
from graphkit._owner import new_owner
from graphkit._review import Choice, Remember
from graphkit._runs import (
    AgentStream,
    AsyncAgentStream,
    Invocation,
    Prepare,
    Release,
    StateHook,
    pending_of,
    released_when_dropped,
)
from graphkit._secrets import masked, masked_message
from graphkit._settings import DEFAULT_GRANT_TTL, Approvers, GateSettings
from graphkit._state import DEFAULT_MAX_STEPS, RunOptions
from graphkit._storage import open_storage, serve_agent, served_storage
from graphkit._validate import (
    declares_secrets,
    secret_paths_of,
    unsupported_injections,
    unwritten_fields,
)
from graphkit.errors import (
    SNAPSHOT_NOT_FOUND,
    ApprovalNotFoundError,
    GraphkitError,
    RunSupersededError,
    SnapshotNotFoundError,
)
from graphkit.tools import HumanDecision, create_tool, decisions_of
from graphkit.types import GenerateResult, PendingApproval

__all__ = ["Agent"]

Build = Callable[[Paused, Request], Any]
"""Turns the paused state into the graph's input (or resume Command), raising if refused."""
Claim = Callable[[Paused, Request], object]
"""Takes a decision in the ledger before the run is resumed."""
_EMPTY = StateSnapshot({}, (), {}, None, None, None, (), ())
"""The state of a thread that does not exist yet."""
RUN_METADATA_KEY = "graphkit_run_id"
SERVER_ENV = "LANGSMITH_LANGGRAPH_API_VARIANT"
"""Set by the LangGraph API server (`langgraph dev` and the platform) in its process."""
RECURSION_LIMIT = 10_000
"""LangGraph's superstep limit; `max_steps` (model turns) is the limit users set."""
MAX_CONCURRENCY = 64
"""Threads for concurrent tool calls in a sync run (LangGraph's default pool has cpu+4)."""

Message = str | BaseMessage | Mapping[str, Any]


def _messages(message: Message | Sequence[Message] | None) -> list[BaseMessage]:
    if message is None:
        return []
    if isinstance(message, str):
        return [HumanMessage(message)]
    items: list[Any] = [message] if isinstance(message, BaseMessage | Mapping) else list(message)
    try:
        return list(convert_to_messages(items))
    except (ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as exc:
        # (LangChain's own words name what it could not read)
        msg = ("a message is text, a LangChain message, a (role, content) pair or a dict "
               f"with 'role' and 'content': {exc}")
        raise GraphkitError(msg) from exc


def _model(model: BaseChatModel | str) -> BaseChatModel:
    if isinstance(model, BaseChatModel):
        return model
    from langchain.chat_models import init_chat_model

    return init_chat_model(model)


def _tools(tools: Sequence[BaseTool | Callable[..., Any]]) -> list[BaseTool]:
    result = [t if isinstance(t, BaseTool) else create_tool(t) for t in tools]
    names = [t.name for t in result]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        msg = f"tool names must be unique, got duplicates {duplicates}"
        raise ValueError(msg)
    for tool in result:
        if unfilled := unsupported_injections(tool):
            msg = (f"tool {tool.name!r} takes injected arguments {unfilled} that graphkit does "
                   "not fill in (LangGraph's InjectedState, InjectedStore, ToolRuntime, a bare "
                   "InjectedToolArg; only InjectedToolCallId is): its tools run apart from the "
                   "graph's state. Take what it needs as an argument the model gives (shown "
                   "for approval), or from graphkit's ToolContext (thread_id, agent_path)")
            raise GraphkitError(msg)
        if unwritten := unwritten_fields(tool):
            msg = (f"tool {tool.name!r} has argument fields its schema does not write as "
                   f"given ({unwritten}: Field(exclude=True), exclude_if, serialize_by_alias, "
                   "or ser_json_bytes other than val_json_bytes): a call is shown, judged, "
                   "approved and run as written, so the tool would not run with what the "
                   "model gave them. Drop those settings from the tool's argument schema")
            raise GraphkitError(msg)
    return result


class Agent:
    """A LangGraph agent whose tool calls can wait for a human, durably.

    Args:
        name: The agent's name; it appears in `agent_path` of its approvals.
        model: A chat model, or a string for LangChain's `init_chat_model`
            (`"openai:gpt-4o-mini"`).
        tools: `create_tool` tools, plain LangChain tools, or plain functions.
        agents: Subagents, offered to the model as delegation tools named after their keys.
        instructions: The system prompt.
        description: What this agent does, shown to a supervisor's model.
        checkpointer: `"memory"` (default), `"sqlite:///file.db"`, `"postgresql://..."`, or a
            LangGraph checkpointer instance.
        require_tool_approval: Pause every tool call of every request by default.
        auto_resume_suspended_tools: Let the next user message resume a suspended tool.
        approvers: A policy `(decided_by, pending) -> bool` consulted before every decision.
        approval_ttl: An approval undecided for this long is declined as expired (a tool's own
            `approval_ttl` wins).
        grant_ttl: How long a `remember="thread"` grant approves later calls.
        notify: `Webhook`s told of every approval requested, decided and expired, in this
            agent's storage, by whichever process records it; delivered from this process
            (`agent.dispatcher`) at least once, signed, retried.
        allowed_decisions: The decisions a reviewer may take on the approvals of tools that
            do not set their own (`create_tool(allowed_decisions=...)`); default approve, edit
            and reject. Add "respond" to let a reviewer answer the model instead of running.
    """

    def __init__(
        self,
        *,
        name: str,
        model: BaseChatModel | str,
        tools: Sequence[BaseTool | Callable[..., Any]] = (),
        agents: Mapping[str, Agent] | None = None,
        instructions: str = "",
        description: str = "",
        checkpointer: BaseCheckpointSaver[Any] | str | None = None,
        require_tool_approval: bool = False,
        auto_resume_suspended_tools: bool = False,
        approvers: Approvers | None = None,
        approval_ttl: timedelta | None = None,
        grant_ttl: timedelta | None = DEFAULT_GRANT_TTL,
        notify: Sequence[Webhook] = (),
        allowed_decisions: Sequence[HumanDecision] | None = None,
    ) -> None:
        if not name or "/" in name or not name.isprintable():
            msg = (f"agent name {name!r} must be non-empty printable text without '/' (agent "
                   "paths are joined with '/')")
            raise ValueError(msg)
        self.name = name
        self.description = description
        self.instructions = instructions
        self.model = _model(model)
        self.tools = _tools(tools)
        self.agents = dict(agents or {})
        shared = shared_names(self.agents.values())
        if shared:
            # two of one supervisor under one name would share every grant, policy and
            # decision recorded for that path
            msg = (f"subagents of {name!r} share the names {shared}; give each its own name "
                   "(agent paths, which grants, policies and decisions name, are made of them)")
            raise ValueError(msg)
        self.require_tool_approval = require_tool_approval
        self.auto_resume_suspended_tools = auto_resume_suspended_tools
        self.approvers = approvers
        self.approval_ttl = approval_ttl
        self.grant_ttl = grant_ttl
        self.settings = GateSettings(
            require_tool_approval=require_tool_approval,
            auto_resume_suspended_tools=auto_resume_suspended_tools,
            approvers=approvers, approval_ttl=approval_ttl, grant_ttl=grant_ttl,
            allowed_decisions=decisions_of(allowed_decisions))
        # Under the LangGraph API server (`langgraph dev`, Studio, the platform) persistence is
        # the server's: it refuses graphs compiled with their own checkpointer or store. The
        # agents it serves share one ledger in this process, which its mounted web inbox reads.
        served = bool(os.environ.get(SERVER_ENV)) and checkpointer in (None, "memory")
        self._storage = served_storage() if served else open_storage(checkpointer)
        self.notify = tuple(notify)
        self.dispatcher: Dispatcher | None = (
            start_notifications(self._storage.ledger, self.notify, database=self._storage.url)
            if self.notify else None)
        self.builder = self._builder(self._storage.ledger)
        # its runs hold their thread's lease, however they are started (`_leased_graph`)
        self.graph: CompiledStateGraph[Any, Any, Any, Any] = LeasedGraph.of(self.builder.compile(
            checkpointer=None if served else self._storage.checkpointer,
            store=None if served else self._storage.store,
            name=name,
        ), self._storage.ledger, name)
        if served:  # once built: an agent whose construction failed is never served
            serve_agent(self)

    def _builder(self, ledger: Ledger, *, nested: bool = False,
                 approvers: Approvers | None = None) -> Any:
        settings = self.settings
        if settings.approvers is None and approvers is not None:
            settings = dataclasses.replace(settings, approvers=approvers)
        return build_graph(
            name=self.name, model=self.model, tools=self.tools, instructions=self.instructions,
            subagents={key: (sub.subgraph(ledger, approvers=settings.approvers),
                             sub.description)
                       for key, sub in self.agents.items()},
            settings=settings, ledger=ledger, nested=nested,
        )

    def subgraph(self, ledger: Ledger, *, approvers: Approvers | None = None
                 ) -> CompiledStateGraph[Any, Any, Any, Any]:
        """This agent's graph for use inside a supervisor: it checkpoints in the supervisor's
        storage, under the supervisor's thread, and records in the supervisor's ledger, with
        its own settings and policy (its supervisor's `approvers` when it has none)."""
        compiled: CompiledStateGraph[Any, Any, Any, Any] = self._builder(
            ledger, nested=True, approvers=approvers).compile(
            name=self.name)
        return compiled

    # ------------------------------------------------------------------ runs and threads

    def _config(self, thread_id: str, run_id: str, reason: str | None = None) -> RunnableConfig:
        metadata: dict[str, Any] = {RUN_METADATA_KEY: run_id}
        if reason:
            metadata["checkpoint_reason"] = reason
        return {
            "configurable": {"thread_id": thread_id},
            "metadata": metadata,
            "recursion_limit": RECURSION_LIMIT,
            "max_concurrency": MAX_CONCURRENCY,
        }

    def _not_found(self, run_id: str) -> SnapshotNotFoundError:
        return SnapshotNotFoundError(
            SNAPSHOT_NOT_FOUND.format(run_id=run_id, storage=self._storage.description)
        )

    def _thread_of(self, run_id: str) -> str:
        # (None read as no filter below: every thread a graph was driven on directly matched,
        # and a decision went to whichever came first: helper-105)
        run_id = given_id(run_id, "run id", SnapshotNotFoundError)
        known = self._storage.ledger.run(run_id)
        if known is not None:
            thread_id, owner = known
            if owner != self.name:
                msg = (f"run {run_id!r} belongs to agent {owner!r}, not {self.name!r}; decide "
                       "and resume it with the agent that started it (or the inbox)")
                raise GraphkitError(msg)
            return thread_id
        # A run this ledger does not know (recorded by an earlier graphkit in the store, which
        # a server's clients can write; or a ledger kept in another process's memory): the
        # checkpoints it wrote name it.
        for found in self._storage.checkpointer.list(
            None, filter={RUN_METADATA_KEY: run_id}, limit=1
        ):
            return str(found.config["configurable"]["thread_id"])
        raise self._not_found(run_id)

    def _options(
        self,
        run_id: str,
        require_tool_approval: bool | None,
        auto_resume_suspended_tools: bool | None,
        max_steps: int,
    ) -> RunOptions:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            msg = f"max_steps must be a whole number of at least 1, got {max_steps!r}"
            raise ValueError(msg)
        for name, flag in (("require_tool_approval", require_tool_approval),
                           ("auto_resume_suspended_tools", auto_resume_suspended_tools)):
            _flag(flag, name)
        # The agent's own settings live in its graph; a request may only add to them.
        return RunOptions(
            run_id=run_id,
            require_tool_approval=bool(require_tool_approval),
            auto_resume_suspended_tools=self.auto_resume_suspended_tools
            if auto_resume_suspended_tools is None else auto_resume_suspended_tools,
            max_steps=max_steps,
        )

    def _shown_args(self, agent_path: Sequence[str], tool_name: str, args: dict[str, Any]
                    ) -> dict[str, Any]:
        """A call's arguments as a view shows them: the tool's secret values masked (and
        arguments the tool cannot read shown as the model wrote them). A tool that declares
        no secret is not parsed again for it: each call of every streamed turn comes here."""
        tool = self._find_tool(agent_path, tool_name)
        if tool is None or not declares_secrets(tool):
            return args
        shown: dict[str, Any] = masked(args, secret_paths_of(tool, args))
        return shown

    def _find_tool(self, agent_path: Sequence[str], tool_name: str) -> BaseTool | None:
        agent: Agent | None = agent_at(self, agent_path)
        return next((t for t in agent.tools if t.name == tool_name), None) if agent else None

    def _grant_ttl(self, agent_path: Sequence[str]) -> timedelta | None:
        """The `grant_ttl` of the agent whose call a grant covers (this one's where the path
        leads nowhere)."""
        agent: Agent = agent_at(self, agent_path) or self
        return agent.grant_ttl

    def _request(self, run_id: str, thread_id: str) -> Request:
        return Request(run_id=run_id, thread_id=thread_id, ledger=self._storage.ledger,
                       find_tool=self._find_tool,
                       find_policy=policy_finder(self), find_grant_ttl=self._grant_ttl,
                       agent_path=(self.name,))

    def _prepare(
        self,
        *,
        run_id: str,
        thread_id: str,
        config: RunnableConfig,
        build: Build,
        on_state_change: StateHook | None = None,
        fresh: bool = False,
        new_run: RunOptions | None = None,
        leased_by: str | None = None,
        held_by: str | None = None,
        follow: bool = False,
    ) -> Prepare:
        """What a stream does first: take the thread's lease (recording a new run with it, and the
        options of its request, `new_run`, which its gates obey; `leased_by`: the owner
        holding it already), read the latest checkpoint (what it waits on), build the input;
        the same read serves the graph (`ServesLatest`), which needs no other. `held_by`:
        the owner under which a decision just taken holds its run in the ready queue
        (`Ledger.decide`): renewed while the run advances, let go once it went on, else left
        to lapse, so that a worker takes the run over (a stream that fails, or is dropped
        unread, or this process dying). `follow` (a decision's stream): if a later run
        started on the thread since (the ledger says), the stream goes on as that run, under
        its id, whose turn it advances: its result names the run whose calls it lists."""
        run = RunToRecord(run_id, self.name, new_run) if new_run is not None else None
        saver = self.graph.checkpointer
        ledger = self._storage.ledger
        # a new message may queue its run held for this caller (`start_payload`), as a
        # decision does
        held = held_by if held_by is not None or new_run is None else new_owner()

        def prepare(wait: bool = True) -> Invocation:
            lease = contextlib.ExitStack()
            owner = lease.enter_context(ledger.lease(
                thread_id, wait=WAIT_SECONDS if wait else 0.0, run=run, held=leased_by))
            if isinstance(saver, ServesLatest):  # what the run did not read goes with the lease
                lease.callback(saver.unserve, thread_id)
            try:
                current = (ledger.later_run(run_id) if follow else None) or run_id
                base = config if current == run_id else self._config(thread_id, current)
                # the run's nodes and writes check that the lease is still its own (`_fence`)
                leased: RunnableConfig = {**base, "configurable": {
                    **(base.get("configurable") or {}), LEASE_KEY: owner}}
                # A thread made just now has no state to read (nor has its graph).
                if fresh and isinstance(saver, ServesLatest):
                    saver.serve(config, None)
                snapshot = _EMPTY if fresh else latest(self.graph, base, serve=True)
                payload = build(snapshot, dataclasses.replace(
                    self._request(current, thread_id), held_by=held))
            except BaseException:
                if run is not None:  # a run refused before it ran leaves no record
                    ledger.forget_run(run_id)
                lease.close()
                raise
            if held is not None:  # renewed while the run advances, let go with the lease
                lease.enter_context(ledger.holding_ready(run_id, held))

            def free(resumed: bool) -> None:
                try:
                    if resumed and held is not None:
                        ledger.let_go(run_id, held)
                finally:
                    lease.close()

            return released_when_dropped(Invocation(
                payload, leased, current, thread_id, on_state_change, Release(free),
                agent=self.name, ledger=ledger, shown_args=self._shown_args))

        return prepare

    def _decide(self, claim: Claim | None, run_id: str, thread_id: str,
                config: RunnableConfig) -> str | None:
        """Take a method's decision (if it takes one) on the run's latest state; the owner
        under which the decision holds the run for the stream that resumes it next."""
        if claim is None:
            return None
        held = new_owner()
        claim(latest(self.graph, config), dataclasses.replace(
            self._request(run_id, thread_id), held_by=held))
        return held

    def _current(self, build: Build, known: tuple[str, str | None] | None = None) -> Build:
        """`build`, for a run its thread has not left behind: a resume that names a run the
        thread went on from (a later run started on it, as the ledger recorded) never advances
        the later run under the earlier one's id. Where the later run rests (paused on calls
        nobody decided yet, or ended), nothing can go on: `RunSupersededError`, naming it,
        nothing changed. Else (a decided call waits to be applied, or it stopped mid-step: its
        process died, or `on_state_change`), the thread goes on as that run (`_LaterRun`). A
        run whose own undecided calls still wait in the thread (a later run carries its turn
        on) is resumed as itself. The ledger says which run is later, never the state: a run
        a new message started may not have reached the state yet (its stream was left, its
        process died), and a client may write the state. `known`: a run id and its later run
        as read under the thread's lease already (a worker's claim on SQLite:
        `ReadyRun.later_read`), which saves the read."""

        def current(snapshot: Paused, req: Request) -> Any:
            later = (known[1] if known is not None and known[0] == req.run_id
                     else req.ledger.later_run(req.run_id))
            if later is None:
                named = options_of(snapshot).get("run_id") == req.run_id
                return _with_options(build(snapshot, req),
                                     None if named else req.ledger.run_options(req.run_id))
            # (with what the ledger says the agent's gates wait on, for a run a state write
            # ended: its decided call waits to be applied there)
            items = waiting(snapshot, req.ledger, self.name)
            undecided = [i for i in items if i.row is not None and not i.row.decided]
            if of_run(undecided, req.run_id, current=False):
                return build(snapshot, req)
            if len(undecided) < len(items) or not _at_rest(
                    self.graph.get_state(self._config(req.thread_id, req.run_id))):
                raise _LaterRun(later)  # (a decision waits to be applied, or a step to end)
            msg = (f"run {req.run_id!r} is over: its thread went on in run {later!r}; decide "
                   "and resume that run")
            raise RunSupersededError(msg, later_run_id=later)

        return current

    def _resumed(self, run_id: str, build: Build, go: Callable[[str, Build], Any],
                 known: tuple[str, str | None] | None = None) -> Any:
        """`go(run_id, self._current(build))`, or the same for the later run the thread went
        on in (`_LaterRun`: at most twice more, for runs started meanwhile)."""
        for _ in range(3):
            try:
                return go(run_id, self._current(build, known))
            except _LaterRun as later:
                run_id = later.run_id
        return go(run_id, build)

    def _advance(self, run_id: str, build: Build, on_state_change: StateHook | None = None,
                 *, claim: Claim | None = None, thread_id: str | None = None,
                 leased_by: str | None = None) -> AgentStream:
        thread_id = thread_id or self._thread_of(run_id)
        config = self._config(thread_id, run_id)
        # The decision is taken now (a refused one raises here); the stream then asks the gate
        # to apply it.
        held = self._decide(claim, run_id, thread_id, config)
        prepare = self._prepare(run_id=run_id, thread_id=thread_id, config=config, build=build,
                                on_state_change=on_state_change, leased_by=leased_by,
                                held_by=held, follow=claim is not None)
        method = getattr(claim, "method", None)
        return AgentStream(self.graph, prepare, run_id, thread_id, decided_by=method)

    def _aadvance(self, run_id: str, build: Build, on_state_change: StateHook | None = None,
                  *, claim: Claim | None = None) -> AsyncAgentStream:
        """`_advance` for async runs: the run is found and the decision taken in a thread, when
        the stream is first awaited."""
        claimed: list[Prepare] = []

        def prepare(wait: bool = True) -> Invocation:
            if not claimed:  # once: a retry that waits for the lease does not decide again
                thread_id = self._thread_of(run_id)
                config = self._config(thread_id, run_id)
                held = self._decide(claim, run_id, thread_id, config)
                claimed.append(self._prepare(run_id=run_id, thread_id=thread_id, config=config,
                                             build=build, on_state_change=on_state_change,
                                             held_by=held, follow=claim is not None))
            return claimed[0](wait)

        return AsyncAgentStream(self.graph, prepare, run_id, "",
                                decides=getattr(claim, "method", None), wait=WAIT_SECONDS)

    # ------------------------------------------------------------------ generate / stream

    def stream(
        self,
        message: Message | Sequence[Message] | None = None,
        *,
        thread_id: str | None = None,
        require_tool_approval: bool | None = None,
        auto_resume_suspended_tools: bool | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        on_state_change: StateHook | None = None,
        checkpoint_reason: str | None = None,
    ) -> AgentStream:
        """Start a run (or continue a thread) and stream it. See `generate`."""
        run_id, thread_id, config, build, fresh, options = self._start(
            message, thread_id, require_tool_approval, auto_resume_suspended_tools, max_steps,
            checkpoint_reason)
        prepare = self._prepare(run_id=run_id, thread_id=thread_id, config=config, build=build,
                                on_state_change=on_state_change, fresh=fresh, new_run=options)
        return AgentStream(self.graph, prepare, run_id, thread_id)

    def generate(
        self,
        message: Message | Sequence[Message] | None = None,
        *,
        thread_id: str | None = None,
        require_tool_approval: bool | None = None,
        auto_resume_suspended_tools: bool | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        on_state_change: StateHook | None = None,
        checkpoint_reason: str | None = None,
    ) -> GenerateResult:
        """Run the agent on `message` until it answers, pauses for a human, or is stopped.

        A paused run returns `finish_reason="suspended"` with `suspend_payload` and `run_id`.
        A message sent while calls wait on a thread declines them as superseded (or, with
        auto-resume, resumes a suspended tool with data read from the message).
        """
        return self.stream(
            message, thread_id=thread_id, require_tool_approval=require_tool_approval,
            auto_resume_suspended_tools=auto_resume_suspended_tools, max_steps=max_steps,
            on_state_change=on_state_change, checkpoint_reason=checkpoint_reason,
        ).result()

    def astream(
        self,
        message: Message | Sequence[Message] | None = None,
        *,
        thread_id: str | None = None,
        require_tool_approval: bool | None = None,
        auto_resume_suspended_tools: bool | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        on_state_change: StateHook | None = None,
        checkpoint_reason: str | None = None,
    ) -> AsyncAgentStream:
        """Async twin of `stream`: `async for chunk in agent.astream(...)`."""
        run_id, thread_id, config, build, fresh, options = self._start(
            message, thread_id, require_tool_approval, auto_resume_suspended_tools, max_steps,
            checkpoint_reason)
        prepare = self._prepare(run_id=run_id, thread_id=thread_id, config=config, build=build,
                                on_state_change=on_state_change, fresh=fresh, new_run=options)
        return AsyncAgentStream(self.graph, prepare, run_id, thread_id, wait=WAIT_SECONDS)

    async def agenerate(
        self,
        message: Message | Sequence[Message] | None = None,
        *,
        thread_id: str | None = None,
        require_tool_approval: bool | None = None,
        auto_resume_suspended_tools: bool | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        on_state_change: StateHook | None = None,
        checkpoint_reason: str | None = None,
    ) -> GenerateResult:
        """Async twin of `generate`."""
        return await self.astream(
            message, thread_id=thread_id, require_tool_approval=require_tool_approval,
            auto_resume_suspended_tools=auto_resume_suspended_tools, max_steps=max_steps,
            on_state_change=on_state_change, checkpoint_reason=checkpoint_reason,
        ).result()

    def _start(
        self,
        message: Message | Sequence[Message] | None,
        thread_id: str | None,
        require_tool_approval: bool | None,
        auto_resume_suspended_tools: bool | None,
        max_steps: int,
        checkpoint_reason: str | None,
    ) -> tuple[str, str, RunnableConfig, Build, bool, RunOptions]:
        fresh = thread_id is None
        # (a thread named by 1 ran in thread "1"; by a list, the storage raised: helper-107)
        thread_id = str(uuid.uuid4()) if fresh else given_id(thread_id, "thread id",
                                                                GraphkitError)
        run_id = str(uuid.uuid4())
        options = self._options(run_id, require_tool_approval, auto_resume_suspended_tools,
                                max_steps)
        config = self._config(thread_id, run_id, checkpoint_reason)
        messages = _messages(message)

        def build(snapshot: Paused, req: Request) -> Any:
            return start_payload(snapshot, messages, options, req)


        return run_id, thread_id, config, build, fresh, options

    # ------------------------------------------------------------------ deciding

    def approve_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
        args: Mapping[str, Any] | None = None,
        args_digest: str | None = None,
        remember: Remember = "once",
    ) -> AgentStream:
        """Approve a paused call (with edited `args` if given) and stream the continued run.

        `tool_call_id` may be left out only when exactly one approval is pending. With
        `args_digest` the approval applies only if the call still has the arguments reviewed.
        `remember="thread"` approves later calls of the same tool in this thread too, as long
        as this reviewer may approve each of them.
        """
        return self._advance(run_id, _apply, claim=_claim(
            _approval(args), tool_call_id=tool_call_id, decided_by=decided_by,
            comment=comment, args_digest=args_digest, remember=remember,
            method="approve_tool_call"))

    def decline_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
    ) -> AgentStream:
        """Decline a paused call: it never runs; the model is told, and the run goes on."""
        return self._advance(run_id, _apply, claim=_claim(
            Choice(type="reject"), tool_call_id=tool_call_id, decided_by=decided_by,
            comment=comment,
            method="decline_tool_call"))

    def respond_tool_call(
        self,
        *,
        run_id: str,
        message: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
    ) -> AgentStream:
        """Answer a paused call instead of running it (a tool that allows "respond"): the
        model reads `message` as the call's result, and the run goes on."""
        return self._advance(run_id, _apply, claim=_claim(
            Choice(type="respond", message=message), tool_call_id=tool_call_id,
            decided_by=decided_by, comment=None,
            method="respond_tool_call"))

    def respond_tool_call_generate(
        self,
        *,
        run_id: str,
        message: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
    ) -> GenerateResult:
        """`respond_tool_call`, run to the end (or the next pause)."""
        return self.respond_tool_call(run_id=run_id, message=message, tool_call_id=tool_call_id,
                                      decided_by=decided_by).result()

    def arespond_tool_call(
        self,
        *,
        run_id: str,
        message: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
    ) -> AsyncAgentStream:
        """Async twin of `respond_tool_call`."""
        return self._aadvance(run_id, _apply, claim=_claim(
            Choice(type="respond", message=message), tool_call_id=tool_call_id,
            decided_by=decided_by, comment=None,
            method="arespond_tool_call"))

    async def arespond_tool_call_generate(
        self,
        *,
        run_id: str,
        message: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
    ) -> GenerateResult:
        """Async twin of `respond_tool_call_generate`."""
        return await self.arespond_tool_call(
            run_id=run_id, message=message, tool_call_id=tool_call_id,
            decided_by=decided_by).result()

    def approve_tool_call_generate(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
        args: Mapping[str, Any] | None = None,
        args_digest: str | None = None,
        remember: Remember = "once",
    ) -> GenerateResult:
        """`approve_tool_call`, run to the end (or the next pause)."""
        return self.approve_tool_call(
            run_id=run_id, tool_call_id=tool_call_id, decided_by=decided_by, comment=comment,
            args=args, args_digest=args_digest, remember=remember).result()

    def decline_tool_call_generate(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
    ) -> GenerateResult:
        """`decline_tool_call`, run to the end (or the next pause)."""
        return self.decline_tool_call(run_id=run_id, tool_call_id=tool_call_id,
                                      decided_by=decided_by, comment=comment).result()

    def aapprove_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
        args: Mapping[str, Any] | None = None,
        args_digest: str | None = None,
        remember: Remember = "once",
    ) -> AsyncAgentStream:
        """Async twin of `approve_tool_call`."""
        return self._aadvance(run_id, _apply, claim=_claim(
            _approval(args), tool_call_id=tool_call_id, decided_by=decided_by,
            comment=comment, args_digest=args_digest, remember=remember,
            method="aapprove_tool_call"))

    def adecline_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
    ) -> AsyncAgentStream:
        """Async twin of `decline_tool_call`."""
        return self._aadvance(run_id, _apply, claim=_claim(
            Choice(type="reject"), tool_call_id=tool_call_id, decided_by=decided_by,
            comment=comment,
            method="adecline_tool_call"))

    async def aapprove_tool_call_generate(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
        args: Mapping[str, Any] | None = None,
        args_digest: str | None = None,
        remember: Remember = "once",
    ) -> GenerateResult:
        """Async twin of `approve_tool_call_generate`."""
        return await self.aapprove_tool_call(
            run_id=run_id, tool_call_id=tool_call_id, decided_by=decided_by, comment=comment,
            args=args, args_digest=args_digest, remember=remember).result()

    async def adecline_tool_call_generate(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
    ) -> GenerateResult:
        """Async twin of `decline_tool_call_generate`."""
        return await self.adecline_tool_call(run_id=run_id, tool_call_id=tool_call_id,
                                             decided_by=decided_by, comment=comment).result()

    def resume_stream(
        self, resume_data: Any, *, run_id: str, tool_call_id: str | None = None,
        decided_by: str | None = None,
    ) -> AgentStream:
        """Resume a suspended tool with `resume_data` (validated by its `resume_schema`).
        With `decided_by`, the agent's approvers policy decides whether that person may."""
        return self._advance(run_id, _apply, claim=_claim(
            Choice(type="resume", data=resume_data), tool_call_id=tool_call_id,
            decided_by=decided_by, comment=None,
            method="resume_stream"))

    def resume_generate(
        self, resume_data: Any, *, run_id: str, tool_call_id: str | None = None,
        decided_by: str | None = None,
    ) -> GenerateResult:
        """`resume_stream`, run to the end (or the next pause)."""
        return self.resume_stream(resume_data, run_id=run_id, tool_call_id=tool_call_id,
                                  decided_by=decided_by).result()

    def aresume_stream(
        self, resume_data: Any, *, run_id: str, tool_call_id: str | None = None,
        decided_by: str | None = None,
    ) -> AsyncAgentStream:
        """Async twin of `resume_stream`."""
        return self._aadvance(run_id, _apply, claim=_claim(
            Choice(type="resume", data=resume_data), tool_call_id=tool_call_id,
            decided_by=decided_by, comment=None,
            method="aresume_stream"))

    async def aresume_generate(
        self, resume_data: Any, *, run_id: str, tool_call_id: str | None = None,
        decided_by: str | None = None,
    ) -> GenerateResult:
        """Async twin of `resume_generate`."""
        return await self.aresume_stream(
            resume_data, run_id=run_id, tool_call_id=tool_call_id,
            decided_by=decided_by).result()

    def resolve_tool_approval(
        self,
        *,
        run_id: str,
        id: str,
        approved: bool,
        decided_by: str | None = None,
        comment: str | None = None,
        approved_args: Mapping[str, Any] | None = None,
    ) -> PendingApproval:
        """Record a decision without continuing the run; `resume(run_id=...)` continues."""
        id = given_id(id, "approval id", ApprovalNotFoundError)  # (None is not "the one")
        _flag(approved, "approved", optional=False)
        thread_id = self._thread_of(run_id)
        config = self._config(thread_id, run_id)
        choice = _approval(approved_args) if approved else Choice(type="reject")
        _claim(choice, approval_id=id, decided_by=decided_by, comment=comment)(
            latest(self.graph, config), self._request(run_id, thread_id))
        return self._recorded(self.pending_approvals(run_id=run_id), id)

    async def aresolve_tool_approval(
        self,
        *,
        run_id: str,
        id: str,
        approved: bool,
        decided_by: str | None = None,
        comment: str | None = None,
        approved_args: Mapping[str, Any] | None = None,
    ) -> PendingApproval:
        """Async twin of `resolve_tool_approval`."""
        return await asyncio.to_thread(
            self.resolve_tool_approval, run_id=run_id, id=id, approved=approved,
            decided_by=decided_by, comment=comment, approved_args=approved_args)

    @staticmethod
    def _recorded(pending: list[PendingApproval], approval_id: str) -> PendingApproval:
        for item in pending:
            if item.id == approval_id:
                return item
        msg = f"approval {approval_id!r} is no longer pending after recording the decision"
        raise ApprovalNotFoundError(msg)  # pragma: no cover - a recorded decision is held

    def resume(
        self, *, run_id: str, on_state_change: StateHook | None = None
    ) -> GenerateResult:
        """Continue a run once all its calls are decided (here, or in the inbox), or after
        `on_state_change` stopped it."""
        return cast(GenerateResult, self._resumed(
            run_id, continue_command,
            lambda run, build: self._advance(run, build, on_state_change).result()))

    def _resume_ready(self, run_id: str, thread_id: str, *, leased_by: str | None = None,
                      known: tuple[str, str | None] | None = None) -> GenerateResult | None:
        """`resume` for a worker, which claimed the run (and its thread, from the ledger)
        from the ready queue, and maybe the thread's lease with it (`leased_by`, which then
        releases it): the gates apply what the ledger holds (a call still undecided pauses
        the run again; the next decision queues it anew). None: the thread went on in a later
        run, which rests on calls nobody decided (nothing of this run is left to resume); a
        later run with something to go on with is continued, and its result returned.
        `known`: the run and its later run as the claim read them (`ReadyRun.later_run`)."""
        try:
            return cast(GenerateResult, self._resumed(  # (under the lease the claim took)
                run_id, _apply, lambda run, build: self._advance(
                    run, build, thread_id=thread_id, leased_by=leased_by).result(), known))
        except RunSupersededError:
            return None  # (a queue row left from before the thread went on: nothing to do)

    async def aresume(
        self, *, run_id: str, on_state_change: StateHook | None = None
    ) -> GenerateResult:
        """Async twin of `resume`."""
        for _ in range(3):
            try:
                return await self._aadvance(run_id, self._current(continue_command),
                                            on_state_change).result()
            except _LaterRun as later:  # (`_resumed`, awaited)
                run_id = later.run_id
        return await self._aadvance(run_id, continue_command, on_state_change).result()

    # ------------------------------------------------------------------ reading state

    def pending_approvals(self, *, run_id: str) -> list[PendingApproval]:
        """Every approval and suspension the run waits on, decided-but-not-applied included."""
        config = self._config(self._thread_of(run_id), run_id)
        return self._pending(self.graph.get_state(config), run_id)

    async def apending_approvals(self, *, run_id: str) -> list[PendingApproval]:
        """Async twin of `pending_approvals`."""
        return await asyncio.to_thread(self.pending_approvals, run_id=run_id)

    def _pending(self, snapshot: StateSnapshot, run_id: str | None = None
                 ) -> list[PendingApproval]:
        """What the thread waits on; with `run_id`, on behalf of that run only."""
        ledger = self._storage.ledger
        everything = waiting(snapshot, ledger, self.name)
        thread_id = thread_id_of(snapshot.config)
        current = run_id is None or is_current(snapshot, ledger, thread_id=thread_id,
                                               agent=self.name, run_id=run_id)
        if everything or not current:  # (what a stopped turn's plan lists is the current run's)
            mine = everything if current else of_run(everything, str(run_id), current=False)
            return [w.pending() for w in mine]  # (none: what waits belongs to a later run)
        return pending_of(snapshot, stopped=True, ledger=ledger, thread_id=thread_id,
                          agent=self.name)

    def snapshot(self, *, run_id: str) -> dict[str, Any]:
        """The run's state as JSON-serialisable data (messages, pending approvals, status).
        The thread's state, which a later run may have taken on: then `later_run_id` names it,
        and, where nothing of this run waits in it, `status` is how the run ended, not the
        later run's pause: "superseded" for one left paused (as `resume` of it says, raising
        `RunSupersededError`)."""
        thread_id = self._thread_of(run_id)
        snap = self.graph.get_state(self._config(thread_id, run_id))
        values = snap.values or {}
        pending = self._pending(snap, run_id)
        metadata = dict(snap.metadata or {})
        later = self._storage.ledger.later_run(run_id)
        return {
            "run_id": run_id,
            "thread_id": thread_id,
            "agent": self.name,
            "status": (self._ended_as(thread_id, run_id) if later is not None and not pending
                       else finish_reason(snap, stopped=False)),
            "later_run_id": later,
            "awaiting_approval": any(p.status == "pending" for p in pending),
            "next": list(snap.next),
            "checkpoint_id": (snap.config.get("configurable") or {}).get("checkpoint_id"),
            "checkpoint_reason": metadata.get("checkpoint_reason"),
            "created_at": snap.created_at,
            "pending_approvals": [p.to_dict() for p in pending],
            "messages": messages_to_dict([masked_message(m)
                                          for m in values.get("messages") or []]),
            "options": dict(values.get("options") or {}),
        }

    def _ended_as(self, thread_id: str, run_id: str) -> str:
        """How a run its thread went on from ended: its last checkpoint's finish ("stop", say,
        for a run that answered: helper-118), or "superseded" for one left paused (or whose
        checkpoints do not say)."""
        for last in self._storage.checkpointer.list(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
                filter={RUN_METADATA_KEY: run_id}, limit=1):
            ended = finish_reason(self.graph.get_state(last.config), stopped=False)
            return "superseded" if ended in ("suspended", "checkpoint") else ended
        return "superseded"

    async def asnapshot(self, *, run_id: str) -> dict[str, Any]:
        """Async twin of `snapshot`."""
        return await asyncio.to_thread(self.snapshot, run_id=run_id)

    def review(self, result_or_run_id: GenerateResult | str, *, decided_by: str) -> Any:
        """Review cards with Approve / Edit / Decline (and a suspension's resume form) for a
        notebook (ipywidgets, `pip install 'graphkit-hitl[notebook]'`). A click decides through
        this agent's API as `decided_by`; the continued run shows below the cards."""
        from graphkit._notebook import review

        return review(self, result_or_run_id, decided_by=decided_by)

    def draw(self) -> Any:
        """The graph, subagents expanded: an SVG drawn offline (what a notebook shows, with or
        without a kernel or network), and its Mermaid text (`str(agent.draw())`)."""
        from graphkit._notebook import draw

        return draw(self)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={[t.name for t in self.tools]})"


def _with_options(payload: Any, options: Mapping[str, Any] | None) -> Any:
    """A resume of a run its graph has not taken the options of yet (a new message started
    it, then its stream was left or its process died: `Ledger.take_message`): the options go
    in with the resume, as the message's own would have."""
    if options is None or not isinstance(payload, Command) or payload.resume is None:
        return payload
    return Command(resume=payload.resume, update={"options": options})


def _flag(value: object, name: str, *, optional: bool = True) -> None:
    """Refuse a yes/no a caller gave as anything but a bool (or None, where it may be left
    out): `approved="false"` (a form's or a JSON field's text) approved the call, being
    truthy, and `auto_resume_suspended_tools="no"` turned auto-resume on."""
    if not (isinstance(value, bool) or (optional and value is None)):
        allowed = "True, False or None" if optional else "True or False"
        msg = f"{name} must be {allowed}, got {value!r}"
        raise GraphkitError(msg)


def _approval(args: Mapping[str, Any] | None) -> Choice:
    if args is None:
        return Choice(type="approve")
    # Anything but a mapping is refused (and audited) by the one decision path.
    return Choice(type="edit", args=dict(args) if isinstance(args, Mapping) else args)


def _claim(choice: Choice, *, tool_call_id: str | None = None, approval_id: str | None = None,
           decided_by: str | None, comment: str | None, args_digest: str | None = None,
           remember: Remember = "once", method: str | None = None) -> Claim:
    """The decision a method takes; `method` names it in the warning a dropped stream gives."""

    def claim(snapshot: Paused, req: Request) -> object:
        return decide(snapshot, req, choice, tool_call_id=tool_call_id, approval_id=approval_id,
                      decided_by=decided_by, comment=comment, args_digest=args_digest,
                      remember=remember)

    claim.method = method  # type: ignore[attr-defined]
    return claim


class _LaterRun(Exception):
    """The run a resume named was left behind by a later run, which goes on instead."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


def _at_rest(state: StateSnapshot) -> bool:
    """Whether the thread's run stopped where only a human moves it on: ended, or each of its
    next tasks waiting on an interrupt (not one caught mid-step)."""
    return all(task.interrupts for task in state.tasks)


def _apply(snapshot: Paused, req: Request) -> Any:
    """The resume that lets each waiting gate apply what the ledger holds."""
    return apply_command(snapshot) or left_waiting(snapshot, req)
