"""The web inbox, the notebook widgets and the worker refuse what a hostile page or client
tries: a CSRF token passed off as a session, framing, an Approve
that silently edited, a cross-site sign-in, a session replayed after sign-out, deep JSON
crashing a page, a notebook answer skipping the policy, agent names with '/', a transient
failure stranding a run, and forged notices."""

from __future__ import annotations

import html
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from pydantic import BaseModel, SecretStr
from starlette.testclient import TestClient

from graphkit import Agent, ApprovalsPendingError, Inbox, ToolContext, create_tool
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
    known = {sessions.credential("tok-mallory"): "mallory"}
    session = sessions.issue("mallory", sessions.credential("tok-mallory"))
    assert sessions.identity(session, known) == "mallory"
    assert sessions.identity(f"csrf|{session}|{sessions.csrf(session)}", known) is None
    assert sessions.identity(session.replace("v2.", "v3."), known) is None
    assert sessions.identity(session + ".x", known) is None
    assert sessions.identity(sessions.csrf(session), known) is None
    # the credential is signed with the rest: a session cannot be moved to another token
    forged = session.replace(sessions.credential("tok-mallory"), sessions.credential("tok-a"))
    assert sessions.identity(forged, {**known, sessions.credential("tok-a"): "mallory"}) is None


def test_a_session_ends_with_the_token_it_was_opened_with(sqlite_url: str) -> None:
    """Taking a reviewer's token out of the mapping (off-boarding, a leaked token replaced)
    ends their sessions at once, in every process sharing the secret; a session lived out its
    eight hours, and an off-boarded reviewer approved a payment with it (helper-65)."""
    ran: list[Any] = []
    agent = _payee_agent(sqlite_url, ran)
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    alice = signed_in(sqlite_url, agents=[agent])
    cookie = str(alice.cookies.get("graphkit_session"))
    csrf = csrf_of(alice, pending.id)
    for tokens in ({"tok-mallory": "mallory"},  # alice off-boarded
                   {"tok-alice-2": "alice", "tok-mallory": "mallory"},  # her token replaced
                   {"tok-alice": "mallory"}):  # her old token now names someone else
        later = TestClient(create_app(sqlite_url, authenticate=tokens, secret="s",
                                      agents=[agent]))
        later.cookies.set("graphkit_session", cookie)
        assert later.get("/", follow_redirects=False).status_code == 303  # to sign in
        answer = later.post(f"/approvals/{pending.id}/approve", follow_redirects=False,
                            data={"csrf": csrf, "digest": pending.args_digest})
        assert answer.status_code == 401
    assert Inbox(sqlite_url).get(pending.id).status == "pending"
    same = TestClient(create_app(sqlite_url, authenticate=TOKENS, secret="s", agents=[agent]))
    same.cookies.set("graphkit_session", cookie)  # the token is still hers: still signed in
    assert same.get("/", follow_redirects=False).status_code == 200


def test_a_companys_authenticator_answers_every_request_whatever_cookie_is_sent(
        sqlite_url: str) -> None:
    """Under a company's own login (a callable), a session cookie from sign-ins with tokens
    under the same secret spoke over the authenticator: a request the proxy said was alice's
    was served as mallory (helper-65)."""
    old = signed_in(sqlite_url, token="tok-mallory")
    cookie = str(old.cookies.get("graphkit_session"))
    proxied = TestClient(create_app(
        sqlite_url, secret="s", authenticate=lambda r: r.headers.get("x-user") or None))
    proxied.cookies.set("graphkit_session", cookie)
    assert "alice" in proxied.get("/", headers={"x-user": "alice"}).text
    assert "mallory" not in proxied.get("/", headers={"x-user": "alice"}).text
    assert proxied.get("/", follow_redirects=False).status_code == 303  # no header: nobody


