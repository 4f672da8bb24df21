"""`Agent`: builds the graph, starts runs, and turns human decisions into graph resumes.

The agent decides nothing itself: the `approval_gate` node does. Every public method here
finds the run, checks the request against the paused state (raising a typed error that
changes nothing), and hands LangGraph a `Command(resume=...)` addressed to one interrupt.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, convert_to_messages, messages_to_dict
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from graphkit.approvals import _validate_resume, validate_args
from graphkit.errors import (
    SNAPSHOT_NOT_FOUND,
    AmbiguousApprovalError,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApprovalsPendingError,
    ApproverNotAllowedError,
    GraphkitError,
    SnapshotNotFoundError,
)
from graphkit.events import pending_from_interrupts
from graphkit.graph import build_graph
from graphkit.runs import AgentStream, AsyncAgentStream, Invocation, StateHook, pending_of
from graphkit.state import DEFAULT_MAX_STEPS, RunOptions
from graphkit.storage import open_storage
from graphkit.tools import create_tool
from graphkit.types import ApprovalRecord, Decision, GateResume, GenerateResult, PendingApproval

__all__ = ["Agent"]

Approvers = Callable[[str | None, PendingApproval], bool]
RUNS_NAMESPACE = ("graphkit", "runs")
RUN_METADATA_KEY = "graphkit_run_id"
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
    return list(convert_to_messages(items))


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
    return result


def _resolved_message(record: ApprovalRecord) -> str:
    why = f" ({record['comment']})" if record.get("comment") else ""
    return (
        f"approval {record['id']!r} for tool call {record['tool_call_id']!r} "
        f"({record['tool_name']}) was already {record['status']} by "
        f"{record['decided_by'] or 'nobody in particular'}{why}; a decision is final"
    )


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
    ) -> None:
        self.name = name
        self.description = description
        self.instructions = instructions
        self.model = _model(model)
        self.tools = _tools(tools)
        self.agents = dict(agents or {})
        self.require_tool_approval = require_tool_approval
        self.auto_resume_suspended_tools = auto_resume_suspended_tools
        self.approvers = approvers
        self._storage = open_storage(checkpointer)
        self.builder = build_graph(
            name=name, model=self.model, tools=self.tools, instructions=instructions,
            subagents={key: (sub.subgraph(), sub.description) for key, sub in self.agents.items()},
        )
        self.graph: CompiledStateGraph[Any, Any, Any, Any] = self.builder.compile(
            checkpointer=self._storage.checkpointer, store=self._storage.store, name=name
        )

    def subgraph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """This agent's graph for use inside a supervisor: it checkpoints in the supervisor's
        storage, under the supervisor's thread."""
        return self.builder.compile(name=self.name)

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

    def _remember(self, run_id: str, thread_id: str) -> None:
        self._storage.store.put(RUNS_NAMESPACE, run_id, self._run_entry(thread_id))

    async def _aremember(self, run_id: str, thread_id: str) -> None:
        await self._storage.store.aput(RUNS_NAMESPACE, run_id, self._run_entry(thread_id))

    def _run_entry(self, thread_id: str) -> dict[str, Any]:
        return {"thread_id": thread_id, "agent": self.name,
                "created_at": datetime.now(UTC).isoformat()}

    def _not_found(self, run_id: str) -> SnapshotNotFoundError:
        return SnapshotNotFoundError(
            SNAPSHOT_NOT_FOUND.format(run_id=run_id, storage=self._storage.description)
        )

    def _thread_of(self, run_id: str) -> str:
        item = self._storage.store.get(RUNS_NAMESPACE, run_id)
        if item is not None:
            return str(item.value["thread_id"])
        # A checkpointer passed as an instance may come without our store: ask its metadata.
        for found in self._storage.checkpointer.list(
            None, filter={RUN_METADATA_KEY: run_id}, limit=1
        ):
            return str(found.config["configurable"]["thread_id"])
        raise self._not_found(run_id)

    async def _athread_of(self, run_id: str) -> str:
        item = await self._storage.store.aget(RUNS_NAMESPACE, run_id)
        if item is not None:
            return str(item.value["thread_id"])
        async for found in self._storage.checkpointer.alist(
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
        if max_steps < 1:
            msg = f"max_steps must be at least 1, got {max_steps}"
            raise ValueError(msg)
        return RunOptions(
            run_id=run_id,
            require_tool_approval=self.require_tool_approval
            if require_tool_approval is None else require_tool_approval,
            auto_resume_suspended_tools=self.auto_resume_suspended_tools
            if auto_resume_suspended_tools is None else auto_resume_suspended_tools,
            max_steps=max_steps,
        )

    # ------------------------------------------------------------------ locating approvals

    def _find_tool(self, agent_path: Sequence[str], tool_name: str) -> BaseTool | None:
        agent: Agent = self
        for key in list(agent_path)[1:]:
            nxt = next((a for k, a in agent.agents.items() if a.name == key or k == key), None)
            if nxt is None:
                return None
            agent = nxt
        return next((t for t in agent.tools if t.name == tool_name), None)

    def _select(
        self,
        snapshot: StateSnapshot,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        approval_id: str | None = None,
        kind: Literal["approval", "suspension"] | None = None,
    ) -> tuple[str, ApprovalRecord]:
        """The interrupt and record a decision is for; raises when it cannot be told."""
        found = pending_from_interrupts(snapshot.interrupts)
        if tool_call_id is not None or approval_id is not None:
            for interrupt_id, record in found:
                if (tool_call_id is not None and record["tool_call_id"] == tool_call_id) or (
                    approval_id is not None and record["id"] == approval_id
                ):
                    if record["status"] != "pending":
                        raise ApprovalAlreadyResolvedError(_resolved_message(record))
                    return interrupt_id, record
            self._raise_decided(snapshot, tool_call_id, approval_id)
            given = (f"tool_call_id {tool_call_id!r}" if tool_call_id is not None
                     else f"id {approval_id!r}")
            pending_ids = [r["tool_call_id"] for _, r in found if r["status"] == "pending"]
            raise ApprovalNotFoundError(
                f"no pending approval with {given} in run {run_id!r}; "
                f"pending tool_call_ids: {pending_ids}"
            )
        candidates = [
            (i, r) for i, r in found
            if r["status"] == "pending" and (kind is None or r["kind"] == kind)
        ]
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            what = f"{kind}s" if kind else "approvals or suspensions"
            raise ApprovalNotFoundError(f"run {run_id!r} has no pending {what}")
        ids = [r["tool_call_id"] for _, r in candidates]
        raise AmbiguousApprovalError(
            f"run {run_id!r} has {len(ids)} pending tool calls; pass tool_call_id, one of {ids}",
            pending_ids=ids,
        )

    @staticmethod
    def _raise_decided(
        snapshot: StateSnapshot, tool_call_id: str | None, approval_id: str | None
    ) -> None:
        plan = snapshot.values.get("turn") or {}
        for call in plan.get("calls") or []:
            record = call.get("approval")
            if record is None or record["status"] == "pending":
                continue
            if record["tool_call_id"] == tool_call_id or record["id"] == approval_id:
                raise ApprovalAlreadyResolvedError(_resolved_message(record))

    def _check_approver(self, decided_by: str | None, record: ApprovalRecord) -> None:
        if self.approvers is None:
            return
        pending = PendingApproval.from_record(record)
        try:
            allowed = bool(self.approvers(decided_by, pending))
        except Exception as exc:  # a policy that cannot decide has not allowed anything
            msg = f"approvers policy raised for {decided_by!r} on {record['id']!r}: {exc!r}"
            raise ApproverNotAllowedError(msg) from exc
        if not allowed:
            msg = (
                f"{decided_by!r} may not decide approval {record['id']!r} "
                f"({record['tool_name']} in {'/'.join(record['agent_path'])})"
            )
            raise ApproverNotAllowedError(msg)

    def _decision(
        self,
        snapshot: StateSnapshot,
        *,
        run_id: str,
        tool_call_id: str | None,
        approval_id: str | None = None,
        approve: bool,
        decided_by: str | None,
        comment: str | None,
        args: Mapping[str, Any] | None,
        record_only: bool = False,
    ) -> tuple[Command[Any], ApprovalRecord]:
        interrupt_id, record = self._select(
            snapshot, run_id=run_id, tool_call_id=tool_call_id, approval_id=approval_id,
            kind="approval" if approve else None,
        )
        self._check_approver(decided_by, record)
        decision = Decision(
            tool_call_id=record["tool_call_id"], decided_by=decided_by, comment=comment
        )
        if record["kind"] == "suspension" and approve:
            raise GraphkitError(
                f"tool call {record['tool_call_id']!r} is suspended waiting for input; "
                "resume it with resume_stream/resume_generate"
            )
        if approve:
            decision["type"] = "approve"
            if args is not None:
                tool = self._find_tool(record["agent_path"], record["tool_name"])
                if tool is not None:
                    validate_args(tool, args)
                decision["type"] = "edit"
                decision["args"] = dict(args)
        else:
            decision["type"] = "reject"
        value = GateResume(decisions=[decision], record_only=record_only)
        return Command(resume={interrupt_id: value}), record

    def _resume_data(
        self, snapshot: StateSnapshot, *, run_id: str, tool_call_id: str | None, data: Any
    ) -> Command[Any]:
        interrupt_id, record = self._select(
            snapshot, run_id=run_id, tool_call_id=tool_call_id, kind="suspension"
        )
        if record["kind"] != "suspension":
            raise GraphkitError(
                f"tool call {record['tool_call_id']!r} waits for an approval, not resume data; "
                "use approve_tool_call or decline_tool_call"
            )
        tool = self._find_tool(record["agent_path"], record["tool_name"])
        checked = _validate_resume(tool, data)
        decision = Decision(type="resume", tool_call_id=record["tool_call_id"], data=checked)
        return Command(resume={interrupt_id: GateResume(decisions=[decision])})

    def _continue(self, snapshot: StateSnapshot, run_id: str) -> Any:
        found = pending_from_interrupts(snapshot.interrupts)
        undecided = [r["tool_call_id"] for _, r in found if r["status"] == "pending"]
        if undecided:
            msg = (
                f"run {run_id!r} still has undecided tool calls {undecided}; decide them "
                "(resolve_tool_approval / approve_tool_call / resume_stream) before resume()"
            )
            raise ApprovalsPendingError(msg)
        if found:
            resume = {i: GateResume(decisions=[]) for i in dict(found)}
            return Command(resume=resume)
        return None  # continue a run stopped by on_state_change (or a finished one: no-op)

    def _start(
        self,
        snapshot: StateSnapshot,
        messages: list[BaseMessage],
        options: RunOptions,
    ) -> Any:
        found = pending_from_interrupts(snapshot.interrupts)
        if found and messages:
            # A new message while calls wait: decline them as superseded (or, with auto-resume,
            # read suspended tools' resume data from it) and go on with it. A message never
            # approves anything, whatever it says.
            said = messages_to_dict(messages)
            auto = bool(options.get("auto_resume_suspended_tools"))
            resume: dict[str, GateResume] = {}
            nested = False
            for interrupt_id, record in found:
                # The message is for this agent: a subagent that waits only reads it (to
                # auto-resume a suspension) or learns that its calls were superseded.
                inner = len(record["agent_path"]) > 1
                nested = nested or inner
                resume[interrupt_id] = GateResume(supersede=said, auto_resume=auto,
                                                  queue=not inner)
            plan = snapshot.values.get("turn")
            if nested and plan:
                queued = [*(plan.get("queued") or []), *said]
                return Command(resume=resume, update={"turn": {**plan, "queued": queued}})
            return Command(resume=resume)
        if not messages:
            return None
        return {"messages": messages, "options": options}

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
        thread_id = thread_id or str(uuid.uuid4())
        run_id = str(uuid.uuid4())
        options = self._options(run_id, require_tool_approval, auto_resume_suspended_tools,
                                max_steps)
        config = self._config(thread_id, run_id, checkpoint_reason)
        payload = self._start(self.graph.get_state(config), _messages(message), options)
        self._remember(run_id, thread_id)
        return AgentStream(self.graph, Invocation(payload, config, run_id, thread_id,
                                                  on_state_change))

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
        thread_id = thread_id or str(uuid.uuid4())
        run_id = str(uuid.uuid4())
        options = self._options(run_id, require_tool_approval, auto_resume_suspended_tools,
                                max_steps)
        config = self._config(thread_id, run_id, checkpoint_reason)
        messages = _messages(message)

        async def prepare() -> Invocation:
            payload = self._start(await self.graph.aget_state(config), messages, options)
            await self._aremember(run_id, thread_id)
            return Invocation(payload, config, run_id, thread_id, on_state_change)

        return AsyncAgentStream(self.graph, prepare, run_id, thread_id)

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

    # ------------------------------------------------------------------ deciding

    def _sync_stream(
        self, run_id: str, build: Callable[[StateSnapshot], Any],
        on_state_change: StateHook | None = None,
    ) -> AgentStream:
        thread_id = self._thread_of(run_id)
        config = self._config(thread_id, run_id)
        payload = build(self.graph.get_state(config))
        return AgentStream(self.graph, Invocation(payload, config, run_id, thread_id,
                                                  on_state_change))

    def _async_stream(
        self, run_id: str, build: Callable[[StateSnapshot], Any],
        on_state_change: StateHook | None = None,
    ) -> AsyncAgentStream:
        async def prepare() -> Invocation:
            thread_id = await self._athread_of(run_id)
            config = self._config(thread_id, run_id)
            payload = build(await self.graph.aget_state(config))
            return Invocation(payload, config, run_id, thread_id, on_state_change)

        return AsyncAgentStream(self.graph, prepare, run_id, "")

    def approve_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> AgentStream:
        """Approve a paused call (with edited `args` if given) and stream the continued run.

        `tool_call_id` may be left out only when exactly one approval is pending.
        """
        return self._sync_stream(run_id, lambda snap: self._decision(
            snap, run_id=run_id, tool_call_id=tool_call_id, approve=True,
            decided_by=decided_by, comment=comment, args=args)[0])

    def decline_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
    ) -> AgentStream:
        """Decline a paused call: it never runs; the model is told, and the run goes on."""
        return self._sync_stream(run_id, lambda snap: self._decision(
            snap, run_id=run_id, tool_call_id=tool_call_id, approve=False,
            decided_by=decided_by, comment=comment, args=None)[0])

    def approve_tool_call_generate(self, **kwargs: Any) -> GenerateResult:
        """`approve_tool_call`, run to the end (or the next pause)."""
        return self.approve_tool_call(**kwargs).result()

    def decline_tool_call_generate(self, **kwargs: Any) -> GenerateResult:
        """`decline_tool_call`, run to the end (or the next pause)."""
        return self.decline_tool_call(**kwargs).result()

    def aapprove_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> AsyncAgentStream:
        """Async twin of `approve_tool_call`."""
        return self._async_stream(run_id, lambda snap: self._decision(
            snap, run_id=run_id, tool_call_id=tool_call_id, approve=True,
            decided_by=decided_by, comment=comment, args=args)[0])

    def adecline_tool_call(
        self,
        *,
        run_id: str,
        tool_call_id: str | None = None,
        decided_by: str | None = None,
        comment: str | None = None,
    ) -> AsyncAgentStream:
        """Async twin of `decline_tool_call`."""
        return self._async_stream(run_id, lambda snap: self._decision(
            snap, run_id=run_id, tool_call_id=tool_call_id, approve=False,
            decided_by=decided_by, comment=comment, args=None)[0])

    async def aapprove_tool_call_generate(self, **kwargs: Any) -> GenerateResult:
        return await self.aapprove_tool_call(**kwargs).result()

    async def adecline_tool_call_generate(self, **kwargs: Any) -> GenerateResult:
        return await self.adecline_tool_call(**kwargs).result()

    def resume_stream(
        self, resume_data: Any, *, run_id: str, tool_call_id: str | None = None
    ) -> AgentStream:
        """Resume a suspended tool with `resume_data` (validated by its `resume_schema`)."""
        return self._sync_stream(run_id, lambda snap: self._resume_data(
            snap, run_id=run_id, tool_call_id=tool_call_id, data=resume_data))

    def resume_generate(
        self, resume_data: Any, *, run_id: str, tool_call_id: str | None = None
    ) -> GenerateResult:
        return self.resume_stream(resume_data, run_id=run_id, tool_call_id=tool_call_id).result()

    def aresume_stream(
        self, resume_data: Any, *, run_id: str, tool_call_id: str | None = None
    ) -> AsyncAgentStream:
        return self._async_stream(run_id, lambda snap: self._resume_data(
            snap, run_id=run_id, tool_call_id=tool_call_id, data=resume_data))

    async def aresume_generate(
        self, resume_data: Any, *, run_id: str, tool_call_id: str | None = None
    ) -> GenerateResult:
        return await self.aresume_stream(
            resume_data, run_id=run_id, tool_call_id=tool_call_id).result()

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
        recorded: list[ApprovalRecord] = []

        def build(snap: StateSnapshot) -> Any:
            command, record = self._decision(
                snap, run_id=run_id, tool_call_id=None, approval_id=id, approve=approved,
                decided_by=decided_by, comment=comment, args=approved_args, record_only=True)
            recorded.append(record)
            return command

        self._sync_stream(run_id, build).result()
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
        def build(snap: StateSnapshot) -> Any:
            return self._decision(
                snap, run_id=run_id, tool_call_id=None, approval_id=id, approve=approved,
                decided_by=decided_by, comment=comment, args=approved_args,
                record_only=True)[0]

        await self._async_stream(run_id, build).result()
        return self._recorded(await self.apending_approvals(run_id=run_id), id)

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
        """Continue a run once all its approvals are decided, or after `on_state_change` stopped it.
        """
        return self._sync_stream(
            run_id, lambda snap: self._continue(snap, run_id), on_state_change).result()

    async def aresume(
        self, *, run_id: str, on_state_change: StateHook | None = None
    ) -> GenerateResult:
        return await self._async_stream(
            run_id, lambda snap: self._continue(snap, run_id), on_state_change).result()

    # ------------------------------------------------------------------ reading state

    def pending_approvals(self, *, run_id: str) -> list[PendingApproval]:
        """Every approval and suspension the run waits on (decided-but-held ones included)."""
        config = self._config(self._thread_of(run_id), run_id)
        return pending_of(self.graph.get_state(config), stopped=True)

    async def apending_approvals(self, *, run_id: str) -> list[PendingApproval]:
        config = self._config(await self._athread_of(run_id), run_id)
        return pending_of(await self.graph.aget_state(config), stopped=True)

    def snapshot(self, *, run_id: str) -> dict[str, Any]:
        """The run's state as JSON-serialisable data (messages, pending approvals, status)."""
        thread_id = self._thread_of(run_id)
        return self._snapshot_dict(
            self.graph.get_state(self._config(thread_id, run_id)), run_id, thread_id)

    async def asnapshot(self, *, run_id: str) -> dict[str, Any]:
        thread_id = await self._athread_of(run_id)
        return self._snapshot_dict(
            await self.graph.aget_state(self._config(thread_id, run_id)), run_id, thread_id)

    def _snapshot_dict(self, snap: StateSnapshot, run_id: str, thread_id: str) -> dict[str, Any]:
        from graphkit.events import finish_reason

        values = snap.values or {}
        pending = pending_of(snap, stopped=True)
        metadata = dict(snap.metadata or {})
        return {
            "run_id": run_id,
            "thread_id": thread_id,
            "agent": self.name,
            "status": finish_reason(snap, stopped=False),
            "awaiting_approval": any(p.status == "pending" for p in pending),
            "next": list(snap.next),
            "checkpoint_id": (snap.config.get("configurable") or {}).get("checkpoint_id"),
            "checkpoint_reason": metadata.get("checkpoint_reason"),
            "created_at": snap.created_at,
            "pending_approvals": [p.to_dict() for p in pending],
            "messages": messages_to_dict(list(values.get("messages") or [])),
            "options": dict(values.get("options") or {}),
        }

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, tools={[t.name for t in self.tools]})"


AsyncBuild = Callable[[StateSnapshot], Awaitable[Any]]
