"""The reviewers' web inbox in a real browser: Debian's Chromium driven by Playwright.

A reviewer signs in, sees approvals from two agents, edits and approves one, declines another
with a comment, answers a suspended tool; workers resume the runs, which finish with the
decided arguments; a second browser sees decided requests leave its list live; an expired
request cannot be approved; an anonymous visitor, a reviewer the policy refuses and a request
without the CSRF token are refused. Screenshots go to docs/screenshots/
(docs/reviewing.md shows them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from graphkit import Agent, Inbox, ToolContext, create_tool
from graphkit._worker import Worker
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, null_default_agent, turn

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "screenshots"
"""Where the screenshots of docs/reviewing.md come from: `GRAPHKIT_SCREENSHOTS=1 make test`
refreshes them
(otherwise a test run writes its screenshots to a temporary folder)."""
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-intern": "intern"}


class Region(BaseModel):
    region: str


def _agents(url: str, ran: list[tuple[str, Any]]) -> tuple[Agent, Agent]:
    @create_tool(needs_approval=True, approval_prompt="Pay {{amount}} to {{payee}}?")
    def pay(amount: int, payee: str) -> str:
        """Send a payment."""
        ran.append(("pay", {"amount": amount, "payee": payee}))
        return f"paid {amount} to {payee}"

    @create_tool(needs_approval=True, approval_prompt="Deploy {{version}}?",
                 approval_ttl=timedelta(hours=1))
    def deploy(version: str) -> str:
        """Deploy a build."""
        ran.append(("deploy", {"version": version}))
        return f"deployed {version}"

    @create_tool(needs_approval=True, approval_ttl=timedelta(milliseconds=300))
    def restart(service: str) -> str:
        """Restart a service."""
        ran.append(("restart", {"service": service}))
        return "restarted"

    @create_tool(resume_schema=Region)
    def provision(size: str, ctx: ToolContext) -> str:
        """Provision a machine; asks where."""
        answer = ctx.suspend({"message": "Which region?"})
        ran.append(("provision", {"size": size, "region": answer.region}))
        return f"provisioned {size} in {answer.region}"

    def script(*turns: Any) -> ScriptedChatModel:
        return ScriptedChatModel(list(turns))

    def finance(decided_by: str | None, pending: Any) -> bool:
        return decided_by in ("alice", "bob")

    billing = Agent(name="billing", tools=[pay], checkpointer=url, approvers=finance,
                    model=script(turn(call("pay", {"amount": 40, "payee": "ACME"}, "p1")),
                                 "payment done"))
    ops = Agent(name="ops", tools=[deploy, restart, provision], checkpointer=url,
                approvers=finance,
                model=script(turn(call("deploy", {"version": "2.0.0"}, "d1"),
                                  call("restart", {"service": "api"}, "r1"),
                                  call("provision", {"size": "large"}, "v1")),
                             "ops done"))
    return billing, ops


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def site(tmp_path: Path) -> Iterator[dict[str, Any]]:
    from graphkit.web import create_app

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[tuple[str, Any]] = []
    billing, ops = _agents(url, ran)
    runs = {"billing": billing.generate("pay ACME"), "ops": ops.generate("ship it")}
    # every signed-in reviewer sees every card here (so that a refused decision can be shown);
    # the default, what the approvers policy lets them decide, is tested below
    app = create_app(url, authenticate=TOKENS, agents=[billing, ops], secret="test-secret",
                     viewers=lambda who, pending: True)
    workers = [Worker(agent) for agent in (billing, ops)]
    for worker in workers:
        threading.Thread(target=worker.run, daemon=True).start()
    try:
        with _served(app) as base:
            yield {"base": base, "url": url, "ran": ran, "runs": runs, "agents": (billing, ops)}
    finally:
        for worker in workers:
            worker.stop()


@contextlib.contextmanager
def _served(app: Any) -> Iterator[str]:
    """The app served by uvicorn on a free port: its base URL."""
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            yield chromium
        finally:
            chromium.close()


def sign_in(browser: Any, base: str, token: str) -> Any:
    page = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
    page.goto(base)
    assert page.url.endswith("/login")
    page.fill("input[name=token]", token)
    page.click("button:has-text('Sign in')")
    page.wait_for_selector("#pending")
    return page


def row(page: Any, tool: str) -> Any:
    return page.locator("#pending tr", has_text=tool)


def wait_until(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_reviewer_decides_in_the_browser_and_the_runs_finish(
        site: dict[str, Any], browser: Any, tmp_path: Path) -> None:
    base, ran = site["base"], site["ran"]
    shots = SHOTS if os.environ.get("GRAPHKIT_SCREENSHOTS") else tmp_path
    shots.mkdir(parents=True, exist_ok=True)

    anonymous = browser.new_context().new_page()
    anonymous.goto(base)
    assert anonymous.url.endswith("/login")
    assert anonymous.request.post(base + "approvals/x/approve", form={"csrf": "x"}).status == 401

    alice = sign_in(browser, base, "tok-alice")
    bob = sign_in(browser, base, "tok-bob")
    for tool in ("pay", "deploy", "provision"):  # (the restart may have expired already)
        assert row(alice, tool).count() == 1
    assert "billing" in alice.inner_text("#pending") and "ops" in alice.inner_text("#pending")
    alice.screenshot(path=str(shots / "inbox.png"))

    # edit and approve the payment; bob's open list loses it live
    row(alice, "pay").locator("a").click()
    alice.wait_for_selector(".card")
    assert "Pay 40 to ACME?" in alice.inner_text(".card")
    alice.fill("form[action$='/edit'] input[name='arg.amount']", "35")
    alice.fill("form[action$='/edit'] input[name=comment]", "rounded down")
    alice.screenshot(path=str(shots / "review-card.png"))
    alice.click("form[action$='/edit'] button")
    alice.wait_for_selector(".status.approved")
    row(bob, "pay").wait_for(state="detached", timeout=10_000)
    wait_until(lambda: ("pay", {"amount": 35, "payee": "ACME"}) in ran)

    # decline the deployment with a comment
    alice.goto(base)
    row(alice, "deploy").locator("a").click()
    alice.fill("form[action$='/decline'] input[name=comment]", "freeze until Monday")
    alice.click("form[action$='/decline'] button")
    alice.wait_for_selector(".status.rejected")
    row(bob, "deploy").wait_for(state="detached", timeout=10_000)

    # the restart expired before anyone decided: no longer listed, and it cannot be approved
    time.sleep(0.4)
    alice.goto(base)
    assert row(alice, "restart").count() == 0
    restart = next(p for p in site["runs"]["ops"].pending_approvals if p.tool_name == "restart")
    alice.goto(base + "approvals/" + restart.id)
    alice.wait_for_selector(".status.rejected")
    assert "expired" in alice.inner_text(".card")
    assert alice.locator("form[action$='/approve'] button").count() == 0

    # answer the suspended tool
    wait_until(lambda: bool(Inbox(site["url"]).pending(tool_name="provision")))
    alice.goto(base)
    row(alice, "provision").locator("a").click()
    alice.fill("input[name='data.region']", "eu-west")
    alice.screenshot(path=str(shots / "suspension-card.png"))
    alice.click("form[action$='/resume'] button")
    wait_until(lambda: any(name == "provision" for name, _ in ran))

    billing, ops = site["agents"]
    wait_until(lambda: billing.snapshot(run_id=site["runs"]["billing"].run_id)["status"]
               == "stop")
    wait_until(lambda: ops.snapshot(run_id=site["runs"]["ops"].run_id)["status"] == "stop")
    assert ("deploy", {"version": "2.0.0"}) not in ran
    assert ("restart", {"service": "api"}) not in ran
    assert ("provision", {"size": "large", "region": "eu-west"}) in ran
    audit = Inbox(site["url"]).audit()
    assert any(e["event"] == "edited" and e["decided_by"] == "alice" for e in audit)
    assert any(e["event"] == "rejected" and e["comment"] == "freeze until Monday"
               for e in audit)
    alice.goto(base + f"threads/{site['runs']['ops'].thread_id}/audit")
    alice.screenshot(path=str(shots / "audit.png"))


def _edit_in_the_browser(browser: Any, url: str, agent: Agent, field: str, value: str) -> None:
    """alice signs in, changes one field of the one pending card's edit form, and approves."""
    from graphkit.web import create_app

    (pending,) = Inbox(url).pending()
    with _served(create_app(url, authenticate=TOKENS, agents=[agent], secret="s")) as base:
        page = sign_in(browser, base, "tok-alice")
        page.goto(base + f"approvals/{pending.id}")
        page.fill(f"form.edit input[name='arg.{field}']", value)
        page.click("form.edit button:has-text('Approve these arguments')")
        wait_until(lambda: Inbox(url).get(pending.id).status == "approved")