def test_a_csrf_token_lapses_under_a_companys_authenticator_too(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a company's authenticator the session is the identity alone: a CSRF token bound
    to nothing else (one leaked from a page, a log, a proxy) stayed good for that reviewer
    for as long as the secret (helper-120). A token is good for the window its page was
    served in and the next one; then it is refused, and a fresh page's works."""
    ran: list[Any] = []
    agent = _payee_agent(sqlite_url, ran)
    pending = agent.generate("pay").pending_approvals[0]
    client = TestClient(create_app(
        sqlite_url, secret="s", agents=[agent],
        authenticate=lambda r: r.headers.get("x-user") or None), headers={"x-user": "alice"})
    old = csrf_of(client, pending.id)
    later = time.time() + 2 * 8 * 3600
    monkeypatch.setattr("graphkit.web._auth.time.time", lambda: later)
    refused = client.post(f"/approvals/{pending.id}/approve", follow_redirects=False,
                          data={"csrf": old, "digest": pending.args_digest})
    assert refused.status_code == 403 and "expired" in refused.text
    assert Inbox(sqlite_url).get(pending.id).status == "pending"
    fresh = csrf_of(client, pending.id)
    assert fresh != old
    assert client.post(f"/approvals/{pending.id}/approve", follow_redirects=False,
                       data={"csrf": fresh, "digest": pending.args_digest}).status_code == 303
    assert Inbox(sqlite_url).get(pending.id).status == "approved"


def test_pages_cannot_be_framed_and_run_no_foreign_script(sqlite_url: str) -> None:
    client = TestClient(create_app(sqlite_url, authenticate=TOKENS, secret="s"))
    page = client.get("/login")
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_over_https_cookies_are_secure_and_the_browser_is_told_to_stay_there(
        sqlite_url: str, scheme: str) -> None:
    """Over https (as a proxy that terminates TLS tells uvicorn with `--proxy-headers`), the
    session and sign-in cookies are `Secure` and the answer carries HSTS: a network attacker
    could make the browser send the session over plain http to the same host (helper-65)."""
    client = TestClient(create_app(sqlite_url, authenticate=TOKENS, secret="s"),
                        base_url=f"{scheme}://inbox.example")
    page = client.get("/login")
    login = re.search(r"name='login' value='([0-9a-f]+)'", page.text)
    assert login is not None
    signed = client.post("/login", data={"token": "tok-alice", "login": login.group(1)},
                         follow_redirects=False)
    cookies = [page.headers["set-cookie"], signed.headers["set-cookie"]]
    assert all(("; secure" in c.lower()) == (scheme == "https") for c in cookies)
    assert ("strict-transport-security" in page.headers) == (scheme == "https")


def test_wrong_tokens_from_one_client_stop_its_sign_ins_for_a_while(sqlite_url: str) -> None:
    """A token could be guessed at the speed of the network: one sign-in form took 201
    guesses in 0.66 s and found it (helper-65). Ten wrong tokens from a client refuse its
    sign-ins, the right token too, for a minute; other clients sign in as before."""
    app = create_app(sqlite_url, authenticate=TOKENS, secret="s")

    def sign_in(client: TestClient, token: str) -> int:
        login = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
        assert login is not None
        return client.post("/login", data={"token": token, "login": login.group(1)},
                           follow_redirects=False).status_code

    guesser = TestClient(app, client=("203.0.113.9", 4000))
    assert [sign_in(guesser, f"tok-{n}") for n in range(10)] == [303] * 10  # to the form
    assert sign_in(guesser, "tok-alice") == 429
    assert "graphkit_session" not in guesser.cookies
    other = TestClient(app, client=("198.51.100.7", 4000))
    assert sign_in(other, "tok-alice") == 303 and "graphkit_session" in other.cookies


def test_a_form_is_read_no_further_than_its_bound(sqlite_url: str) -> None:
    """An anonymous 64 MB sign-in was read and parsed whole before it was refused (the
    process grew by 300 MB: helper-78). A sign-in reads 64 KiB at most, a decision's form
    what an edit of the largest value takes; past that, 413 and nothing decided."""
    from graphkit.web import FORM_BYTES, SIGN_IN_BYTES

    ran: list[Any] = []
    agent = _payee_agent(sqlite_url, ran)
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    anonymous = TestClient(create_app(sqlite_url, authenticate=TOKENS, secret="s"))
    big = "token=" + "x" * SIGN_IN_BYTES
    told = anonymous.post("/login", content=big, headers={
        "content-type": "application/x-www-form-urlencoded"})
    assert told.status_code == 413

    def chunks() -> Any:  # (no length declared: read as it comes)
        yield b"token=" + b"x" * (SIGN_IN_BYTES // 2)
        yield b"x" * SIGN_IN_BYTES

    assert anonymous.post("/login", content=chunks(), headers={
        "content-type": "application/x-www-form-urlencoded"}).status_code == 413
    alice = signed_in(sqlite_url, agents=[agent])
    csrf = csrf_of(alice, pending.id)
    told = alice.post(f"/approvals/{pending.id}/approve", follow_redirects=False,
                      content=f"csrf={csrf}&digest={pending.args_digest}&pad="
                      + "x" * FORM_BYTES,
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert told.status_code == 413
    assert Inbox(sqlite_url).get(pending.id).status == "pending" and ran == []
    assert alice.post(f"/approvals/{pending.id}/approve", follow_redirects=False, data={
        "csrf": csrf, "digest": pending.args_digest}).status_code == 303
    assert Inbox(sqlite_url).get(pending.id).status == "approved"


def test_an_inbox_without_tokens_says_so_at_sign_in(sqlite_url: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With no `GRAPHKIT_TOKENS`, nobody can sign in, and the page only said "That token is
    not known" (helper-80)."""
    monkeypatch.delenv("GRAPHKIT_TOKENS", raising=False)
    page = TestClient(create_app(sqlite_url, secret="s")).get("/login").text
    assert "No reviewer tokens are set up" in page and "GRAPHKIT_TOKENS" in page
    assert "No reviewer tokens" not in TestClient(create_app(
        sqlite_url, authenticate=TOKENS, secret="s")).get("/login").text


def test_a_cards_thread_audit_link_reaches_any_thread_id(sqlite_url: str) -> None:
    """A thread id is the client's text; one with `/`, `?` or `#` made the card's link to the
    thread's audit lead elsewhere (helper-65)."""
    ran: list[Any] = []
    agent = _payee_agent(sqlite_url, ran)
    thread_id = "ops/2026?q=1#x y"
    agent.generate("pay", thread_id=thread_id)
    (pending,) = Inbox(sqlite_url).pending()
    client = signed_in(sqlite_url, agents=[agent])
    link = re.search(r"<a href='(threads/[^']*)'>thread</a>", client.get(
        f"/approvals/{pending.id}").text)
    assert link is not None
    page = client.get("/" + html.unescape(link.group(1)))
    assert page.status_code == 200 and "<td>requested</td><td>pay</td>" in page.text
    assert f"Audit of thread {html.escape(thread_id, quote=False)}" in page.text


class _Code(BaseModel):
    code: SecretStr


def test_a_secret_field_of_a_form_is_a_password_input(sqlite_url: str) -> None:
    """A secret the page asks for (a one-time code a suspended tool waits on) or shows (a
    secret argument in the edit form) is typed into a password input, never shown as typed
    on the reviewer's screen."""

    @create_tool(resume_schema=_Code)
    def verify(ctx: ToolContext) -> str:
        """Verify."""
        return "ok" if ctx.resume_data is not None else ctx.suspend({"message": "code?"})

    @create_tool(needs_approval=True)
    def call_api(endpoint: str, token: SecretStr) -> str:
        """Call an API."""
        return "ok"

    agent = Agent(name="ops", tools=[verify, call_api], checkpointer=sqlite_url,
                  model=ScriptedChatModel([turn(call("verify", {}, "v1"), call(
                      "call_api", {"endpoint": "/x", "token": "sk-live-51HxQ"}, "c1")),
                      "done"]))
    agent.generate("go")
    client = signed_in(sqlite_url, agents=[agent])
    cards = {p.tool_name: client.get(f"/approvals/{p.id}").text
             for p in Inbox(sqlite_url).pending()}
    assert "<input type='password' name='data.code'" in cards["verify"]
    assert "<input type='password' name='arg.token' value='**********'" in cards["call_api"]
    assert "<input type='text' name='arg.endpoint'" in cards["call_api"]


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


def test_a_decision_without_the_cards_digest_is_refused(sqlite_url: str) -> None:
    """The card's form binds an approval or an edit to the digest of the arguments it
    showed; a POST without one is refused, not taken as approving whatever waits now
    (helper-50)."""
    ran: list[Any] = []
    agent = _payee_agent(sqlite_url, ran)
    result = agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    client = signed_in(sqlite_url, agents=[agent])
    for action, extra in (("approve", {}), ("edit", {"arg.amount": "1", "arg.payee": "x"})):
        answer = client.post(f"/approvals/{pending.id}/{action}",
                             data={"csrf": csrf_of(client, pending.id), **extra},
                             follow_redirects=False)
        assert "ArgsDigestMismatchError" in answer.headers["location"]
    assert Inbox(sqlite_url).get(pending.id).status == "pending" and ran == []
    with pytest.raises(ApprovalsPendingError):
        agent.resume(run_id=result.run_id)


@pytest.mark.parametrize("identity", ["", "   ", None])
def test_a_blank_identity_is_nobody_signed_in(sqlite_url: str, identity: str | None) -> None:
    """An authenticator (or a token) that names nobody signs nobody in: no page, no
    decision. A blank identity was a reviewer, and its approval ran audited as by nobody
    (helper-50)."""
    ran: list[Any] = []

    @create_tool(needs_approval=True)
    def wipe(path: str) -> str:
        """Delete."""
        ran.append(path)
        return "gone"

    agent = Agent(name="ops", tools=[wipe], checkpointer=sqlite_url,
                  model=ScriptedChatModel([turn(call("wipe", {"path": "/tmp/x"}, "w1")), "ok"]))
    agent.generate("wipe")
    (pending,) = Inbox(sqlite_url).pending()
    client = TestClient(create_app(sqlite_url, authenticate=lambda request: identity,
                                   agents=[agent], secret="s"))
    assert client.get("/", follow_redirects=False).status_code == 303
    assert client.get(f"/approvals/{pending.id}", follow_redirects=False).status_code == 303
    assert client.post(f"/approvals/{pending.id}/approve",
                       data={"digest": pending.args_digest}).status_code == 401
    if identity is not None:  # a token whose reviewer is blank signs nobody in either
        tokens = TestClient(create_app(sqlite_url, authenticate={"tok-x": identity},
                                       secret="s"))
        login = re.search(r"name='login' value='([0-9a-f]+)'", tokens.get("/login").text)
        assert login is not None
        signed = tokens.post("/login", data={"token": "tok-x", "login": login.group(1)},
                             follow_redirects=False)
        assert signed.headers["location"].endswith("login?error=1")
    assert Inbox(sqlite_url).get(pending.id).status == "pending" and ran == []


def test_an_authenticator_that_returns_no_text_fails_closed(sqlite_url: str) -> None:
    client = TestClient(create_app(sqlite_url, authenticate=lambda request: 123, secret="s"),
                        raise_server_exceptions=False)
    assert client.get("/").status_code == 500


def test_live_updates_end_when_the_session_does(sqlite_url: str) -> None:
    """The pending list's event stream checks its reviewer on every update, not only when it
    opens: after sign-out it ends, and tells nothing of what is asked later (helper-50)."""
    import httpx
    import uvicorn

    from tests.test_web import _free_port

    ran: list[Any] = []
    agent = _payee_agent(sqlite_url, ran)
    agent.generate("pay")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(
        create_app(sqlite_url, authenticate=TOKENS, agents=[agent], secret="s"),
        host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    try:
        alice = httpx.Client(base_url=base, follow_redirects=False, timeout=30)
        login = re.search(r"name='login' value='([0-9a-f]+)'", alice.get("/login").text)
        assert login is not None
        alice.post("/login", data={"token": "tok-alice", "login": login.group(1)})
        said: list[str] = []
        ended = threading.Event()

        def listen() -> None:
            cookies = {"graphkit_session": str(alice.cookies.get("graphkit_session"))}
            with httpx.Client(base_url=base, timeout=30, cookies=cookies) as stream_client, \
                    stream_client.stream("GET", "/events") as stream:
                said.extend(line for line in stream.iter_lines() if line.startswith("data:"))
            ended.set()

        threading.Thread(target=listen, daemon=True).start()
        while not said:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', alice.get("/").text)
        assert token is not None
        alice.post("/logout", data={"csrf": token.group(1)})
        assert ended.wait(10), "the stream went on after sign-out"
        assert len(said) == 1
    finally:
        server.should_exit = True


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


def test_a_signed_out_session_stays_out_on_a_web_process_whose_clock_lags(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cookie's expiry is judged by the clock of the web process that reads it; a signed-out
    session was forgotten by the database's clock as soon as that expiry passed there, so a
    process whose clock lagged took the cookie back after sign-out (helper-58). Signed-out
    sessions are remembered a day past their expiry."""
    from graphkit._storage import open_storage
    from graphkit.web import _auth

    ledger = open_storage(sqlite_url).ledger
    real = time.time
    monkeypatch.setattr(_auth, "SESSION_SECONDS", 60)
    monkeypatch.setattr(time, "time", lambda: real() - 90)  # this process lags the database
    sessions = Sessions("s", ended=ledger.session_ended)
    cookie = sessions.issue("alice", sessions.credential("tok-alice"))
    parsed = sessions.parse(cookie)
    assert parsed is not None
    ledger.end_session(parsed[1], parsed[2])  # alice signs out
    ledger.end_session("someone-else", real() + 60)  # a later sign-out tidies up
    assert sessions.parse(cookie) is None


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
                               "arg.payee": "x", "arg.meta": deep,
                               "digest": pending.args_digest})
    assert answer.status_code == 200 and "class='error refused'" in answer.text
    # a typed refusal naming the field, never a builtin error (helper-106: `RecursionError`,
    # and `ValueError: invalid literal for int()` for an amount of 1e3)
    assert "InvalidApprovedArgsError: field &#x27;meta&#x27;" in answer.text
    for amount in ("1e3", "0x10", "7.5"):
        answer = client.post(f"/approvals/{pending.id}/edit",
                             data={"csrf": csrf_of(client, pending.id), "arg.amount": amount,
                                   "arg.payee": "x", "digest": pending.args_digest})
        assert ("InvalidApprovedArgsError: field &#x27;amount&#x27; does not hold a valid "
                "integer") in answer.text
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
