"""create_tool: forms, schemas, prompts, predicates, ToolContext."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from datetime import date
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import (
    BaseTool,
    InjectedToolArg,
    InjectedToolCallId,
    StructuredTool,
    tool,
)
from langgraph.prebuilt import InjectedState
from pydantic import (
    AliasChoices,
    AliasPath,
    BaseModel,
    ConfigDict,
    Field,
    SecretBytes,
    SecretStr,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.v1 import BaseModel as BaseModelV1

from graphkit import (
    Agent,
    GraphkitError,
    GraphkitTool,
    Inbox,
    InvalidApprovedArgsError,
    ToolContext,
    create_tool,
)
from graphkit.testing import ScriptedChatModel
from graphkit.tools import render_prompt
from tests.helpers import call, turn


def test_call_and_decorator_forms_sync_and_async() -> None:
    def plain(x: int) -> int:
        """Double."""
        return x * 2

    async def coro(x: int) -> int:
        """Triple."""
        return x * 3

    made = create_tool(plain, name="double")
    assert isinstance(made, BaseTool) and made.name == "double" and made.invoke({"x": 2}) == 4

    @create_tool(needs_approval=True, description="Deploy it")
    def deploy(version: str) -> str:
        return version

    assert isinstance(deploy, GraphkitTool) and deploy.needs_approval is True
    assert deploy.description == "Deploy it"
    triple = create_tool(coro)
    assert triple.invoke({"x": 2}) == 6  # an async tool still works from sync code


async def test_async_tool_runs_async() -> None:
    @create_tool
    async def triple(x: int) -> int:
        """Triple."""
        return x * 3

    assert await triple.ainvoke({"x": 3}) == 9


def test_tool_context_is_injected_and_hidden_from_the_model() -> None:
    seen: list[ToolContext] = []

    @create_tool
    def where(city: str, ctx: ToolContext) -> str:
        """Where am I."""
        seen.append(ctx)
        return f"{city} {ctx.tool_call_id} {ctx.agent_path}"

    schema = where.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    assert set(schema["properties"]) == {"city"}
    agent = Agent(name="geo", model=ScriptedChatModel([turn(call("where", {"city": "Oslo"},
                                                                 "c9")), "ok"]), tools=[where])
    result = agent.generate("go", thread_id="t-1")
    assert seen[0].tool_call_id == "c9" and seen[0].thread_id == "t-1"
    assert seen[0].agent_path == ["geo"] and seen[0].resume_data is None
    assert "Oslo c9 ['geo']" in result.messages[2].text


def test_explicit_args_schema() -> None:
    class Args(BaseModel):
        version: str
        dry_run: bool = False

    def deploy(version: str, dry_run: bool = False) -> str:
        return f"{version} {dry_run}"

    made = create_tool(deploy, args_schema=Args, description="d")
    assert made.args_schema is Args and made.invoke({"version": "1"}) == "1 False"


@pytest.mark.parametrize(
    ("template", "args", "expected"),
    [
        ("Send build {{version}} to prod?", {"version": "1.4.2"}, "Send build 1.4.2 to prod?"),
        ("{{ a.b }} and {{a.c}}", {"a": {"b": 1, "c": [1, 2]}}, "1 and [1, 2]"),
        ("keep {{missing}} and {{ a.zz }}", {"a": {}}, "keep {{missing}} and {{ a.zz }}"),
        ("no {{__class__}} {{ version.__len__ }}", {"version": "x"},
         "no {{__class__}} {{ version.__len__ }}"),
        ("once {{v}}", {"v": "{{v}} {{w}}", "w": "W"}, "once {{v}} {{w}}"),
        ("{{ 1 + 1 }} {{v|upper}}", {"v": "x"}, "{{ 1 + 1 }} {{v|upper}}"),
    ],
)
def test_prompt_templates_only_look_up_keys(template: str, args: dict[str, Any],
                                            expected: str) -> None:
    assert render_prompt(template, args) == expected


def test_a_prompt_names_what_the_tool_runs_with_for_an_argument_the_call_left_out() -> None:
    """An argument the model left out runs as its default: a default the arguments show is
    filled in, and one of None (which they leave out) reads as null, not as `{{memo}}`, a
    template nobody filled (helper-122)."""

    @create_tool(needs_approval=True,
                 approval_prompt="Pay {{amount}} to {{to}} from {{source}}? memo: {{memo}}")
    def pay(amount: int, to: str, source: str = "main", memo: str | None = None) -> str:
        """Pay."""
        return "paid"

    agent = Agent(name="x", model=ScriptedChatModel(
        [turn(call("pay", {"amount": 5, "to": "bob"}, "c1"),
              call("pay", {"amount": 6, "to": "eve", "memo": "rent"}, "c2")), "ok"]),
        tools=[pay])
    result = agent.generate("go")
    assert [p.metadata["prompt"] for p in result.pending_approvals] == [
        "Pay 5 to bob from main? memo: null", "Pay 6 to eve from main? memo: rent"]


def test_prompt_function_that_raises_still_pauses_with_the_default_prompt() -> None:
    def bad_prompt(args: dict[str, Any]) -> str:
        raise KeyError("oops")

    ran: list[str] = []

    @create_tool(needs_approval=True, approval_prompt=bad_prompt)
    def wipe(target: str) -> str:
        """Wipe."""
        ran.append(target)
        return "wiped"

    agent = Agent(name="x", model=ScriptedChatModel([turn(call("wipe", {"target": "db"}, "c1")),
                                                     "ok"]), tools=[wipe])
    result = agent.generate("go")
    assert result.finish_reason == "suspended" and ran == []
    assert result.pending_approvals[0].metadata["prompt"] == "Approve wipe?"


def test_plain_langchain_tools_are_accepted_and_never_ask_by_themselves() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    agent = Agent(name="x", model=ScriptedChatModel([turn(call("echo", {"text": "hi"}, "c1")),
                                                     "ok"]), tools=[echo])
    assert agent.generate("go").finish_reason == "stop"
    assert agent.generate("go", require_tool_approval=True).finish_reason == "suspended"


class _TagArgs(BaseModel):
    target: str
    tool_call_id: Annotated[str, InjectedToolCallId]


class _TagArgsV1(BaseModelV1):
    target: str
    tool_call_id: Annotated[str, InjectedToolCallId]


@pytest.mark.parametrize("declared", ["in its signature", "in its args_schema",
                                      "in a pydantic v1 args_schema"])
@pytest.mark.parametrize("model_gives", [{}, {"tool_call_id": "forged"}])
def test_a_langchain_tool_gets_its_tool_call_id_injected_never_the_models(
        model_gives: dict[str, Any], declared: str, sqlite_url: str) -> None:
    """A plain LangChain tool taking `InjectedToolCallId` was refused at every call (its
    arguments were checked with the injected one, which no model gives), and the id a model
    wrote for it was shown for approval as an argument and offered for edits (helper-113,
    helper-114). The call shows, digests and edits what the model gives; LangChain fills
    the id in from the call as it runs."""
    seen: list[tuple[str, str]] = []

    def tag_body(target: str, tool_call_id: str) -> str:
        seen.append((target, tool_call_id))
        return "tagged"

    @tool
    def tag(target: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Tag a target."""
        return tag_body(target, tool_call_id)

    if declared != "in its signature":
        tag = StructuredTool.from_function(
            tag_body, name="tag", description="Tag a target.",
            args_schema=_TagArgs if declared == "in its args_schema" else _TagArgsV1)

    agent = Agent(name="x", tools=[tag], require_tool_approval=True, checkpointer=sqlite_url,
                  model=ScriptedChatModel(
                      [turn(call("tag", {"target": "t1", **model_gives}, "c1")), "ok"]))
    first = agent.generate("go")
    assert [p.args for p in first.pending_approvals] == [{"target": "t1"}]
    # the conversation beside the card (the web inbox's recent messages) shows the call as
    # the card does: what the model wrote for an injected argument is not an argument
    # (helper-117 L1)
    shown = Inbox(sqlite_url, agents=[agent]).messages(first.pending_approvals[0].id)
    assert [c["args"] for m in shown for c in getattr(m, "tool_calls", None) or []] == [
        {"target": "t1"}]
    with pytest.raises(InvalidApprovedArgsError, match="tool_call_id"):
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a",
                                         args={"target": "t2", "tool_call_id": "mine"})
    done = agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a",
                                            args={"target": "t3"})
    assert done.finish_reason == "stop" and seen == [("t3", "c1")]