def test_an_edit_of_one_field_runs_every_other_as_the_card_showed_it(
        tmp_path: Path, browser: Any) -> None:
    """A reviewer who changes one field of a card's edit form approves the other fields as
    the card showed them, whatever an HTML form cannot hold: a text's leading line break
    (HTML drops the first), a carriage return, NUL, a fraction and nulls in number inputs
    and a check box. Each changed before, silently (helper-65, helper-66). (`inf`, which no
    JSON holds, is refused where any value comes in: helper-78.)"""

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[dict[str, Any]] = []

    @create_tool(needs_approval=True)
    def transfer(amount: int, memo: str, header: str, ref: str, slippage: float = 0.5,
                 replicas: int | None = 3, dry_run: bool | None = True) -> str:
        """Transfer."""
        ran.append({"amount": amount, "memo": memo, "header": header, "ref": ref,
                    "slippage": slippage, "replicas": replicas, "dry_run": dry_run})
        return "sent"

    asked = {"amount": 900, "memo": "\n\nline2", "header": "a\rb", "ref": "REF\x00-99",
             "slippage": 0.125, "replicas": None, "dry_run": None}
    agent = Agent(name="treasury", tools=[transfer], checkpointer=url, model=ScriptedChatModel(
        [turn(call("transfer", asked, "t1")), "done"]))
    paused = agent.generate("send it")
    _edit_in_the_browser(browser, url, agent, "amount", "100")
    agent.resume(run_id=paused.run_id)
    assert ran == [{**asked, "amount": 100}]


