"""The web inbox, the notebook widgets and the worker refuse what a hostile page or client
tries: a CSRF token passed off as a session, framing, an Approve
that silently edited, a cross-site sign-in, a session replayed after sign-out, deep JSON
crashing a page, a notebook answer skipping the policy, agent names with '/', a transient
failure stranding a run, and forged notices."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from pydantic import BaseModel
from starlette.testclient import TestClient

from graphkit import Agent, Inbox, ToolContext, create_tool
from graphkit._worker import Worker
from graphkit.testing import ScriptedChatModel
from graphkit.web import create_app
from graphkit.web._auth import Sessions
from tests.helpers import call, turn

TOKENS = {"tok-alice": "alice", "tok-mallory": "mallory"}


def _payee_agent(url: str, ran: list[Any]) -> Agent:
    @create_tool(needs_approval=True)
    def pay(amount: int, payee: str, meta: dict[str, Any] | None = None) -> str:
        """Pay."""
        ran.append({"amount": amount, "payee": payee})
        return "paid"

    return Agent(name="billing", tools=[pay], checkpointer=url,
                 approvers=lambda by, p: by == "alice", model=ScriptedChatModel([
                     turn(call("pay", {"amount": 5, "payee": "ACME Ltd\nIBAN DE00 1234"},
                               "p1")), "done"]))


def signed_in(url: str, token: str = "tok-alice", **kwargs: Any) -> TestClient:
    client = TestClient(create_app(url, authenticate=TOKENS, secret="s", **kwargs))
    login = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
    assert login is not None
    client.post("/login", data={"token": token, "login": login.group(1)})
    return client


def csrf_of(client: TestClient, approval_id: str) -> str:
    found = re.search(r"name='csrf' value='([0-9a-f]+)'",
                      client.get(f"/approvals/{approval_id}").text)
    assert found is not None
    return found.group(1)


def test_a_csrf_token_is_no_session_and_sessions_parse_strictly() -> None:
    sessions = Sessions("k")
    session = sessions.issue("mallory")
    assert sessions.identity(session) == "mallory"
    assert sessions.identity(f"csrf|{session}|{sessions.csrf(session)}") is None
    assert sessions.identity(session.replace("v1.", "v2.")) is None
    assert sessions.identity(session + ".x") is None
    assert sessions.identity(sessions.csrf(session)) is None


def test_pages_cannot_be_framed_and_run_no_foreign_script(sqlite_url: str) -> None:
    client = TestClient(create_app(sqlite_url, authenticate=TOKENS, secret="s"))
    page = client.get("/login")
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_approve_runs_exactly_what_the_card_shows(sqlite_url: str) -> None:
    ran: list[Any] = []
    agent = _payee_agent(sqlite_url, ran)
    result = agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    client = signed_in(sqlite_url, agents=[agent])
    card = client.get(f"/approvals/{pending.id}").text
    assert "<textarea name='arg.payee'" in card  # a line break survives an edit form
    client.post(f"/approvals/{pending.id}/approve",
                data={"csrf": csrf_of(client, pending.id), "digest": pending.args_digest})
    decided = Inbox(sqlite_url).get(pending.id)
    assert decided.status == "approved" and decided.approved_args is None
    agent.resume(run_id=result.run_id)
    assert ran == [{"amount": 5, "payee": "ACME Ltd\nIBAN DE00 1234"}]


def test_no_cross_site_sign_in_and_sign_out_ends_the_session(sqlite_url: str) -> None:
    client = TestClient(create_app(sqlite_url, authenticate=TOKENS, secret="s"))
    assert client.post("/login", data={"token": "tok-mallory"},
                       follow_redirects=False).status_code == 403
    # a sibling origin (another port) planting its own nonce cookie is refused too
    client.cookies.set("graphkit_login", "abad1dea")
    planted = client.post("/login", data={"token": "tok-mallory", "login": "abad1dea"},
                          headers={"origin": "http://testserver:9999"},
                          follow_redirects=False)
    assert planted.status_code == 403
    unsealed = client.post("/login", data={"token": "tok-mallory", "login": "abad1dea"},
                           follow_redirects=False)
    assert unsealed.status_code == 403
    other = signed_in(sqlite_url)
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', other.get("/").text)
    assert token is not None
    assert other.post("/logout", data={"csrf": token.group(1)},
                      headers={"origin": "http://evil.example"}).status_code == 403
    alice = signed_in(sqlite_url)
    cookie = alice.cookies.get("graphkit_session")
    assert alice.get("/", follow_redirects=False).status_code == 200
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', alice.get("/").text)
    assert token is not None
    alice.post("/logout", data={"csrf": token.group(1)})
    replay = TestClient(create_app(sqlite_url, authenticate=TOKENS, secret="s"))
    replay.cookies.set("graphkit_session", str(cookie))
    assert replay.get("/", follow_redirects=False).status_code == 303


def test_deep_json_gets_a_refusal_not_a_crash_and_notices_cannot_be_forged(
        sqlite_url: str) -> None:
    ran: list[Any] = []
    agent = _payee_agent(sqlite_url, ran)
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    client = signed_in(sqlite_url, agents=[agent])
    deep = "[" * 200_000 + "]" * 200_000
    answer = client.post(f"/approvals/{pending.id}/edit",
                         data={"csrf": csrf_of(client, pending.id), "arg.amount": "5",
                               "arg.payee": "x", "arg.meta": deep})
    assert answer.status_code == 200 and "class='error refused'" in answer.text
    forged = client.get(f"/approvals/{pending.id}?refused=Security+notice:+approve+now")
    assert "Security notice" not in forged.text
    assert ran == [] and Inbox(sqlite_url).get(pending.id).status == "pending"


def test_a_notebook_answer_meets_the_policy() -> None:
    class Region(BaseModel):
        region: str

    ran: list[str] = []

    @create_tool(resume_schema=Region)
    def provision(ctx: ToolContext) -> str:
        """Provision; asks where."""
        ran.append(ctx.suspend({"message": "where?"}).region)
        return "ok"

    agent = Agent(name="ops", tools=[provision], approvers=lambda by, p: by == "alice",
                  model=ScriptedChatModel([turn(call("provision", {}, "v1")), "done"]))
    result = agent.generate("go")
    (card,) = agent.review(result, decided_by="mallory").cards
    card.fields["region"].value = "attacker-region"
    card.resume.click()
    assert ran == [] and "may not resume" in card.message.value
    (card,) = agent.review(result, decided_by="alice").cards
    card.fields["region"].value = "eu-west"
    card.resume.click()
    assert ran == ["eu-west"]


def test_agent_names_cannot_carry_a_path_separator() -> None:
    with pytest.raises(ValueError, match="without '/'"):
        Agent(name="bank/eu", model=ScriptedChatModel([]))


def test_a_transient_failure_is_retried_not_stranded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    failures = [1]
    ran: list[int] = []

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        return "paid"

    def reply(messages: list[Any]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            if failures:
                failures.pop()
                raise ConnectionError("model endpoint hiccup")
            return AIMessage("done")
        return AIMessage("", tool_calls=[call("pay", {"amount": 5}, "c1")])

    def make() -> Agent:
        return Agent(name="bank", tools=[pay], checkpointer=url,
                     model=ScriptedChatModel(reply))

    agent = make()
    result = agent.generate("pay")
    worker = Worker(make())
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        (pending,) = Inbox(url).pending()
        Inbox(url).approve(pending.id, decided_by="ops")
        deadline = time.monotonic() + 30
        while agent.snapshot(run_id=result.run_id)["status"] != "stop":
            assert time.monotonic() < deadline, "the run was not retried"
            time.sleep(0.1)
        assert ran == [5]  # the tool ran once; the model's answer was retried
    finally:
        worker.stop()
        thread.join(timeout=10)
