"""Tools that can ask for approval before they run, or suspend themselves while running.

`create_tool` wraps a function into a LangChain `StructuredTool` subclass carrying graphkit's
approval settings. The agent's approval gate reads them once per tool call; the tool itself
never decides whether it may run.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import re
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Literal, get_type_hints, overload

from langchain_core.callbacks import (
    AsyncCallbackManagerForToolRun,
    CallbackManagerForToolRun,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, create_schema_from_function
from langchain_core.tools.base import _get_runnable_config_param
from langchain_core.utils._signature import _signature_parameters
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel, ValidationError

from graphkit._fields import names_of
from graphkit._limits import check_value, storable
from graphkit._settings import checked_ttl
from graphkit.errors import SuspendPayloadError

HumanDecision = Literal["approve", "edit", "reject", "respond"]
"""A reviewer's decision on an approval, in LangChain's words."""
HUMAN_DECISIONS: tuple[HumanDecision, ...] = ("approve", "edit", "reject", "respond")
DEFAULT_DECISIONS: tuple[HumanDecision, ...] = ("approve", "edit", "reject")

__all__ = [
    "DelegationTool",
    "GraphkitTool",
    "ToolContext",
    "ToolSuspended",
    "create_tool",
    "render_prompt",
]

Predicate = Callable[[dict[str, Any]], bool]
PromptFn = Callable[[dict[str, Any]], str]

CONTEXT_KEY = "graphkit_tool_context"
"""Key of `config["configurable"]` under which the tools node hands a tool its context."""
STARTED_KEY = "graphkit_tool_started"
"""Where the tools node hands a tool an event to set as its body starts: a run cancelled
before that gives the call's claim back (it may run again), not "interrupted while it ran"."""

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)\s*\}\}")
_MISSING = object()