def test_a_tool_whose_injected_arguments_nothing_fills_in_is_refused_when_given() -> None:
    """LangGraph's `InjectedState`, a bare `InjectedToolArg`: graphkit's tools run apart from
    the graph's state, and such an argument was left to the model, which made one up (a user
    id, a state) that the tool took as the system's (helper-113). Refused, typed, as the
    agent is made."""
    from graphkit.errors import GraphkitError

    @tool
    def transfer(amount: int, user_id: Annotated[str, InjectedToolArg]) -> str:
        """Transfer money for the current user."""
        return "ok"

    @tool
    def peek(q: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Peek at the state."""
        return "ok"

    class PeekArgs(BaseModel):
        q: str
        state: Annotated[dict[str, Any], InjectedState]

    class PeekArgsV1(BaseModelV1):
        q: str
        state: Annotated[dict[str, Any], InjectedState]

    # (declared in an explicit args_schema, which LangChain's own set of them misses: an
    # InjectedState there was left to the model, helper-116; in pydantic's v1 API too,
    # helper-117)
    declared = StructuredTool.from_function(lambda q, state: "ok", name="peek2",
                                            description="Peek.", args_schema=PeekArgs)
    declared_v1 = StructuredTool.from_function(lambda q, state: "ok", name="peek3",
                                               description="Peek.", args_schema=PeekArgsV1)
    for given, name in ((transfer, "user_id"), (peek, "state"), (declared, "state"),
                        (declared_v1, "state")):
        with pytest.raises(GraphkitError, match=f"injected arguments \\['{name}'\\]"):
            Agent(name="x", tools=[given], model=ScriptedChatModel(["ok"]))


def test_plain_functions_become_tools_and_names_must_be_unique() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    agent = Agent(name="x", model=ScriptedChatModel(["ok"]), tools=[ping])
    assert agent.tools[0].name == "ping"
    with pytest.raises(ValueError, match="unique"):
        Agent(name="x", model=ScriptedChatModel(["ok"]), tools=[ping, ping])


def test_needs_approval_must_be_bool_or_callable() -> None:
    with pytest.raises(TypeError, match="needs_approval"):
        create_tool(lambda: None, name="x", description="x", needs_approval="yes")  # type: ignore[call-overload]


def test_secret_arguments_reach_the_tool_as_sent_approved_or_edited() -> None:
    """pydantic masks secrets in JSON dumps ('**********'): the tool must still get the value
    the model (or an edit) gave, not the mask, and a secret field must not make every call
    look like a validator that changes its arguments. Reviewers see the mask; an edit that
    leaves a masked value as shown keeps the real one."""
    got: list[tuple[str, str, list[str]]] = []

    @create_tool(needs_approval=True)
    def login(user: str, password: SecretStr, token: SecretBytes,
              backups: list[SecretStr]) -> str:
        """Log in."""
        got.append((password.get_secret_value(), token.get_secret_value().decode(),
                    [b.get_secret_value() for b in backups]))
        return "in"

    args = {"user": "ann", "password": "hunter2", "token": "t0k", "backups": ["b1", "b2"]}
    agent = Agent(name="secrets", tools=[login], model=ScriptedChatModel(
        [turn(call("login", args, "c1")), "done", turn(call("login", args, "c2")), "done",
         turn(call("login", args, "c3")), "done"]))
    first = agent.generate("log in")
    assert first.finish_reason == "suspended"
    mask = "**********"
    shown = {"user": "ann", "password": mask, "token": mask, "backups": [mask, mask]}
    assert first.pending_approvals[0].args == shown
    assert agent.approve_tool_call_generate(run_id=first.run_id).text == "done"
    second = agent.generate("again", thread_id=first.thread_id)
    edited = agent.approve_tool_call_generate(
        run_id=second.run_id, args={**args, "password": "s3cret", "backups": []})
    assert edited.text == "done"
    third = agent.generate("once more", thread_id=first.thread_id)
    kept = agent.approve_tool_call_generate(run_id=third.run_id,
                                            args={**third.pending_approvals[0].args})
    assert kept.text == "done"
    assert got == [("hunter2", "t0k", ["b1", "b2"]), ("s3cret", "t0k", []),
                   ("hunter2", "t0k", ["b1", "b2"])]


def test_a_prompt_template_naming_no_argument_is_refused_when_the_tool_is_made() -> None:
    """A typo (`{{amout}}`) would show reviewers the placeholder instead of the amount."""
    import pytest as _pytest

    with _pytest.raises(ValueError, match=r"names \['amout'\].*arguments are \['amount', 'to'\]"):
        @create_tool(needs_approval=True, approval_prompt="Pay {{amout}} to {{to}}?")
        def pay(amount: int, to: str) -> str:
            """Pay."""
            return "paid"

    @create_tool(needs_approval=True, approval_prompt="Pay {{ amount }} to {{to.name}}?")
    def pay_ok(amount: int, to: dict) -> str:  # type: ignore[type-arg]
        """Pay."""
        return "paid"

    assert pay_ok.approval_prompt == "Pay {{ amount }} to {{to.name}}?"


@pytest.mark.blocks_its_loop
@pytest.mark.parametrize("where", ["no loop", "a running loop"])
def test_an_async_tool_approved_through_a_blocking_method_runs_once_wherever_it_is_called(
        tmp_path: Path, where: str) -> None:
    """A blocking method called where an event loop runs in the thread (a notebook cell, async
    code): the async-only tool's loop of its own could not start there (`asyncio.run` refused
    before the tool's first line), the approved call counted as failed and never ran
    (helper-57). It runs once, with the run's config, as from anywhere else."""
    ran: list[tuple[int, Any, str]] = []

    @create_tool(needs_approval=True)
    async def pay(amount: int, config: RunnableConfig) -> str:
        """Pay."""
        await asyncio.sleep(0)
        ran.append((amount, (config.get("configurable") or {}).get("thread_id"),
                    threading.current_thread().name))
        return "paid"

    agent = Agent(name="payer", tools=[pay], checkpointer=f"sqlite:///{tmp_path / 'runs.db'}",
                  model=ScriptedChatModel([turn(call("pay", {"amount": 5}, "p1")), "done"]))

    def cell() -> tuple[str, str | None, str]:
        first = agent.generate("pay 5")
        final = agent.approve_tool_call_generate(run_id=first.run_id)
        return first.thread_id, final.text, final.finish_reason

    async def in_a_loop() -> tuple[str, str | None, str]:
        return cell()

    thread_id, text, reason = cell() if where == "no loop" else asyncio.run(in_a_loop())
    assert (text, reason) == ("done", "stop")
    assert [(amount, thread) for amount, thread, _ in ran] == [(5, thread_id)]


def test_approval_defaults_a_checkpoint_cannot_hold_are_refused_when_the_tool_is_made(
        ) -> None:
    """They went into every approval's interrupt, which LangGraph then failed to write
    (helper-67)."""
    with pytest.raises(ValueError, match="beyond 64 bits"):
        create_tool(lambda amount: "paid", name="pay", description="Pay.",
                    needs_approval=True, approval_defaults={"limit": 2**70})


class Where(BaseModel):
    region: str
    zone: int = None  # type: ignore[assignment]


@pydantic_dataclass
class Step:
    name: str
    limit: int = None  # type: ignore[assignment]


@dataclasses.dataclass
class Kit:
    name: str
    size: int = None  # type: ignore[assignment]


class Nested(BaseModel):
    by_key: dict[str, Where]
    by_number: dict[int, Where]
    rows: list[list[Where]]
    steps: list[Step]  # (dataclasses keep no set of the fields given)
    kit: Kit


@pytest.mark.parametrize("decision", ["approve", "edit"])
def test_a_tool_written_with_a_null_default_runs_when_approved(decision: str) -> None:
    """`x: int = None` (an implicit Optional many tools are written with): the call was
    recorded with `null` written out for what the model left out, and the tool's own
    validation refused that when the approved call ran (helper-67, found through an edit;
    nested in models, dicts and lists, helper-69 and helper-70; in dataclasses, which keep no
    set of the fields given, session 17)."""
    ran: list[dict[str, Any]] = []

    @create_tool(needs_approval=True)
    def withdraw(account: str, where: Where, nested: Nested,  # the implicit Optional:
                 daily_limit: int = None,  # type: ignore[assignment]  # noqa: RUF013
                 notify: bool = None,  # type: ignore[assignment]  # noqa: RUF013
                 ) -> str:
        """Withdraw."""
        ran.append({"account": account, "zone": where.zone, "daily_limit": daily_limit,
                    "notify": notify})
        return "ok"

    deep = {"by_key": {"k": {"region": "eu"}}, "by_number": {"7": {"region": "ap"}},
            "rows": [[{"region": "us"}]], "steps": [{"name": "drain"}], "kit": {"name": "k"}}
    agent = Agent(name="bank", tools=[withdraw], model=ScriptedChatModel([turn(call(
        "withdraw", {"account": "A-1", "where": {"region": "eu"}, "nested": deep}, "w1")),
        "done"]))
    paused = agent.generate("withdraw")
    (pending,) = paused.pending_approvals
    assert pending.args == {"account": "A-1", "where": {"region": "eu"}, "nested": deep}
    edit = {"args": {"account": "A-2", "where": {"region": "eu"}, "nested": deep}} if (
        decision == "edit") else {}
    done = agent.approve_tool_call_generate(run_id=paused.run_id, decided_by="cfo", **edit)
    assert done.finish_reason == "stop"
    assert ran == [{"account": "A-2" if edit else "A-1", "zone": None, "daily_limit": None,
                    "notify": None}]


def test_an_omitted_optional_argument_beside_a_secret_hides_nothing_else() -> None:
    """Leaving out `memo: str | None = None` beside a `SecretStr` made the whole call one
    secret: the card showed `**********` for every argument and the prompt its placeholders,
    and the call ran so approved (helper-68)."""

    @create_tool(needs_approval=True, approval_prompt="Pay {{amount}} to {{payee}}?")
    def pay(amount: int, payee: str, card: SecretStr, memo: str | None = None) -> str:
        """Pay."""
        return "paid"

    agent = Agent(name="billing", tools=[pay], model=ScriptedChatModel([turn(call(
        "pay", {"amount": 9000, "payee": "mallory-offshore", "card": "4111-secret"}, "p1")),
        "done"]))
    (pending,) = agent.generate("pay").pending_approvals
    assert pending.args == {"amount": 9000, "payee": "mallory-offshore", "card": "**********"}
    assert pending.prompt == "Pay 9000 to mallory-offshore?"


class Filled(BaseModel):
    amount: int
    account: str | None = Field(None, validate_default=True)

    @field_validator("account", mode="before")
    @classmethod
    def _treasury(cls, value: Any) -> Any:
        return value or "ops-main-treasury"


def test_a_default_a_validator_fills_in_is_shown() -> None:
    """Only a null the tool would get anyway is left out: a validator's own default is what
    runs, and the reviewer sees it (helper-68)."""

    @create_tool(needs_approval=True, args_schema=Filled)
    def wire(amount: int, account: str | None = None) -> str:
        """Wire."""
        return f"wired {amount} from {account}"

    agent = Agent(name="bank", tools=[wire], model=ScriptedChatModel([turn(call(
        "wire", {"amount": 5}, "w1")), "done"]))
    (pending,) = agent.generate("wire").pending_approvals
    assert pending.args == {"amount": 5, "account": "ops-main-treasury"}


class Memo(BaseModel):
    code: str = Field(validation_alias="c")
    note: str = Field("-", serialization_alias="nt")


class Aliased(BaseModel):
    account: str = Field(validation_alias="acct")
    amount: int = Field(100, serialization_alias="amt")
    amt: int = 7  # (the name another field is dumped under by alias)
    payee: str = Field(alias="to")
    memo: Memo = Field(validation_alias=AliasChoices("memo_text", AliasPath("m", 0)))
    ref: str = Field(validation_alias=AliasPath("meta", "ref"))


def test_arguments_run_and_show_under_the_keys_the_tool_reads_them_by() -> None:
    """Validated arguments were written by pydantic's dump: a `validation_alias`'s field under
    its name, which the tool then refused (the approved call failed in the tools node), and
    a `serialization_alias`'s under that alias, which was then dropped: the reviewer never
    saw the amount and the tool ran with its default (session 17), or took it for the field
    of that name; an `AliasPath`'s field was written under its name (helper-73)."""
    ran: list[dict[str, Any]] = []

    def pay(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "paid"

    pay_tool = create_tool(pay, name="pay", description="Pay.", args_schema=Aliased,
                           needs_approval=True,
                           approval_prompt="Pay {{amount}} from {{account}} to {{payee}}?")
    given = {"acct": "A-1", "amount": 999_999, "amt": 3, "to": "bob",
             "memo_text": {"c": "X", "note": "rent"}, "meta": {"ref": "R-1"}}
    agent = Agent(name="bank", tools=[pay_tool], model=ScriptedChatModel([
        turn(call("pay", given, "p1")), "done"]))
    paused = agent.generate("pay")
    (pending,) = paused.pending_approvals
    assert pending.args == given
    assert pending.prompt == "Pay 999999 from A-1 to bob?"
    done = agent.approve_tool_call_generate(run_id=paused.run_id, decided_by="cfo")
    assert done.finish_reason == "stop"
    assert ran == [{"account": "A-1", "amount": 999_999, "amt": 3, "payee": "bob",
                    "memo": Memo(c="X", note="rent"), "ref": "R-1"}]


@pytest.mark.parametrize("door", ["the agent", "an inbox without the tool"])
def test_an_edit_names_the_arguments_by_the_keys_the_reviewer_saw(sqlite_url: str,
                                                                  door: str) -> None:
    """The edit check went by LangChain's schema, which names fields by their names (and
    leaves out a field read by a validation alias): an edit under the keys the reviewer was
    shown was refused, and, with `populate_by_name`, so was one under the field's name, at the
    gate (helper-73). Edits name the arguments as they are shown; a field's bare name, which
    the reviewer never saw, is refused and nothing is decided."""
    ran: list[dict[str, Any]] = []

    def pay(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "paid"

    pay_tool = create_tool(pay, name="pay", description="Pay.", args_schema=Aliased,
                           needs_approval=True)
    given = {"acct": "A-1", "amount": 50, "amt": 3, "to": "bob",
             "memo_text": {"c": "X", "note": "rent"}, "meta": {"ref": "R-1"}}
    agent = Agent(name="bank", tools=[pay_tool], checkpointer=sqlite_url,
                  model=ScriptedChatModel([turn(call("pay", given, "p1")), "done"]))
    paused = agent.generate("pay")
    (pending,) = paused.pending_approvals
    edit = {**pending.args, "acct": "A-2", "to": "carol", "memo_text": {"c": "Y"},
            "meta": {"ref": "R-2"}}
    inbox = Inbox(sqlite_url)
    with pytest.raises(InvalidApprovedArgsError, match="takes no argument 'payee'"):
        if door == "the agent":
            agent.approve_tool_call(run_id=paused.run_id, args={**edit, "payee": "eve"},
                                    decided_by="cfo")
        else:
            inbox.approve(pending.id, args={**edit, "payee": "eve"}, decided_by="cfo")
    assert [p.status for p in agent.pending_approvals(run_id=paused.run_id)] == ["pending"]
    if door == "the agent":
        done = agent.approve_tool_call_generate(run_id=paused.run_id, args=edit,
                                                decided_by="cfo")
    else:
        inbox.approve(pending.id, args=edit, decided_by="cfo")
        done = agent.resume(run_id=paused.run_id)
    assert done.finish_reason == "stop"
    assert ran == [{"account": "A-2", "amount": 50, "amt": 3, "payee": "carol",
                    "memo": Memo(c="Y"), "ref": "R-2"}]


def test_a_runnable_config_parameter_is_langchains_to_give_never_the_models() -> None:
    """As LangChain's `@tool`: a `RunnableConfig` parameter is filled in when the tool runs and
    is no argument of its schema (the model was asked to write a `config`, and a call without
    one failed validation)."""

    def tag(label: str, config: RunnableConfig) -> str:
        """Tag."""
        return f"{label}:{(config.get('configurable') or {}).get('who')}"

    async def atag(label: str, config: RunnableConfig) -> str:
        """Tag."""
        return tag(label, config)

    for made in (create_tool(tag), create_tool(atag)):
        assert set(made.args) == {"label"}
        assert made.invoke({"label": "x"}, {"configurable": {"who": "ann"}}) == "x:ann"


@pytest.mark.parametrize("meddler", ["needs_approval", "approval_prompt"])
def test_a_predicate_or_prompt_that_changes_the_arguments_changes_nothing_that_runs(
        meddler: str) -> None:
    """A `needs_approval` predicate got a shallow copy of the arguments: setting a nested
    value in it changed what the tool ran with (helper-57). User code handed a call's
    arguments gets a copy of its own; the reviewer sees, and the tool runs, the model's."""
    got: list[Any] = []

    def meddle(args: dict[str, Any]) -> Any:
        args["opts"]["force"] = True
        args["target"] = "prod"
        return True if meddler == "needs_approval" else "Deploy?"

    options: dict[str, Any] = ({"needs_approval": meddle} if meddler == "needs_approval"
                               else {"needs_approval": True, "approval_prompt": meddle})

    @create_tool(**options)
    def deploy(target: str, opts: dict[str, Any]) -> str:
        """Deploy."""
        got.append((target, opts))
        return "deployed"

    args = {"target": "staging", "opts": {}}
    agent = Agent(name="ops", tools=[deploy], model=ScriptedChatModel(
        [turn(call("deploy", args, "d1")), "done"]))
    first = agent.generate("deploy")
    assert first.pending_approvals[0].args == args
    assert agent.approve_tool_call_generate(run_id=first.run_id).text == "done"
    assert got == [("staging", {})]


def test_a_tool_that_returns_its_own_message_under_another_id_answers_its_call(
        sqlite_url: str) -> None:
    """A tool returned a `ToolMessage` (with an artifact) under a `tool_call_id` of its own: it
    ran once, but its result answered no call, and the audit said a client's result had been
    discarded, "nothing ran" (helper-82). The tools node's result answers the call it ran."""

    ran: list[str] = []

    @create_tool(needs_approval=True)
    def deploy(env: str) -> ToolMessage:
        """Deploy."""
        ran.append(env)
        return ToolMessage("deployed", artifact={"sha": "abc"}, tool_call_id="made-up")

    read: list[list[Any]] = []

    def reply(messages: list[Any]) -> Any:
        read.append(list(messages))
        return turn(call("deploy", {"env": "prod"}, "d1")) if len(read) == 1 else "ok"

    agent = Agent(name="ops", tools=[deploy], checkpointer=sqlite_url,
                  model=ScriptedChatModel(reply))
    paused = agent.generate("deploy")
    agent.approve_tool_call_generate(run_id=paused.run_id)
    agent.generate("thanks", thread_id=paused.thread_id)
    told = [m for m in read[-1] if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content, m.artifact) for m in told] == [
        ("d1", "deployed", {"sha": "abc"})]
    assert ran == ["prod"]
    assert [e["event"] for e in Inbox(sqlite_url).audit(thread_id=paused.thread_id)] == [
        "requested", "approved"]


class _Inner(BaseModel):
    region: str = Field("eu", exclude=True)


class _Excluding(BaseModel):
    service: str
    env: str = Field("production", exclude=True)
    where: list[_Inner] = []


class _CamelDeploy(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True,
                              serialize_by_alias=True)
    service: str
    target_env: str = "production"


class _Blob(BaseModel):
    model_config = ConfigDict(ser_json_bytes="base64")
    data: bytes


class _Upload(BaseModel):
    service: str
    blob: _Blob


@pytest.mark.parametrize(("schema", "fields"), [(_Excluding, "['env', 'region']"),
                                                (_CamelDeploy, "['target_env']"),
                                                (_Upload, "['blob']")])
def test_a_tool_whose_schema_does_not_write_a_field_under_its_name_is_refused(
        schema: type[BaseModel], fields: str) -> None:
    """A field pydantic leaves out of what it writes (`Field(exclude=True)`, at any depth), or
    writes under its alias (`serialize_by_alias`: a camelCase schema), was dropped from every
    call: the predicate saw no `targetEnv` of "staging", nobody was asked, and the tool ran its
    default, production (helper-122 F1; LangChain's tool itself drops such a field). Such a
    tool is refused as the agent is made, naming the fields. So is one whose bytes are written
    as base64 and read back as that text (the tool got b"aGVsbG8=" for "hello": helper-123)."""
    ran: list[tuple[str, str]] = []

    def deploy_body(service: str, env: str = "production", where: Any = (),
                    target_env: str = "production", blob: Any = None) -> str:
        ran.append((service, target_env))
        return "deployed"

    deploy = StructuredTool.from_function(deploy_body, name="deploy", description="Deploy.",
                                          args_schema=schema)
    with pytest.raises(GraphkitError, match=re.escape(fields)):
        Agent(name="rel", tools=[deploy], model=ScriptedChatModel(["done"]))


def test_each_call_has_an_idempotency_key_of_its_own_whatever_id_the_model_gives() -> None:
    """`ctx.tool_call_id` is the model's, which a model gave a call of a later turn too:
    a payee that keyed payments by it, as the docs advised, dropped the second approved
    payment as a repeat of the first (helper-121). `ctx.idempotency_key` is the call's own:
    the same across its retries (a resume after it suspended), never another call's."""
    keys: list[tuple[str | None, str | None]] = []

    @create_tool(needs_approval=True)
    def pay(amount: int, ctx: ToolContext) -> str:
        """Pay."""
        keys.append((ctx.tool_call_id, ctx.idempotency_key))
        if amount == 2 and ctx.resume_data is None:
            ctx.suspend({"message": "code?"})
        return "paid"

    agent = Agent(name="bank", tools=[pay], model=ScriptedChatModel([
        turn(call("pay", {"amount": 1}, "c1")), "one",
        turn(call("pay", {"amount": 2}, "c1")), "two"]))
    first = agent.generate("pay 1")
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a")
    second = agent.generate("pay 2", thread_id=first.thread_id)
    asked = agent.approve_tool_call_generate(run_id=second.run_id, decided_by="a")
    agent.resume_generate({"code": "1"}, run_id=asked.run_id, decided_by="a")
    assert [model_id for model_id, _ in keys] == ["c1", "c1", "c1"]
    one, two, again = (key for _, key in keys)
    assert two == again and one != two and "c1" not in {one, two}


class _Env(Enum):
    PROD = "prod"
    STAGING = "staging"


def test_a_predicate_gets_the_values_the_tool_gets() -> None:
    """A predicate was given the arguments' JSON form: "prod" where the tool gets `Env.PROD`,
    text where it gets a Decimal or a date; one that compared them with the tool's own
    types never asked, and production was deployed unasked (helper-122 F3)."""
    ran: list[tuple[_Env, Decimal, date]] = []
    seen: list[dict[str, Any]] = []

    def risky(args: dict[str, Any]) -> bool:
        seen.append(args)
        return bool(args["env"] is _Env.PROD or args["budget"] > Decimal(1000)
                    or args["on"] >= date(2030, 1, 1))

    @create_tool(needs_approval=risky)
    def deploy(env: _Env, budget: Decimal, on: date) -> str:
        """Deploy."""
        ran.append((env, budget, on))
        return "deployed"

    agent = Agent(name="rel", tools=[deploy], model=ScriptedChatModel([
        turn(call("deploy", {"env": "prod", "budget": "5", "on": "2026-01-01"}, "d1"),
             call("deploy", {"env": "staging", "budget": "5000", "on": "2026-01-01"}, "d2"),
             call("deploy", {"env": "staging", "budget": "5", "on": "2031-01-01"}, "d3"),
             call("deploy", {"env": "staging", "budget": "5", "on": "2026-01-01"}, "d4")),
        "done"]))
    first = agent.generate("deploy")
    assert sorted(p.tool_call_id for p in first.pending_approvals) == ["d1", "d2", "d3"]
    assert ran == [(_Env.STAGING, Decimal(5), date(2026, 1, 1))]
    assert seen[0] == {"env": _Env.PROD, "budget": Decimal(5), "on": date(2026, 1, 1)}

    @create_tool(needs_approval=lambda args: args["env"] == _Env.PROD)
    def release(env: _Env) -> str:
        """Release."""
        ran.clear()
        return "released"

    agent = Agent(name="rel", tools=[release], model=ScriptedChatModel([
        turn(call("release", {"env": "prod"}, "r1")), "done"]))
    assert agent.generate("release").finish_reason == "suspended"  # (it ran, unasked)

    # a pydantic v1 schema, whose arguments graphkit takes as given (helper-123)
    released = create_tool(lambda env: "released", name="release", description="Release.",
                           args_schema=_ReleaseV1,
                           needs_approval=lambda args: args["env"] == _Env.PROD)
    agent = Agent(name="rel", tools=[released], model=ScriptedChatModel([
        turn(call("release", {"env": "prod"}, "r1")), "done"]))
    assert agent.generate("release").finish_reason == "suspended"


class _ReleaseV1(BaseModelV1):
    env: _Env
