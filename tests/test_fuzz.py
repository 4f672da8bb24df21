"""Hostile inputs: decisions, edited args, resume data and CLI arguments built from wrong types,
huge strings, unicode, nested JSON and `{{...}}` in template arguments. Always a typed error or
a correct result; never a crash, a hang, or a changed approval."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.types import Command
from pydantic import BaseModel

from graphkit import Agent, GraphkitError, ToolContext, create_tool
from graphkit.cli import main
from graphkit.testing import ScriptedChatModel
from graphkit.tools import render_prompt
from tests.helpers import call, turn

LONG = os.environ.get("GRAPHKIT_LONG_TESTS") == "1"
EXAMPLES = 200 if LONG else 25

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=50) | st.just("{{amount}}") | st.just("x" * 20_000),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)


class Answer(BaseModel):
    city: str


def build() -> tuple[Agent, list[Any]]:
    ran: list[Any] = []

    @create_tool(needs_approval=True, approval_prompt="Pay {{amount}} to {{to}}?")
    def pay(amount: int, to: str) -> str:
        """Pay."""
        ran.append(("pay", amount, to))
        return "paid"

    @create_tool(resume_schema=Answer)
    def ask(ctx: ToolContext) -> Any:
        """Ask for a city."""
        if ctx.resume_data is None:
            return ctx.suspend({"message": "city?"})
        ran.append(("ask", ctx.resume_data.city))
        return "ok"

    script = [turn(call("pay", {"amount": 5, "to": "bob"}, "p1"), call("ask", {}, "a1")), "done"]
    return Agent(name="fuzz", model=ScriptedChatModel(script), tools=[pay, ask]), ran


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.too_slow])
@given(args=json_values, data=json_values, by=st.one_of(st.none(), st.text(max_size=200)),
       comment=st.one_of(st.none(), st.text(max_size=2000)))
def test_hostile_decisions_never_crash_or_change_an_approval(args: Any, data: Any, by: Any,
                                                             comment: Any) -> None:
    agent, ran = build()
    result = agent.generate("go")
    before = agent.snapshot(run_id=result.run_id)["pending_approvals"]
    try:
        stream = agent.approve_tool_call(run_id=result.run_id, tool_call_id="p1",
                                         decided_by=by, comment=comment, args=args)
        accepted_args = True
    except GraphkitError:
        accepted_args = False
    accepted_data = False
    with contextlib.suppress(GraphkitError):
        agent.resume_stream(data, run_id=result.run_id, tool_call_id="a1")
        accepted_data = True
    # a decision is taken when the call is made; nothing runs until the stream is consumed,
    # and a refused decision changes nothing
    assert ran == []
    after = agent.snapshot(run_id=result.run_id)["pending_approvals"]
    accepted = {"p1": accepted_args, "a1": accepted_data}
    assert [(p["id"], p["args"]) for p in after] == [(p["id"], p["args"]) for p in before]
    for record in after:
        assert record["status"] == ("approved" if accepted[record["tool_call_id"]]
                                    else "pending")
    if accepted_args and args is not None:
        assert isinstance(args, dict) and isinstance(args.get("amount"), int)
    if accepted_args:  # and an accepted decision runs to a correct result
        final = stream.result()
        assert final.finish_reason in ("suspended", "stop")
        assert ran and ran[0][0] == "pay"


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values)
def test_hostile_raw_resume_values_keep_the_run_paused(value: Any) -> None:
    agent, ran = build()
    result = agent.generate("go")
    config = {"configurable": {"thread_id": result.thread_id}}
    for resume in ({"decisions": value}, value):
        if resume is None:  # Command(resume=None) trips LangGraph 1.2's own loop; not ours
            continue
        try:
            agent.graph.invoke(Command(resume=resume), config)
        except TypeError as exc:  # LangGraph cannot serialise it: refused before any write
            assert "64-bit" in str(exc) or "serializ" in str(exc).lower()
    state = agent.graph.get_state(config)
    waiting = {r["tool_call_id"] for i in state.interrupts for r in i.value["approvals"]
               if r["status"] == "pending"}
    paid = any(entry[0] == "pay" for entry in ran)
    assert paid == ("p1" not in waiting)  # the call ran if and only if it stopped waiting
    assert state.interrupts or state.values["messages"][-1].type == "ai"  # paused or done


@settings(max_examples=EXAMPLES * 4, deadline=None, derandomize=not LONG)
@given(args=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
       template=st.text(max_size=200))
def test_prompt_templates_with_hostile_args_never_evaluate(args: dict[str, Any],
                                                          template: str) -> None:
    rendered = render_prompt(template + " {{amount}} {{ a.b }}", args)
    assert isinstance(rendered, str)
    if "amount" in args and isinstance(args["amount"], str):
        # a value is inserted once; placeholders inside it stay as written
        assert args["amount"] in rendered


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(st.text(max_size=300), json_values.map(json.dumps)),
       ident=st.text(min_size=1, max_size=80).filter(lambda s: not s.startswith("-")),
       by=st.text(min_size=1, max_size=80).filter(lambda s: not s.startswith("-")))
def test_hostile_cli_arguments_give_one_line_errors(tmp_path_factory: Any, raw: str, ident: str,
                                                    by: str) -> None:
    from graphkit._review import named

    db = f"sqlite:///{Path(tmp_path_factory.mktemp('cli')) / 'f.db'}"
    lines: list[str] = []
    try:
        code = main(["approve", ident, "--db", db, "--by", by, "--args", raw],
                     out=lines.append)
    except SystemExit as exited:  # a usage error: argparse's one line
        code = exited.code
    # a blank name is a usage error; else nothing of that id exists, whatever the rest says
    assert code == (2 if named(by) is None else 1)