class ToolSuspended(GraphBubbleUp):
    """Raised by `ToolContext.suspend` to stop the tool; the tools node turns it into a pause.

    A control-flow signal like LangGraph's `GraphInterrupt`, not an error: do not catch it.
    """

    def __init__(self, payload: dict[str, Any], *, once: dict[str, Any]) -> None:
        super().__init__(payload)
        self.payload = payload
        self.once = once


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class ToolContext:
    """What a running tool may know about its call, and how it asks for more input.

    Declare a parameter annotated `ToolContext` to receive it; the model never sees it.
    Code before `suspend()` runs again when the tool resumes: the tool starts over from its
    first line with `resume_data` set. Use `once(key, fn)` (`await aonce(key, fn)` in an async
    tool) for side effects that must not repeat.
    """

    def __init__(
        self,
        *,
        tool_call_id: str | None = None,
        thread_id: str | None = None,
        agent_path: list[str] | None = None,
        resume_values: list[Any] | None = None,
        once_results: dict[str, Any] | None = None,
        suspend_schema: type[BaseModel] | None = None,
        resume_schema: type[BaseModel] | None = None,
        keep_once: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self.tool_call_id = tool_call_id
        """The id of the tool call being executed, as the model gave it (a model may give
        the same id to calls of later turns)."""
        self.idempotency_key = idempotency_key or tool_call_id
        """A key for this one call, the same across its retries and processes and never
        another call's (graphkit's own record of the call): the key to give a system the tool
        changes, so that a repeated attempt is ignored. `tool_call_id` is the model's, which a
        model may reuse: keyed by it, a second approved payment was dropped as a repeat of
        the first (helper-121)."""
        self.thread_id = thread_id
        """The conversation thread the call belongs to."""
        self.agent_path = list(agent_path or [])
        """Agent names from the outermost supervisor to the agent running this tool."""
        self._suspend_schema = suspend_schema
        self._resume_schema = resume_schema
        self._resume_values = [self._coerce_resume(v) for v in (resume_values or [])]
        self._suspends = 0
        self._once = dict(once_results or {})
        self._keep_once = keep_once
        self._keeping = threading.Lock()
        self._sync_running: dict[str, threading.RLock] = {}
        self._arunning: dict[str, asyncio.Lock] = {}

    @property
    def resume_data(self) -> Any:
        """The latest resume data (a `resume_schema` instance when the tool has one), or None."""
        return self._resume_values[-1] if self._resume_values else None

    def suspend(self, payload: Mapping[str, Any] | BaseModel | None = None) -> Any:
        """Pause the run to ask for input described by `payload`.

        On a resumed execution the n-th `suspend` call returns the n-th resume value instead of
        pausing, so `data = ctx.suspend({...})` reads naturally; a later call pauses again.
        """
        body = self._validate_payload(payload)
        index = self._suspends
        self._suspends += 1
        if index < len(self._resume_values):
            return self._resume_values[index]
        raise ToolSuspended(body, once=dict(self._once))

    def once(self, key: str, fn: Callable[[], Any]) -> Any:
        """Run `fn` at most once per tool call, even when the tool re-runs after a suspension.

        The result is kept in the ledger beside the call's execution claim (where no client can
        wipe it) as soon as `fn` returns, as LangGraph keeps a state value (a tuple comes back
        a list, as from a checkpoint), and every run, the first included, gets it as kept.
        """
        if key not in self._once:
            if self._keep_once is not None and _on_event_loop():
                msg = (f"ctx.once({key!r}, ...) in an async tool: keeping its result is a "
                       "database write, which must not block the event loop; use "
                       f"`await ctx.aonce({key!r}, fn)`")
                raise RuntimeError(msg)  # before fn: no side effect left unrecorded
            with self._running(key):  # (two threads of the tool with one key: fn runs once)
                if key not in self._once:
                    self._once[key] = fn()
                    self._keep()
        return self._once[key]

    async def aonce(self, key: str, fn: Callable[[], Any]) -> Any:
        """`once` for an async tool: `fn` may be sync or async; its result is kept in the
        ledger (from a worker thread) before this returns."""
        if key not in self._once:
            async with self._arunning.setdefault(key, asyncio.Lock()):  # (gathered: once)
                if key not in self._once:
                    value = fn()
                    if inspect.isawaitable(value):
                        value = await value
                    self._once[key] = value
                    if self._keep_once is not None:
                        await asyncio.to_thread(self._keep)
        return self._once[key]

    def _running(self, key: str) -> threading.RLock:
        """The lock of one key's `fn`: two callers with one key at once (helper-60 ran it
        four times from four threads of one tool) wait for the first one's result. (One
        `setdefault`: atomic, so two threads never make a lock each.)"""
        return self._sync_running.setdefault(key, threading.RLock())

    def _keep(self) -> None:
        """Keep every result so far, one save at a time, each holding every result set before
        it: the last to commit holds them all. (Two `aonce` of one tool at once each saved
        its own snapshot, the older could commit last, and a side effect ran again on
        resume; helper-58.) The results read as kept from then on."""
        if self._keep_once is None:
            return
        with self._keeping:
            kept = self._keep_once(dict(self._once))
        self._once.update(kept)

    def _validate_payload(self, payload: Mapping[str, Any] | BaseModel | None) -> dict[str, Any]:
        if isinstance(payload, BaseModel):
            payload = payload.model_dump(mode="json")
        raw = dict(payload or {})
        if self._suspend_schema is not None:
            try:
                raw = self._suspend_schema.model_validate(raw).model_dump(mode="json")
            except ValidationError as exc:
                msg = (
                    f"suspend payload {raw!r} does not match suspend_schema "
                    f"{self._suspend_schema.__name__}: {exc.errors(include_url=False)}"
                )
                raise SuspendPayloadError(msg) from exc
        # what a checkpoint cannot hold (an integer beyond 64 bits) fails here, in the tool
        check_value(raw, what="suspend payload", error=SuspendPayloadError)
        storable(raw, "suspend payload", SuspendPayloadError)
        return raw

    def _coerce_resume(self, value: Any) -> Any:
        if self._resume_schema is None or isinstance(value, self._resume_schema):
            return value
        return self._resume_schema.model_validate(value)


class GraphkitTool(StructuredTool):
    """A `StructuredTool` with approval and suspension settings, made by `create_tool`."""

    needs_approval: bool | Predicate = False
    """True, False, or a predicate over the parsed arguments, called once per tool call."""
    approval_prompt: str | PromptFn | None = None
    """A `{{arg}}` template or a function of the arguments, shown to the reviewer."""
    approval_defaults: dict[str, Any] | None = None
    """Copied into the pending approval's `metadata["defaults"]`."""
    suspend_schema: type[BaseModel] | None = None
    resume_schema: type[BaseModel] | None = None
    context_param: str | None = None
    """The function parameter that receives the `ToolContext`, if any."""
    approval_ttl: timedelta | None = None
    """An approval of this tool undecided for this long is declined as expired."""
    allowed_decisions: tuple[HumanDecision, ...] | None = None
    """The decision types a reviewer may take on this tool's approvals (None: the agent's
    default, else approve, edit and reject)."""

    def _with_context(self, config: RunnableConfig, kwargs: dict[str, Any]) -> None:
        if self.context_param is None:
            return
        ctx = (config.get("configurable") or {}).get(CONTEXT_KEY)
        if not isinstance(ctx, ToolContext):
            ctx = ToolContext(suspend_schema=self.suspend_schema, resume_schema=self.resume_schema)
        kwargs[self.context_param] = ctx

    def _run(
        self,
        *args: Any,
        config: RunnableConfig,
        run_manager: CallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> Any:
        self._with_context(config, kwargs)
        if self.func is None and self.coroutine is not None:
            # An async-only tool called from a sync run: give it a loop of its own.
            _inject(self.coroutine, kwargs, config, run_manager)
            return _run_to_end(_call_async(self.coroutine, *args, **kwargs))
        if self.func is None:
            return super()._run(*args, config=config, run_manager=run_manager, **kwargs)
        _inject(self.func, kwargs, config, run_manager)
        return self.func(*args, **kwargs)

    async def _arun(
        self,
        *args: Any,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> Any:
        self._with_context(config, kwargs)
        started = (config.get("configurable") or {}).get(STARTED_KEY)
        if self.coroutine is None:
            if isinstance(started, threading.Event):
                started.set()
            return await super()._arun(*args, config=config, run_manager=run_manager, **kwargs)
        _inject(self.coroutine, kwargs, config, run_manager)
        if isinstance(started, threading.Event):
            started.set()  # no await from here to the body's first line
        return await self.coroutine(*args, **kwargs)


@functools.lru_cache(maxsize=1024)
def _injected(fn: Callable[..., Any]) -> tuple[bool, str | None]:
    """Whether `fn` takes `callbacks`, and its `RunnableConfig` parameter: what
    `StructuredTool` works out from the signature on every call, here once per function."""
    return bool(_signature_parameters(fn).get("callbacks")), _get_runnable_config_param(fn)


def _inject(fn: Callable[..., Any], kwargs: dict[str, Any], config: RunnableConfig,
            run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun | None,
            ) -> None:
    callbacks, config_param = _injected(fn)
    if run_manager is not None and callbacks:
        kwargs["callbacks"] = run_manager.get_child()
    if config_param:
        kwargs[config_param] = config


# LangChain reads `_run`'s type hints on every call to find its config parameter; as strings
# (this module's `from __future__ import annotations`) they would be compiled every time.
for _method in (GraphkitTool._run, GraphkitTool._arun):
    _method.__annotations__ = get_type_hints(_method)


async def _call_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await fn(*args, **kwargs)


def _run_to_end(call: Coroutine[Any, Any, Any]) -> Any:
    """An async-only tool's call, run to its end from sync code: on a loop of its own, in a
    thread of its own (with this context) where this thread runs a loop already. A blocking
    method called from a notebook cell or from async code is there: `asyncio.run` refused
    before the tool's first line, and the approved call counted as failed (helper-57)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(call)
    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphkit-async-tool") as pool:
        return pool.submit(context.run, asyncio.run, call).result()


def _context_param(func: Callable[..., Any]) -> str | None:
    try:
        hints = get_type_hints(func)
    except (NameError, TypeError):
        hints = {}
    for name, param in inspect.signature(func).parameters.items():
        annotation = hints.get(name, param.annotation)
        if annotation is ToolContext or annotation == "ToolContext":
            return name
    return None


def _without(fn: Callable[..., Any], param: str | None) -> Callable[..., Any]:
    """`fn` as the model sees it: without the injected context parameter, whose annotation
    may not even resolve where the tool was defined (a local import under
    `from __future__ import annotations`)."""
    if param is None:
        return fn

    def shim(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover - only inspected
        return fn(*args, **kwargs)

    signature = inspect.signature(fn)
    shim.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for n, p in signature.parameters.items() if n != param])
    shim.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != param}
    shim.__name__ = fn.__name__
    shim.__qualname__ = fn.__qualname__
    shim.__doc__ = fn.__doc__
    shim.__module__ = fn.__module__
    shim.__wrapped__ = fn  # type: ignore[attr-defined]  # where names in annotations resolve
    return shim


@overload
def create_tool(
    func: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    args_schema: type[BaseModel] | None = None,
    needs_approval: bool | Predicate = False,
    approval_prompt: str | PromptFn | None = None,
    approval_defaults: Mapping[str, Any] | None = None,
    suspend_schema: type[BaseModel] | None = None,
    resume_schema: type[BaseModel] | None = None,
    approval_ttl: timedelta | None = None,
    allowed_decisions: Sequence[HumanDecision] | None = None,
) -> GraphkitTool: ...


@overload
def create_tool(
    func: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    args_schema: type[BaseModel] | None = None,
    needs_approval: bool | Predicate = False,
    approval_prompt: str | PromptFn | None = None,
    approval_defaults: Mapping[str, Any] | None = None,
    suspend_schema: type[BaseModel] | None = None,
    resume_schema: type[BaseModel] | None = None,
    approval_ttl: timedelta | None = None,
    allowed_decisions: Sequence[HumanDecision] | None = None,
) -> Callable[[Callable[..., Any]], GraphkitTool]: ...


def create_tool(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    args_schema: type[BaseModel] | None = None,
    needs_approval: bool | Predicate = False,
    approval_prompt: str | PromptFn | None = None,
    approval_defaults: Mapping[str, Any] | None = None,
    suspend_schema: type[BaseModel] | None = None,
    resume_schema: type[BaseModel] | None = None,
    approval_ttl: timedelta | None = None,
    allowed_decisions: Sequence[HumanDecision] | None = None,
) -> GraphkitTool | Callable[[Callable[..., Any]], GraphkitTool]:
    """Make a tool from a sync or async function; usable as a call or as a decorator.

    Args:
        func: The function the tool runs. Its signature gives the argument schema unless
            `args_schema` is passed; a parameter annotated `ToolContext` is injected.
        name: Tool name shown to the model; defaults to the function's name.
        description: Defaults to the function's docstring.
        args_schema: A pydantic model for the arguments, instead of inferring one.
        needs_approval: True to pause every call for a human; a predicate over the parsed
            arguments to decide per call (it raising counts as True).
        approval_prompt: The reviewer's question: a `{{arg}}` template or a function of the args.
        approval_defaults: Extra data for the review card (`metadata["defaults"]`).
        suspend_schema: Validates the payload of `ctx.suspend(...)`.
        resume_schema: Validates resume data; `ctx.resume_data` is an instance of it.
        approval_ttl: Decline an approval of this tool as expired when it waits this long.
        allowed_decisions: What a reviewer may do with this tool's approvals, as LangChain's
            `interrupt_on` has it: some of "approve", "edit", "reject", "respond" (default:
            the agent's, else approve, edit and reject). Any other decision is refused with
            `DecisionNotAllowedError` at every door.
    """
    allowed = decisions_of(allowed_decisions)

    def build(fn: Callable[..., Any]) -> GraphkitTool:
        if not callable(needs_approval) and not isinstance(needs_approval, bool):
            msg = f"needs_approval must be a bool or a callable, got {needs_approval!r}"
            raise TypeError(msg)
        tool_name = name or fn.__name__
        ctx_param = _context_param(fn)
        # what LangChain gives the function (as its `@tool` does), never the model's to write
        config_param = _get_runnable_config_param(fn)
        schema = args_schema or create_schema_from_function(
            tool_name,
            _without(fn, ctx_param),
            filter_args=["run_manager", "callbacks", *([config_param] if config_param else [])],
        )
        if isinstance(approval_prompt, str):
            _check_template(approval_prompt, schema, tool_name)
        if approval_defaults:  # shown with every approval: storable, or refused here
            check_value(dict(approval_defaults), what=f"approval_defaults of {tool_name!r}",
                        error=ValueError)
            storable(dict(approval_defaults), f"approval_defaults of {tool_name!r}", ValueError)
        is_async = inspect.iscoroutinefunction(fn)
        return GraphkitTool(
            name=tool_name,
            description=description or inspect.getdoc(fn) or f"Run {tool_name}.",
            func=None if is_async else fn,
            coroutine=fn if is_async else None,
            args_schema=schema,
            needs_approval=needs_approval,
            approval_prompt=approval_prompt,
            approval_defaults=dict(approval_defaults) if approval_defaults else None,
            suspend_schema=suspend_schema,
            resume_schema=resume_schema,
            context_param=ctx_param,
            approval_ttl=checked_ttl(approval_ttl, f"approval_ttl of tool {tool_name!r}"),
            allowed_decisions=allowed,
        )

    if func is None:
        return build
    return build(func)


def decisions_of(allowed: Sequence[str] | None) -> tuple[HumanDecision, ...] | None:
    """`allowed_decisions` as given to `create_tool` or `Agent`, checked: a non-empty set of
    LangChain's decision types, in LangChain's order."""
    if allowed is None:
        return None
    if isinstance(allowed, str) or not all(isinstance(d, str) for d in allowed):
        msg = f"allowed_decisions must be a list of decision types, got {allowed!r}"
        raise TypeError(msg)
    unknown = sorted(set(allowed) - set(HUMAN_DECISIONS))
    if unknown or not allowed:
        msg = (f"allowed_decisions must name some of {list(HUMAN_DECISIONS)}, got "
               f"{list(allowed)!r}")
        raise ValueError(msg)
    return tuple(d for d in HUMAN_DECISIONS if d in allowed)


def allowed_for(tool: BaseTool | None, default: Sequence[HumanDecision] | None = None
                ) -> tuple[HumanDecision, ...]:
    """The decisions a reviewer may take on an approval of `tool` in an agent whose default
    is `default`."""
    own = tool.allowed_decisions if isinstance(tool, GraphkitTool) else None
    return tuple(own or default or DEFAULT_DECISIONS)


def _check_template(template: str, schema: Any, tool_name: str) -> None:
    """A `{{name}}` of the prompt template must be one of the tool's arguments: a typo would
    show reviewers the placeholder instead of the value they must judge."""
    fields = getattr(schema, "model_fields", None)
    if not isinstance(fields, Mapping):
        return  # a schema given as JSON: nothing to check against
    names = {key for name, info in fields.items() for key in names_of(name, info)}
    unknown = sorted({m.group(1).split(".")[0] for m in _PLACEHOLDER.finditer(template)}
                     - names)
    if unknown:
        msg = (f"approval_prompt of tool {tool_name!r} names {unknown}, which the tool has no "
               f"argument for; its arguments are {sorted(fields)}")
        raise ValueError(msg)


def render_prompt(template: str, args: Mapping[str, Any]) -> str:
    """Fill `{{name}}` / `{{ a.b }}` placeholders from `args`.

    Placeholders only look up keys; nothing is evaluated, values are inserted once (a value that
    itself contains `{{...}}` is not expanded), and an unknown placeholder stays as written.
    """

    def replace(match: re.Match[str]) -> str:
        value: Any = args
        for key in match.group(1).split("."):
            value = value.get(key, _MISSING) if isinstance(value, Mapping) else _MISSING
            if value is _MISSING:
                return match.group(0)
        if isinstance(value, str):
            return value
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return str(value)

    return _PLACEHOLDER.sub(replace, template)


class DelegationTool(StructuredTool):
    """The tool a supervisor's model sees for a subagent. The approval gate routes its calls to
    the subagent's own node; the tool itself never decides or runs anything."""