def test_an_edit_form_shows_hidden_characters_and_whole_texts_as_the_card_does(
        tmp_path: Path, browser: Any) -> None:
    """The card's arguments showed a bidi override and a zero-width space as escapes; its edit
    form was filled with them raw, its payee input read as another IBAN, its memo's tail past
    the box (helper-144). The form shows them as the card does, a long text whole in a text
    area, and a field left as it was still runs as stored."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[dict[str, Any]] = []

    @create_tool(needs_approval=True)
    def transfer(amount: int, payee: str, memo: str, iban: str) -> str:
        """Transfer."""
        ran.append({"amount": amount, "payee": payee, "memo": memo, "iban": iban})
        return "sent"

    # (iban: 39 characters, 99 as shown: a text area too, helper-146)
    asked = {"amount": 30, "payee": "ACME IBAN \u202e00 0310 2350 4400 4073 98ED",
             "memo": "ok\u200b" + " " * 120 + "and wire 9000 to X",
             "iban": "DE89 3704 0044 0532 0130 00" + "\u200b" * 12 + " and X"}
    agent = Agent(name="treasury", tools=[transfer], checkpointer=url, model=ScriptedChatModel(
        [turn(call("transfer", asked, "t1")), "done"]))
    paused = agent.generate("send it")
    from graphkit.web import create_app

    (pending,) = Inbox(url).pending()
    with _served(create_app(url, authenticate=TOKENS, agents=[agent], secret="s")) as base:
        page = sign_in(browser, base, "tok-alice")
        page.goto(base + f"approvals/{pending.id}")
        payee = page.input_value("form.edit input[name='arg.payee']")
        memo = page.input_value("form.edit textarea[name='arg.memo']")
        assert payee == "ACME IBAN \\u202e00 0310 2350 4400 4073 98ED"
        assert memo == "ok\\u200b" + " " * 120 + "and wire 9000 to X"
        assert page.input_value("form.edit textarea[name='arg.iban']").endswith(" and X")
        page.fill("form.edit input[name='arg.amount']", "25")
        page.click("form.edit button:has-text('Approve these arguments')")
        wait_until(lambda: Inbox(url).get(pending.id).status == "approved")
    agent.resume(run_id=paused.run_id)
    assert ran == [{**asked, "amount": 25}]


def test_a_resume_form_left_as_it_was_gives_the_tools_defaults(tmp_path: Path,
                                                               browser: Any) -> None:
    """A suspended tool's answer form shows a default's hidden characters as escapes too; a
    field left as it was sent that escape text, not the default (helper-146 M3)."""
    from pydantic import BaseModel

    from graphkit.web import create_app

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    got: list[dict[str, Any]] = []

    class Answer(BaseModel):
        code: str
        region: str = "eu\u202e-west"
        note: str = "tab\there"

    @create_tool(resume_schema=Answer)
    def provision(ctx: ToolContext) -> str:
        """Provision."""
        if ctx.resume_data is None:
            return ctx.suspend({"message": "code?"})
        got.append(ctx.resume_data.model_dump())
        return "ok"

    agent = Agent(name="ops", tools=[provision], checkpointer=url, model=ScriptedChatModel(
        [turn(call("provision", {}, "v1")), "done"]))
    paused = agent.generate("provision")
    (pending,) = Inbox(url).pending()
    with _served(create_app(url, authenticate=TOKENS, agents=[agent], secret="s")) as base:
        page = sign_in(browser, base, "tok-alice")
        page.goto(base + f"approvals/{pending.id}")
        assert page.input_value("input[name='data.region']") == "eu\\u202e-west"
        page.fill("input[name='data.code']", "42")
        page.click("form[action$='/resume'] button")
        wait_until(lambda: Inbox(url).get(pending.id).status != "pending")
    agent.resume(run_id=paused.run_id)
    assert got == [{"code": "42", "region": "eu\u202e-west", "note": "tab\there"}]


def test_an_edit_leaves_a_default_the_tool_filled_in_to_the_tool(tmp_path: Path,
                                                                 browser: Any) -> None:
    """A tool declared `daily_limit: int = None` is recorded with the default filled in; an
    edit of another field sent that null back explicitly, which the tool's model refuses, so
    no edit of such a tool could be approved (helper-67)."""

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[dict[str, Any]] = []
    agent = null_default_agent(ran, checkpointer=url)
    paused = agent.generate("withdraw")
    _edit_in_the_browser(browser, url, agent, "account", "A-2")
    agent.resume(run_id=paused.run_id)
    assert ran == [{"account": "A-2", "daily_limit": None, "notify": None}]


def test_refusals_in_the_browser(site: dict[str, Any], browser: Any) -> None:
    base = site["base"]
    intern = sign_in(browser, base, "tok-intern")
    row(intern, "pay").locator("a").click()
    intern.click("form[action$='/approve'] button")
    intern.wait_for_selector(".error.refused")
    assert "'intern' may not approve" in intern.inner_text(".error.refused")
    assert site["ran"] == []

    alice = sign_in(browser, base, "tok-alice")
    pending = Inbox(site["url"]).pending(tool_name="pay")[0]
    forged = alice.request.post(base + f"approvals/{pending.id}/approve",
                                form={"csrf": "not-the-token"})
    assert forged.status == 403
    gone = alice.request.get(base + f"approvals/{pending.id}/approve")
    assert gone.status == 405  # nothing is decided by GET
    assert Inbox(site["url"]).get(pending.id).status == "pending"

    wrong = browser.new_context().new_page()
    wrong.goto(base + "login")
    wrong.fill("input[name=token]", "tok-nobody")
    wrong.click("button:has-text('Sign in')")
    wrong.wait_for_selector(".error")
    assert wrong.url.endswith("login?error=1")


def test_the_web_inbox_on_postgresql(postgres_url: str) -> None:
    """The same pages and decisions on PostgreSQL storage (no browser needed here)."""
    import re

    from starlette.testclient import TestClient

    from graphkit.web import create_app

    ran: list[tuple[str, Any]] = []
    billing, _ = _agents(postgres_url, ran)
    result = billing.generate("pay ACME")
    client = TestClient(create_app(postgres_url, authenticate=TOKENS, agents=[billing],
                                   secret="s"))
    assert client.get("/", follow_redirects=False).status_code == 303
    login = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
    assert login is not None
    client.post("/login", data={"token": "tok-alice", "login": login.group(1)})
    (pending,) = Inbox(postgres_url).pending()
    assert pending.id in client.get("/").text
    card = client.get(f"/approvals/{pending.id}").text
    csrf = re.search(r"name='csrf' value='([0-9a-f]+)'", card)
    assert csrf is not None
    client.post(f"/approvals/{pending.id}/edit",
                data={"csrf": csrf.group(1), "arg.amount": "30", "arg.payee": "ACME",
                      "digest": pending.args_digest})
    assert Inbox(postgres_url).get(pending.id).approved_args == {"amount": 30, "payee": "ACME"}
    assert billing.resume(run_id=result.run_id).text == "payment done"
    assert ran == [("pay", {"amount": 30, "payee": "ACME"})]


def test_reviewers_see_only_what_they_may_decide(tmp_path: Path) -> None:
    """Who sees what: with the agents' approvers policy and no `viewers=`, a reviewer sees
    what the policy lets them decide, and nothing else, through every page: the list, the
    live list, a card (and its messages and arguments), its audit, the thread's audit, the
    grants; a decision on an approval they may not see is refused; the attempt is audited."""
    from starlette.testclient import TestClient

    from graphkit.web import create_app

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[tuple[str, Any]] = []
    billing, _ = _agents(url, ran)  # finance decides payments

    @create_tool(needs_approval=True)
    def deploy(version: str) -> str:
        """Deploy."""
        return f"deployed {version}"

    ops = Agent(name="ops", tools=[deploy], checkpointer=url,  # interns may deploy
                approvers=lambda who, pending: who in ("alice", "intern"),
                model=ScriptedChatModel([turn(call("deploy", {"version": "2.0.0"}, "d1")),
                                         "ops done"]))
    paid = billing.generate("pay ACME")
    ops.generate("ship it")
    client = TestClient(create_app(url, authenticate=TOKENS, agents=[billing, ops],
                                   secret="s"))
    import re

    login = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
    assert login is not None
    client.post("/login", data={"token": "tok-intern", "login": login.group(1)})
    (payment,) = [p for p in Inbox(url).pending() if p.tool_name == "pay"]
    listing = client.get("/").text
    assert "deploy" in listing and "pay" not in listing.replace("payment", "")
    assert payment.id not in client.get("/?fragment=1").text
    assert client.get(f"/approvals/{payment.id}").status_code == 404
    assert "ACME" not in client.get(f"/approvals/{payment.id}").text
    # hidden, or never there: the same answer (and never where the database is)
    made_up = "apr_" + "0" * (len(payment.id) - 4)
    for page in ("", "/audit"):
        hidden = client.get(f"/approvals/{payment.id}{page}")
        missing = client.get(f"/approvals/{made_up}{page}")
        assert hidden.text.replace(payment.id, made_up) == missing.text
        assert str(tmp_path) not in missing.text
    assert client.get(f"/approvals/{payment.id}/audit").status_code == 404
    thread_audit = client.get(f"/threads/{paid.thread_id}/audit").text
    assert payment.id not in thread_audit
    (deploying,) = [p for p in Inbox(url).pending() if p.tool_name == "deploy"]
    csrf = re.search(r"name='csrf' value='([^']+)'",
                     client.get(f"/approvals/{deploying.id}").text)
    assert csrf is not None
    client.post(f"/approvals/{payment.id}/approve", data={"csrf": csrf.group(1)})
    assert Inbox(url).get(payment.id).status == "pending" and ran == []
    refused = [e for e in Inbox(url).audit(id=payment.id) if e["event"] == "refused"]
    assert refused and all(e["decided_by"] == "intern" for e in refused)
    # the Inbox itself, for a named reader, the same
    inbox = Inbox(url, agents=[billing, ops])
    assert payment.id not in [p.id for p in inbox.pending(viewer="intern")]
    assert payment.id in [p.id for p in inbox.pending(viewer="alice")]
    assert [e["approval_id"] for e in inbox.audit(thread_id=paid.thread_id, viewer="intern")
            ] == []


def test_a_hidden_call_leaves_no_trace_in_the_turn_that_made_it(tmp_path: Path) -> None:
    """A model that writes its calls as content blocks too (Anthropic's `tool_use`), the
    provider's raw calls, and a call it could not parse: a reviewer who may not see a call
    sees none of them on another call's card. The card printed the block, arguments and all
    (helper-50)."""
    import json

    from langchain_core.messages import AIMessage

    from tests.helpers import Ledger as Tools

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tools = Tools()

    def policy(who: str | None, pending: Any) -> bool:
        return who == "cfo" if pending.tool_name == "pay" else who in ("cfo", "dev")

    offshore = {"amount": 987654, "payee": {"name": "SECRET-OFFSHORE"}}
    turn_with_blocks = AIMessage(
        content=[{"type": "text", "text": "paying and cleaning"},
                 {"type": "reasoning", "summary": [
                     {"type": "summary_text", "text": "pay SECRET-OFFSHORE first"}]},
                 {"type": "non_standard", "value": {"type": "tool_use", "id": "p1",
                                                     "input": offshore}},
                 {"type": "tool_use", "id": "p1", "name": "pay", "input": offshore},
                 {"type": "tool_use", "id": "b1", "name": "bash",
                  "input": {"command": "rm -rf /tmp/x"}}],
        tool_calls=[{"name": "pay", "args": offshore, "id": "p1"},
                    {"name": "bash", "args": {"command": "rm -rf /tmp/x"}, "id": "b1"}],
        additional_kwargs={"tool_calls": [{"id": "p1", "type": "function", "function": {
            "name": "pay", "arguments": '{"payee": "SECRET-OFFSHORE"}'}}]},
        invalid_tool_calls=[{"name": "pay", "args": '{"payee": "SECRET-OFFSHORE-2"',
                             "id": "p2", "error": "unterminated", "type": "invalid_tool_call"}],
        response_metadata={"output": [{"type": "function_call", "call_id": "p1",
                                       "arguments": json.dumps(offshore)}]})
    agent = Agent(name="assistant", tools=tools.tools, checkpointer=url, approvers=policy,
                  model=ScriptedChatModel([turn_with_blocks, "done"]))
    agent.generate("pay and clean up")
    inbox = Inbox(url, agents=[agent])
    bash = next(p for p in inbox.pending() if p.tool_name == "bash")
    seen = inbox.messages(bash.id, viewer="dev")
    assert "SECRET-OFFSHORE" not in repr(seen) and "rm -rf /tmp/x" in repr(seen)
    assert "paying and cleaning" in repr(seen)
    assert "SECRET-OFFSHORE" in repr(inbox.messages(bash.id, viewer="cfo"))
    # as a LangGraph server keeps a streamed turn (a chunk), and a result's artifact
    from langchain_core.messages import AIMessageChunk, ToolMessage

    streamed = [AIMessageChunk(content="", tool_call_chunks=[
        {"name": "pay", "args": json.dumps(offshore), "id": "p1", "index": 0},
        {"name": "bash", "args": '{"command": "rm -rf /tmp/x"}', "id": "b1", "index": 1}]),
        ToolMessage("paid", tool_call_id="p1", artifact={"receipt": "SECRET-OFFSHORE"})]
    shown = inbox.seen_messages(streamed, bash, "dev")
    assert "SECRET-OFFSHORE" not in repr(shown) and "rm -rf /tmp/x" in repr(shown)
    # a turn of visible calls only that carries another's (a block, a citation of its text),
    # and a hidden call that uses the card's own call id again in a later turn (helper-52)
    later = [AIMessage(content=[
        {"type": "text", "text": "cleaning", "citations": [{"cited_text": "SECRET-OFFSHORE"}]},
        {"type": "tool_use", "id": "p1", "name": "pay", "input": offshore}],
        tool_calls=[{"name": "bash", "args": {"command": "rm -rf /tmp/x"}, "id": "b1"}]),
        AIMessage("", tool_calls=[{"name": "bash", "args": {"command": "cat SECRET-OFFSHORE"},
                                   "id": "b1"}])]
    picky = Inbox(url, agents=[agent], viewers=lambda who, p: "SECRET" not in repr(p.args))
    shown = picky.seen_messages(later, bash, "dev")
    assert "SECRET-OFFSHORE" not in repr(shown) and "cleaning" in repr(shown)


def test_a_card_shows_no_other_call_its_reviewer_may_not_see(tmp_path: Path) -> None:
    """A turn pays (only the CFO may see it) and cleans up (a developer may): the developer's
    card of the clean-up shows the conversation with the payment's call and its result
    hidden, on the web page and through `Inbox.messages(viewer=...)`."""
    import re

    from starlette.testclient import TestClient

    from graphkit.web import create_app
    from tests.helpers import Ledger as Tools

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tools = Tools()
    offshore = {"amount": 987654, "payee": {"name": "SECRET-OFFSHORE"}}

    def policy(who: str | None, pending: Any) -> bool:
        return who == "cfo" if pending.tool_name == "pay" else who in ("cfo", "dev")

    agent = Agent(name="assistant", tools=tools.tools, checkpointer=url, approvers=policy,
                  model=ScriptedChatModel([turn(call("pay", offshore, "p1"),
                                                call("bash", {"command": "rm -rf /tmp/x"},
                                                     "b1")), "done"]))
    agent.generate("pay and clean up")
    inbox = Inbox(url, agents=[agent])
    bash = next(p for p in inbox.pending() if p.tool_name == "bash")
    client = TestClient(create_app(url, authenticate={"tok-dev": "dev"}, agents=[agent],
                                   secret="s"))
    login = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
    assert login is not None
    client.post("/login", data={"token": "tok-dev", "login": login.group(1)})
    page = client.get(f"/approvals/{bash.id}").text
    assert "rm -rf /tmp/x" in page
    assert "SECRET-OFFSHORE" not in page and "987654" not in page
    seen = inbox.messages(bash.id, viewer="dev")
    assert "SECRET-OFFSHORE" not in str([getattr(m, "tool_calls", "") for m in seen])
    assert "SECRET-OFFSHORE" in str([getattr(m, "tool_calls", "")
                                     for m in inbox.messages(bash.id, viewer="cfo")])
