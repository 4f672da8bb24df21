"""Secret arguments are masked in every view and channel, while the tool receives the real
value and the digest covers it (`graphkit._secrets`)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import traceback
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from langgraph.errors import NodeCancelledError
from langgraph.types import Command
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    Secret,
    SecretStr,
    field_validator,
    model_validator,
)
from starlette.testclient import TestClient

from graphkit import Agent, Inbox, ToolContext, Webhook, _html, create_tool
from graphkit._secrets import salted_digest, still_shows
from graphkit.cli import main
from graphkit.errors import WithheldToolError
from graphkit.testing import ScriptedChatModel
from graphkit.types import args_digest
from graphkit.web import create_app
from tests.helpers import call, ledger_plan, turn

KEY = "sk-live-51HxQ"
MASK = "**********"


def _agent(url: str, used: list[str], *, or_text: bool = False) -> Agent:
    @create_tool(needs_approval=True, approval_prompt="Charge {{amount}}?")
    def charge(amount: int, api_key: SecretStr) -> str:
        """Charge a card with the payment provider's key."""
        used.append(api_key.get_secret_value())
        return f"charged {amount}"

    @create_tool(name="charge", needs_approval=True, approval_prompt="Charge {{amount}}?")
    def charge_with_key_or_text(amount: int, api_key: str | SecretStr) -> str:
        """Charge a card with the payment provider's key."""
        used.append(api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key)
        return f"charged {amount}"

    if or_text:  # pydantic reads a string as `str` here: the field is still declared secret
        charge = charge_with_key_or_text

    return Agent(name="billing", tools=[charge], checkpointer=url,
                 notify=[Webhook("http://127.0.0.1:9/hooks", secret="s")],
                 model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                     call("charge", {"amount": 25, "api_key": KEY}, f"c{len(m)}"))))


@pytest.mark.parametrize("or_text", [False, True], ids=["SecretStr", "str_or_SecretStr"])
def test_a_secret_argument_is_masked_everywhere_and_reaches_the_tool(tmp_path: Path,
                                                                     or_text: bool) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    used: list[str] = []
    agent = _agent(url, used, or_text=or_text)
    first = agent.generate("charge it")
    (pending,) = first.pending_approvals
    seen: dict[str, str] = {}
    # the API's pending approval, and the interrupt value every LangGraph client reads
    assert pending.args == {"amount": 25, "api_key": MASK}
    # it covers the real key, under the call's salt (kept in the ledger's record only)
    record = agent._storage.ledger.record(pending.id)
    assert record is not None and pending.args_digest == salted_digest(
        {"amount": 25, "api_key": KEY}, record["metadata"]["digest_salt"])
    assert pending.args_digest != args_digest({"amount": 25, "api_key": KEY})
    cfg = {"configurable": {"thread_id": first.thread_id}}
    seen["interrupt"] = json.dumps([i.value for i in agent.graph.get_state(cfg).interrupts])
    # the inbox, the CLI, the notebook's card, the web card
    seen["inbox"] = json.dumps([p.to_dict() for p in Inbox(url).pending()])
    printed: list[str] = []
    main(["show", pending.id, "--db", url], out=printed.append)
    main(["inbox", "--db", url, "--json"], out=printed.append)
    seen["cli"] = "\n".join(printed)
    seen["notebook"] = _html.card(pending)
    client = TestClient(create_app(url, authenticate={"t": "cfo"}, agents=[agent]))
    nonce = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
    assert nonce is not None
    client.post("/login", data={"token": "t", "login": nonce.group(1)})
    seen["web"] = client.get(f"/approvals/{pending.id}").text
    # decided and run; then a stream's chunks; the audit, the webhooks' outbox
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    second = agent.stream("and again", thread_id=first.thread_id)
    seen["stream"] = json.dumps([c.payload for c in second], default=str)
    seen["audit"] = json.dumps(Inbox(url).audit(thread_id=first.thread_id))
    rows = agent._storage.ledger._sql.query("SELECT payload FROM graphkit_outbox")
    seen["webhooks"] = "\n".join(str(r[0]) for r in rows)
    assert rows
    for where, text in seen.items():
        assert KEY not in text, f"the secret is shown in {where}"
    assert MASK in seen["interrupt"] and MASK in seen["web"]
    assert used == [KEY]  # the tool got the real value


def test_a_refused_edit_never_echoes_a_secret(tmp_path: Path) -> None:
    """An edit that keeps the masked key (so the real one is put back) but makes another
    field invalid is refused with where and why, never the values: not in the error, the
    audit's refusal, or the web inbox's refusal notice."""
    import pytest

    from graphkit.errors import GraphkitError

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = _agent(url, [])
    first = agent.generate("charge it")
    (pending,) = first.pending_approvals
    with pytest.raises(GraphkitError) as refused:
        agent.approve_tool_call(run_id=first.run_id, decided_by="cfo",
                                args={**pending.args, "amount": "lots"})
    assert KEY not in str(refused.value) and "amount" in str(refused.value)
    with pytest.raises(GraphkitError) as again:
        Inbox(url, agents=[agent]).approve(pending.id, decided_by="cfo",
                                           args={**pending.args, "amount": "lots"})
    assert KEY not in str(again.value)
    client = TestClient(create_app(url, authenticate={"t": "cfo"}, agents=[agent]))
    nonce = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
    assert nonce is not None
    client.post("/login", data={"token": "t", "login": nonce.group(1)})
    card = client.get(f"/approvals/{pending.id}").text
    csrf = re.search(r"name='csrf' value='([^']+)'", card)
    assert csrf is not None
    answer = client.post(f"/approvals/{pending.id}/edit", follow_redirects=False, data={
        "csrf": csrf.group(1), "arg.amount": "lots", "arg.api_key": MASK})
    assert KEY not in answer.headers.get("location", "")
    assert KEY not in json.dumps(Inbox(url).audit(thread_id=first.thread_id))


class _Cents(BaseModel):
    token: SecretStr
    amount: int

    @field_validator("amount")
    @classmethod
    def cents(cls, value: int) -> int:  # dollars to cents, each time it is read (a bug)
        return value * 100 if value < 1_000 else value


class _Capped(BaseModel):
    amount: int
    token: SecretStr | None = None

    @model_validator(mode="after")
    def capped(self) -> _Capped:  # (a validator that says the value it refuses)
        if self.token is not None and self.amount > 100:
            raise ValueError(f"token {self.token.get_secret_value()} may not pay {self.amount}")
        return self


@pytest.mark.parametrize("refusal", ["a validator's", "the approvers policy's error",
                                     "an edit's own new secret",
                                     "a validator's, of a secret the model left out",
                                     "a policy's error of the secret upper-cased"])
def test_a_refusal_never_shows_a_secret_whatever_made_its_message(sqlite_url: str,
                                                                  refusal: str) -> None:
    """A refusal quoted the call's secret: a validator that changes its value each time it
    is read was refused with the arguments revealed, and an approvers policy that raised
    `KeyError(account)` was quoted whole, to a reviewer allowed to view only, in the error,
    the audit, the web notice and the next interrupt (helper-78); then a secret an edit typed
    where the model's call gave none, and a policy's error holding the secret in another form
    (helper-79). Every refusal of a decision is scrubbed of the call's secrets and of those
    the edit typed where the tool declares secrets, and a policy's error is named by its
    kind only."""
    from graphkit.errors import GraphkitError

    secret, typed = "sk-live-4242-abcdef", "sk-new-7777-typed"
    left_out = "left out" in refusal

    def policy(who: str, pending: Any) -> bool:
        token = pending.args["token"]
        token = token.get_secret_value() if hasattr(token, "get_secret_value") else token
        if "upper-cased" in refusal:
            token = token.upper()
        return who in {"sk-known-1": {"cfo"}}[token]  # (a KeyError quotes the key)

    tool = create_tool(lambda token=None, amount=0: "paid", name="pay", description="Pay.",
                       args_schema=_Capped if left_out else _Cents, needs_approval=True)
    agent = Agent(name="a", tools=[tool], checkpointer=sqlite_url,
                  approvers=policy if "policy" in refusal else None,
                  model=ScriptedChatModel([turn(call("pay", {"amount": 5_000} if left_out else {
                      "token": secret, "amount": 5_000}, "p1")), "done"]))
    first = agent.generate("pay")
    (pending,) = first.pending_approvals
    edit = {**pending.args, "amount": 5, **({"token": typed} if "edit's" in refusal else {})}
    if left_out:
        edit = {"amount": 500, "token": typed}
    with pytest.raises(GraphkitError) as refused:
        if "policy" in refusal:
            Inbox(sqlite_url, agents=[agent]).approve(pending.id, decided_by="cfo")
        else:
            agent.approve_tool_call(run_id=first.run_id, decided_by="cfo", args=edit)
    said = json.dumps([str(refused.value), Inbox(sqlite_url).audit(thread_id=first.thread_id),
                       traceback.format_exception(refused.value)])
    assert "refused" in said and "may not pay" in said if left_out else "refused" in said
    for shown in (secret, typed, secret.upper()):
        assert shown not in said
    assert [p.status for p in agent.pending_approvals(run_id=first.run_id)] == ["pending"]


def test_an_edit_that_adds_a_secret_shows_it_masked() -> None:
    """An edit may add secrets of its own (another element of a list of secrets): the views
    of the approved arguments mask them too, and the tool gets them."""
    used: list[list[str]] = []

    @create_tool(needs_approval=True)
    def rotate(keys: list[SecretStr]) -> str:
        """Rotate the keys."""
        used.append([k.get_secret_value() for k in keys])
        return "rotated"

    agent = Agent(name="ops", tools=[rotate], model=ScriptedChatModel(
        [turn(call("rotate", {"keys": [KEY]}, "c1")), "done"]))
    first = agent.generate("rotate")
    stream = agent.approve_tool_call(run_id=first.run_id, decided_by="cfo",
                                     args={"keys": [MASK, "sk-new-9Zq"]})
    decided = agent.pending_approvals(run_id=first.run_id)
    chunks = json.dumps([c.payload for c in stream], default=str)
    assert used == [[KEY, "sk-new-9Zq"]]
    audit = json.dumps(agent._storage.ledger.read_audit(thread_id=first.thread_id))
    for text in (json.dumps([p.to_dict() for p in decided]), chunks, audit):
        assert "sk-new-9Zq" not in text and KEY not in text
    edited = next(e for e in agent._storage.ledger.read_audit(thread_id=first.thread_id)
                  if e["event"] == "edited")
    assert edited["args_after"] == {"keys": [MASK, MASK]}
    # the conversation keeps the edited call as it runs, its secrets masked too
    state = agent.graph.get_state({"configurable": {"thread_id": first.thread_id}}).values
    calls = [c for m in state["messages"] for c in getattr(m, "tool_calls", [])]
    assert calls and all(c["args"] == {"keys": [MASK, MASK]} for c in calls), calls


def test_a_result_and_a_snapshot_show_the_models_call_masked() -> None:
    """The model's own message holds the secret it sent; a notebook's view of the result and
    the run's JSON snapshot show its call masked (the message records where its secrets are,
    in metadata no provider is sent)."""
    used: list[str] = []
    agent = _agent("memory", used)
    first = agent.generate("charge it")
    assert KEY not in _html.result(first)
    assert KEY not in json.dumps(agent.snapshot(run_id=first.run_id), default=str)
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert used == [KEY]  # the tool still got it


def test_a_short_secret_cannot_be_found_from_the_digest_a_view_shows(tmp_path: Path) -> None:
    """A 4-digit PIN passed as `SecretStr`: every view shows the call's `args_digest`, and
    an unsalted one would give the PIN away to anyone hashing the 10,000 guesses. It is
    salted per call; the salt stays in the ledger; a decision bound to the digest shown still
    runs the call, with the real PIN."""
    from langgraph.types import Command

    used: list[str] = []

    @create_tool(needs_approval=True)
    def unlock(door: str, pin: SecretStr) -> str:
        """Unlock a door."""
        used.append(pin.get_secret_value())
        return "unlocked"

    url = f"sqlite:///{tmp_path / 'pin.db'}"
    agent = Agent(name="doors", tools=[unlock], checkpointer=url, model=ScriptedChatModel(
        [turn(call("unlock", {"door": "vault", "pin": "4821"}, "u1")), "open"]))
    paused = agent.generate("open the vault")
    (pending,) = paused.pending_approvals
    (interrupt,) = agent.graph.get_state({"configurable": {
        "thread_id": paused.thread_id}}).interrupts
    shown = {pending.args_digest, interrupt.value["approvals"][0]["args_digest"],
             Inbox(url).get(pending.id).args_digest}
    assert len(shown) == 1
    guesses = {args_digest({"door": "vault", "pin": f"{n:04d}"}) for n in range(10_000)}
    assert not shown & guesses
    assert "digest_salt" not in json.dumps(interrupt.value)
    assert "digest_salt" not in json.dumps(Inbox(url).get(pending.id).to_dict())
    assert "4821" not in json.dumps(interrupt.value)
    agent.graph.invoke(Command(resume={interrupt.id: {"decisions": [
        {"type": "approve", "args_digest": pending.args_digest}]}}),
        {"configurable": {"thread_id": paused.thread_id}})
    assert used == ["4821"]


def test_the_approval_prompt_is_a_view_too(tmp_path: Path) -> None:
    """A prompt template that names a secret argument, and one that names a long text: the
    prompt every door shows (cards, the interrupt's description, the inbox) has the mask and
    the withheld text's start, never the secret or the whole text."""
    used: list[str] = []

    @create_tool(needs_approval=True,
                 approval_prompt="Deploy {{service}} with token {{token}}?")
    def deploy(service: str, token: SecretStr) -> str:
        """Deploy."""
        used.append(token.get_secret_value())
        return "deployed"

    url = f"sqlite:///{tmp_path / 'p.db'}"
    service = "api-" + "x" * 20_000
    agent = Agent(name="ops", tools=[deploy], checkpointer=url, model=ScriptedChatModel(
        [turn(call("deploy", {"service": service, "token": "tok-live-123"}, "d1")), "ok"]))
    paused = agent.generate("deploy")
    (pending,) = paused.pending_approvals
    (interrupt,) = agent.graph.get_state({"configurable": {
        "thread_id": paused.thread_id}}).interrupts
    for prompt in (pending.prompt, interrupt.value["action_requests"][0]["description"],
                   Inbox(url).get(pending.id).prompt):
        assert prompt is not None and "tok-live-123" not in prompt and "**********" in prompt
        assert len(prompt) < 1_000 and "api-xxx" in prompt
    agent.approve_tool_call_generate(run_id=paused.run_id, decided_by="ops")
    assert used == ["tok-live-123"]


def test_no_checkpoint_holds_a_secret_and_a_copy_without_its_record_never_runs_the_mask(
        tmp_path: Path) -> None:
    """The conversation keeps the model's call with its secret masked (the ledger keeps the
    real value, which the call runs with): no checkpoint or pending write holds it. A thread
    whose state was copied without the ledger's record of the turn refuses the call (the
    model is told to call again) rather than running the mask as the key."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    used: list[str] = []
    agent = _agent(url, used)
    first = agent.generate("charge it")
    values = agent.graph.get_state({"configurable": {"thread_id": first.thread_id}}).values
    assert KEY not in json.dumps([m.model_dump() for m in values["messages"]], default=str)
    # every stream mode a LangGraph client may ask for (the model is not streamed token by
    # token: its reply reaches the "messages" stream as the conversation keeps it)
    streamed = list(agent.graph.stream(
        {"messages": [("user", "charge again")]}, {"configurable": {"thread_id": "streamed"}},
        stream_mode=["messages", "updates", "values", "custom", "debug"]))
    assert any(mode == "messages" for mode, _ in streamed)
    assert KEY not in json.dumps(streamed, default=lambda o: getattr(
        o, "model_dump", lambda: str(o))())
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert used == [KEY]
    db = sqlite3.connect(tmp_path / "runs.db")
    for table in ("checkpoints", "writes"):
        blobs = db.execute(f"SELECT * FROM {table}").fetchall()
        assert blobs and not any(KEY.encode() in bytes(v) for row in blobs for v in row
                                 if isinstance(v, bytes)), f"the secret is in {table}"

    copied = {"configurable": {"thread_id": "a-copy"}}
    agent.graph.update_state(copied, {"messages": values["messages"]}, as_node="model")
    out = agent.graph.invoke(Command(goto="approval_gate"), copied)
    told = [m for m in out["messages"] if m.type == "tool"]
    assert told and "call the tool again" in str(told[-1].content)
    assert used == [KEY]  # nothing ran with the mask


@pytest.mark.parametrize("copy", ["in text", "whole", "a key", "nested in a list",
                                  "an unknown argument", "invalid arguments"])
def test_a_call_that_holds_another_calls_secret_is_refused_and_keeps_none_of_it(
        tmp_path: Path, copy: str) -> None:
    """A model that wrote a call's secret into another call's plain argument (`post_text(
    text="token=<key>")`) had it shown in clear in the checkpoint, the interrupt, the cards
    and the audit (helper-65); masked there instead, a reviewer approved a payment or a shell
    command unseen, and a mask could not hide a key (helper-67). Such a call is refused: the
    model is told why, nothing of it is kept, and the call the secret belongs to waits and
    runs with it."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[tuple[str, Any]] = []

    @create_tool(needs_approval=True)
    def call_api(url: str, token: SecretStr) -> str:
        """Call an API."""
        ran.append(("call_api", token.get_secret_value()))
        return "ok"

    @create_tool(needs_approval=True)
    def post_text(text: str, extra: dict[str, Any] | None = None) -> str:
        """Post text publicly."""
        ran.append(("post_text", text))
        return "posted"

    args = {"in text": {"text": f"rm -rf / # token={KEY}"}, "whole": {"text": KEY},
            "a key": {"text": "hi", "extra": {KEY: 1}},
            "nested in a list": {"text": "hi", "extra": {"k": [["x", f"{KEY}!"]]}},
            # (helper-68: an argument the schema lacks, dropped by validation, was kept in
            # the conversation; a key in invalid arguments reached the error the model reads)
            "an unknown argument": {"text": "hi", "auth": f"Bearer {KEY}"},
            "invalid arguments": {"text": 5, "extra": {KEY: 1}}}[copy]
    agent = Agent(name="api", tools=[call_api, post_text], checkpointer=url,
                  model=ScriptedChatModel([turn(
                      call("call_api", {"url": "https://x", "token": KEY}, "c1"),
                      call("post_text", args, "c2"), text=f"I will use {KEY}"), "done"]))
    first = agent.generate("go")
    state = agent.graph.get_state({"configurable": {"thread_id": first.thread_id}})
    assert KEY not in json.dumps([m.model_dump() for m in state.values["messages"]],
                                 default=str)
    assert KEY not in json.dumps([i.value for i in state.interrupts], default=str)
    assert [p.tool_name for p in first.pending_approvals] == ["call_api"]
    assert KEY not in json.dumps([p.to_dict() for p in first.pending_approvals])
    told = [m for m in state.values["messages"] if m.type == "tool"]
    assert [m.tool_call_id for m in told] == ["c2"] and "a secret that" in str(told[0].content)
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert ran == [("call_api", KEY)]
    assert KEY not in json.dumps(Inbox(url).audit(), default=str)
    db = sqlite3.connect(tmp_path / "runs.db")
    for table in ("checkpoints", "writes"):
        blobs = db.execute(f"SELECT * FROM {table}").fetchall()
        assert not any(KEY.encode() in bytes(v) for row in blobs for v in row
                       if isinstance(v, bytes)), f"the secret is in {table}"


def test_a_declaring_call_refused_for_its_id_still_keeps_its_secret_from_the_others() -> None:
    """Two calls with one id (or none) were left out of the reply's secrets, and a third
    call that held the secret was shown in clear everywhere (helper-68)."""

    @create_tool(needs_approval=True)
    def call_api(url: str, token: SecretStr) -> str:
        """Call an API."""
        return "ok"

    @create_tool(needs_approval=True)
    def post_text(text: str) -> str:
        """Post text publicly."""
        return "posted"

    agent = Agent(name="api", tools=[call_api, post_text], model=ScriptedChatModel([turn(
        call("call_api", {"url": "x", "token": KEY}, "c1"),
        call("call_api", {"url": "y", "token": KEY}, "c1"),
        call("post_text", {"text": f"token={KEY}"}, "c2")), "done"]))
    result = agent.generate("go")
    state = agent.graph.get_state({"configurable": {"thread_id": result.thread_id}})
    assert KEY not in json.dumps([m.model_dump() for m in state.values["messages"]],
                                 default=str)
    assert result.pending_approvals == []


@pytest.mark.parametrize("pin", ["42", "4200", "2024"])
def test_a_short_secret_or_a_number_never_refuses_another_call(pin: str) -> None:
    """A PIN of 42, 4200 or 2024 is masked where it is the PIN; a payment of that amount (a
    number, or text as a Decimal is written) or an invoice of that year in the same reply is
    shown and asked for (a coincidence as likely as a copy; helper-68)."""

    @create_tool(needs_approval=True)
    def unlock(pin: SecretStr) -> str:
        """Unlock."""
        return "open"

    @create_tool(needs_approval=True)
    def pay(amount: int, total: Decimal, memo: str) -> str:
        """Pay."""
        return "paid"

    asked = {"amount": int(pin), "total": pin, "memo": f"invoice {pin}-06-01"}
    agent = Agent(name="vault", tools=[unlock, pay], model=ScriptedChatModel([turn(
        call("unlock", {"pin": pin}, "u1"), call("pay", asked, "p1")), "done"]))
    shown = {p.tool_name: p.args for p in agent.generate("go").pending_approvals}
    assert shown == {"unlock": {"pin": "**********"}, "pay": asked}


@pytest.mark.parametrize("copy", ["as text", "as a number", "of a Secret[int]"])
def test_a_card_number_copied_into_another_call_is_looked_for(copy: str) -> None:
    """A card number read as a number and was never looked for, as text or as a JSON number,
    nor a `Secret[int]`'s: a copy was shown in clear everywhere (helper-69, helper-70)."""

    @create_tool(needs_approval=True)
    def charge(card: SecretStr | None = None, number: Secret[int] | None = None) -> str:
        """Charge."""
        return "charged"

    @create_tool(needs_approval=True)
    def record(note: str, reference: int = 0) -> str:
        """Record."""
        return "recorded"

    card = "4111111111111111"
    given = {"number": int(card)} if copy == "of a Secret[int]" else {"card": card}
    copied = {"as a number": {"note": "ok", "reference": int(card)}}.get(
        copy, {"note": f"charged {card}"})
    agent = Agent(name="pay", tools=[charge, record], model=ScriptedChatModel([turn(
        call("charge", given, "c1"), call("record", copied, "c2")), "done"]))
    result = agent.generate("go")
    state = agent.graph.get_state({"configurable": {"thread_id": result.thread_id}})
    assert card not in json.dumps([m.model_dump() for m in state.values["messages"]],
                                  default=str)
    assert [p.tool_name for p in result.pending_approvals] == ["charge"]


class Login(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    host: str
    api_key: SecretStr = Field(alias="apiKey",
                               validation_alias=AliasChoices("apiKey", "api_key", "token"))


@pytest.mark.parametrize("given", ["by name", "by a validation alias"])
def test_a_secret_given_under_another_name_of_its_field_is_masked_and_runs(given: str) -> None:
    """A secret field with an alias, given by its Python name (`populate_by_name`) or one of
    its validation aliases, stayed in clear in the conversation, and was refused as a copy of
    itself (helper-69)."""
    used: list[str] = []

    @create_tool(needs_approval=True, args_schema=Login)
    def login(host: str, api_key: SecretStr) -> str:
        """Log in."""
        used.append(api_key.get_secret_value())
        return "in"

    key_name = "api_key" if given == "by name" else "token"
    agent = Agent(name="ops", tools=[login], model=ScriptedChatModel([turn(call(
        "login", {"host": "h", key_name: KEY}, "l1")), "done"]))
    result = agent.generate("go")
    state = agent.graph.get_state({"configurable": {"thread_id": result.thread_id}})
    assert KEY not in json.dumps([m.model_dump() for m in state.values["messages"]],
                                 default=str)
    agent.approve_tool_call_generate(run_id=result.run_id, decided_by="ops")
    assert used == [KEY]


READ_ONLY = SecretStr("sk-readonly-default")


@pytest.mark.parametrize("door", ["web", "notebook"])
def test_an_edit_that_leaves_a_secret_keeps_the_one_given_not_the_tools_default(
        tmp_path: Path, door: str) -> None:
    """A schema writes a secret's default as the mask, which an untouched secret also shows:
    an edit of another field ran the tool's default secret instead of the one given
    (helper-69)."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    used: list[tuple[str, str]] = []

    @create_tool(needs_approval=True)
    def call_api(endpoint: str, token: SecretStr = READ_ONLY) -> str:
        """Call an API."""
        used.append((endpoint, token.get_secret_value()))
        return "ok"

    agent = Agent(name="api", tools=[call_api], checkpointer=url, model=ScriptedChatModel([
        turn(call("call_api", {"endpoint": "/v1/refund", "token": "sk-ADMIN-given"}, "c1")),
        "done"]))
    result = agent.generate("refund")
    if door == "notebook":
        card = agent.review(result, decided_by="cfo").cards[0]
        card.fields["endpoint"].value = "/v1/refund?dry=1"
        card.edit.click()
    else:
        (pending,) = Inbox(url).pending()
        client = TestClient(create_app(url, authenticate={"tok": "cfo"}, secret="s",
                                       agents=[agent]))
        login = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
        assert login is not None
        client.post("/login", data={"token": "tok", "login": login.group(1)})
        form = client.get(f"/approvals/{pending.id}").text
        csrf = re.search(r"name='csrf' value='([0-9a-f]+)'", form)
        assert csrf is not None and "name='arg.token' value='**********'" in form
        client.post(f"/approvals/{pending.id}/edit", data={
            "csrf": csrf.group(1), "digest": pending.args_digest,
            "arg.endpoint": "/v1/refund?dry=1", "arg.token": "**********"})
        agent.resume(run_id=result.run_id)
    assert used == [("/v1/refund?dry=1", "sk-ADMIN-given")]


def test_the_parts_of_a_structured_secret_never_refuse_a_call() -> None:
    """A `Secret[dict]` of settings refused its own call, and every retry, for `env="prod"`
    beside a `"STAGE": "prod"` item (helper-68), and a credential-like part looked for
    refused every call naming its region (helper-70): the parts of a structured secret are
    not looked for."""

    @create_tool(needs_approval=True)
    def upload(bucket: str, creds: Secret[dict[str, str]]) -> str:
        """Upload."""
        return "uploaded"

    @create_tool(needs_approval=True)
    def list_instances(region: str) -> str:
        """List instances."""
        return "none"

    creds = {"STAGE": "prod", "region": "us-east-1", "secret": "wJalrXUtnFEMI/K7MDENG"}
    agent = Agent(name="ops", tools=[upload, list_instances], model=ScriptedChatModel([turn(
        call("upload", {"bucket": "logs-us-east-1", "creds": creds}, "u1"),
        call("list_instances", {"region": "us-east-1"}, "l1")), "done"]))
    shown = {p.tool_name: p.args for p in agent.generate("go").pending_approvals}
    assert shown == {"upload": {"bucket": "logs-us-east-1", "creds": "**********"},
                     "list_instances": {"region": "us-east-1"}}


@pytest.mark.parametrize(("shape", "key"), [
    ("function_call", KEY), ("metadata", KEY), ("unknown_block", KEY), ("chunk", KEY),
    ("chunk", "x9Q"), ("metadata", "x9Q"), ("double_json", 'sk-live-51HxQ"q'),
    ("invalid_only", KEY), ("a_word", "text")])
def test_every_copy_a_provider_keeps_of_a_call_shows_its_secret_masked(
        tmp_path: Path, shape: str, key: str) -> None:
    """A provider keeps copies of the model's calls beside `tool_calls`: OpenAI's Responses
    API a `function_call` block (its `id` its own, `call_id` the call's, the arguments a JSON
    string) and its raw output in the metadata; a block of a shape graphkit does not know;
    a streamed chunk. Each held the secret in the checkpoint, the result and the inbox's
    messages; the values are now taken out wherever they are (helper-51). A short secret is
    a whole value inside JSON text, however deep or escaped; a chunk is kept as the message
    it adds up to (kept as chunks, its calls were read again from their text: the secret
    showed and the approved call never ran); a call that could not be parsed keeps none of
    its text; a secret that is also a word leaves the blocks' structure whole (helper-52)."""
    import sqlite3

    from langchain_core.messages import AIMessage, AIMessageChunk

    args = {"amount": 25, "api_key": key}
    raw = json.dumps(args)
    calls = [{"name": "charge", "args": args, "id": "c1"}]
    reply: AIMessage
    if shape == "double_json":
        reply = AIMessage("", tool_calls=calls, response_metadata={"body": json.dumps(raw)})
    elif shape == "invalid_only":
        reply = AIMessage("", invalid_tool_calls=[{"name": "charge", "args": raw[:-1],
                                                   "id": "c1", "error": "unterminated",
                                                   "type": "invalid_tool_call"}])
    elif shape == "a_word":
        reply = AIMessage(content=[{"type": "text", "text": "Charging."},
                                   {"type": "tool_use", "id": "c1", "name": "charge",
                                    "input": args}], tool_calls=calls)
    elif shape == "function_call":
        reply = AIMessage(content=[{"type": "function_call", "id": "fc_9", "call_id": "c1",
                                    "name": "charge", "arguments": raw}], tool_calls=calls)
    elif shape == "metadata":
        reply = AIMessage("", tool_calls=calls, response_metadata={"output": [
            {"type": "function_call", "call_id": "c1", "arguments": raw}]})
    elif shape == "unknown_block":
        reply = AIMessage(content=[{"type": "non_standard", "value": {
            "type": "tool_use", "id": "c1", "input": args}}], tool_calls=calls)
    else:
        reply = AIMessageChunk(content="", tool_call_chunks=[
            {"name": "charge", "args": raw, "id": "c1", "index": 0}])
    used: list[str] = []
    charge = _agent("memory", used).tools[0]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = Agent(name="billing", tools=[charge], checkpointer=url,
                  model=ScriptedChatModel([reply, "done"]))
    first = agent.generate("charge it")
    shown = json.dumps(key)  # (the key as a JSON value: how a copy that shows it holds it)
    if shape == "a_word":  # the blocks are still blocks, the words still words
        assert first.messages[-1].content[0] == {"type": "text", "text": "Charging."}
        shown = f'"api_key": {shown}'
    assert shown not in json.dumps([m.model_dump() for m in first.messages], default=str)
    if shape == "invalid_only":  # (not a call: nothing waits, nothing runs)
        assert first.finish_reason == "stop" and used == []
    else:
        assert first.finish_reason == "suspended"
        (pending,) = Inbox(url, agents=[agent]).pending()
        assert shown not in repr(Inbox(url, agents=[agent]).messages(pending.id))
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
        assert used == [key]  # (the call ran with the real key)
    db = sqlite3.connect(tmp_path / "runs.db")
    for table in ("checkpoints", "writes"):
        rows = db.execute(f"SELECT * FROM {table}").fetchall()
        assert rows and not any(
            needle in (v if isinstance(v, bytes) else str(v).encode())
            for row in rows for v in row for needle in (
                f'"api_key": {shown}'.encode(), f"'api_key': {key!r}".encode())
        ), f"the secret is in {table}"


@pytest.mark.parametrize("where", ["agent", "subagent"])
def test_no_callback_sees_a_secret_of_a_model_or_a_tool(where: str) -> None:
    """LangChain's callbacks get a call's raw input and output: the model's reply with the
    secret in its tool calls, the tool's arguments. They carried it to `astream_events`,
    which a LangGraph server's `events` stream serves to any client that may read the
    thread, from a subagent's calls too, and to every handler a caller passes (a tracer;
    helper-54). A call that sees a secret runs with no callbacks; the run's own events still
    show the conversation, masked."""
    from langchain_core.callbacks import BaseCallbackHandler

    class Everything(BaseCallbackHandler):
        """A stand-in for a tracer: every argument of every callback, as text."""

        def __init__(self) -> None:
            self.seen: list[str] = []

        def __getattribute__(self, name: str) -> Any:
            if name.startswith("on_") and name != "on_llm_new_token":
                return lambda *a, **k: object.__getattribute__(self, "seen").append(
                    repr((name, a, k)))
            return object.__getattribute__(self, name)

    used: list[str] = []
    agent = _agent("memory", used)
    if where == "subagent":
        agent = Agent(name="boss", agents={"billing": agent}, model=ScriptedChatModel(
            lambda m: "done" if m[-1].type == "tool" else turn(
                call("billing", {"task": "charge the card"}, "d1"))))
    handler = Everything()
    config: Any = {"configurable": {"thread_id": "t1"}, "callbacks": [handler]}

    async def run() -> list[str]:
        events = []
        async for event in agent.graph.astream_events(
                {"messages": [("user", "charge")]}, config, version="v2"):
            events.append(json.dumps(event, default=str))
        async for event in agent.graph.astream_events(
                Command(resume={"decisions": [{"type": "approve"}]}), config, version="v2"):
            events.append(json.dumps(event, default=str))
        return events

    from langchain_core.tracers.context import collect_runs

    with collect_runs() as collected:  # (a context's handler, added to every call)
        events = asyncio.run(run())
    runs = list(collected.traced_runs)
    for run_ in runs:
        runs += run_.child_runs
    assert used == [KEY] and runs
    assert [r.name for r in runs if KEY in json.dumps(r.model_dump(), default=repr)] == []
    assert [e for e in events if KEY in e] == [] and [s for s in handler.seen if KEY in s] == []
    assert any(MASK in e for e in events) and any(MASK in s for s in handler.seen)


def test_a_refused_call_and_a_failed_call_keep_their_secrets_out_of_sight() -> None:
    """The model writes a secret for calls the gate refuses (arguments that do not validate,
    a secret of the wrong shape, two calls under one id): the conversation shows each masked.
    A tool that fails with its secret in the error message: the error the caller gets, the
    outcome recorded for the call and the stream show the mask."""
    @create_tool
    def charge(amount: int, api_key: SecretStr) -> str:
        """Charge a card."""
        msg = f"provider rejected key {api_key.get_secret_value()} for {amount}"
        raise ValueError(msg)

    def agent_for(*calls: dict[str, Any]) -> Agent:
        return Agent(name="billing", tools=[charge], model=ScriptedChatModel(
            lambda m: "done" if m[-1].type == "tool" else turn(*calls)))

    for calls in ([call("charge", {"amount": "lots", "api_key": KEY}, "c1")],
                  [call("charge", {"amount": 1, "api_key": {"inner": KEY}}, "c1")],
                  [call("charge", {"amount": 1, "api_key": KEY}, "c1"),
                   call("charge", {"amount": 2, "api_key": KEY}, "c1")]):
        result = agent_for(*calls).generate("charge")
        assert KEY not in json.dumps([m.model_dump() for m in result.messages], default=str)

    agent = agent_for(call("charge", {"amount": 1, "api_key": KEY}, "c1"))
    cfg = {"configurable": {"thread_id": "fails"}}
    chunks: list[Any] = []
    with pytest.raises(ValueError, match="provider rejected key") as raised:
        for chunk in agent.graph.stream({"messages": [("user", "charge")]}, cfg,
                                        stream_mode=["updates", "tasks", "debug"]):
            chunks.append(chunk)
    assert KEY not in str(raised.value) and MASK in str(raised.value)
    assert KEY not in json.dumps(chunks, default=str)
    (key,) = [c["key"] for c in ledger_plan(agent, "fails")["calls"]]
    outcome = agent._storage.ledger.outcomes([key])[key]
    assert outcome is not None and KEY not in str(outcome) and MASK in str(outcome)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_tool_that_says_its_secret_back_shows_the_mask(tmp_path: Path, flavour: str) -> None:
    """A tool's result, or what it asks when it suspends, may hold the key it was given (or
    a key a reviewer typed in an edit, which the model never saw): the conversation, its
    checkpoints, the pending approval, the webhooks' outbox and the recorded outcome show
    the mask; the tool got the real key."""
    import asyncio

    edited = "sk-live-EDITED-77"
    used: list[str] = []

    def charge_body(amount: int, api_key: SecretStr, ctx: ToolContext) -> str:
        used.append(api_key.get_secret_value())
        if ctx.resume_data is None:
            ctx.suspend({"message": f"confirm charge with {api_key.get_secret_value()}?"})
        return f"charged {amount} using key {api_key.get_secret_value()}"

    async def acharge_body(amount: int, api_key: SecretStr, ctx: ToolContext) -> str:
        return charge_body(amount, api_key, ctx)

    body: Any = charge_body if flavour == "sync" else acharge_body
    charge = create_tool(body, name="charge", needs_approval=True,
                         description="Charge a card.")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = Agent(name="billing", tools=[charge], checkpointer=url,
                  notify=[Webhook("http://127.0.0.1:9/hooks", secret="s")],
                  model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                      call("charge", {"amount": 5, "api_key": KEY}, "c1"))))

    def run(coro_or_result: Any) -> Any:
        return asyncio.run(coro_or_result) if flavour == "async" else coro_or_result

    first = run(agent.agenerate("charge") if flavour == "async" else agent.generate("charge"))
    asked = run(agent.aapprove_tool_call_generate(
        run_id=first.run_id, decided_by="cfo", args={"amount": 5, "api_key": edited})
        if flavour == "async" else agent.approve_tool_call_generate(
        run_id=first.run_id, decided_by="cfo", args={"amount": 5, "api_key": edited}))
    assert asked.finish_reason == "suspended"
    (question,) = asked.pending_approvals
    shown = json.dumps([question.to_dict(), [p.to_dict() for p in Inbox(url).pending()]],
                       default=str)
    assert edited not in shown and MASK in shown
    done = run(agent.aresume_generate("yes", run_id=first.run_id) if flavour == "async"
               else agent.resume_generate("yes", run_id=first.run_id))
    assert done.text == "done" and used[-1] == edited
    cfg = {"configurable": {"thread_id": first.thread_id}}
    history = json.dumps([s.values for s in agent.graph.get_state_history(cfg)], default=str)
    rows = agent._storage.ledger._sql.query("SELECT payload FROM graphkit_outbox")
    outcomes = agent._storage.ledger._sql.query("SELECT outcome FROM graphkit_calls")
    for where, text in {"conversation": history, "outbox": str(rows),
                        "outcome": str(outcomes)}.items():
        assert edited not in text and KEY not in text, f"the key is shown in {where}"
    assert "charged 5 using key " + MASK in history


def test_a_secret_said_back_as_a_number_a_key_or_whole_shows_the_mask() -> None:
    """What a tool says back is scrubbed of every secret of its call: a `Secret[int]`'s number
    (whole, or inside text), a secret used as a mapping's key, and a secret too short to
    take out of longer text where it is a whole value. Its error too."""
    pin, short = 48213377, "q7!"

    def connect_body(api_key: SecretStr, pin: Secret[int], code: SecretStr,
                     ctx: ToolContext) -> str:
        k = api_key.get_secret_value()
        if ctx.resume_data is None:
            ctx.suspend({"pin": pin.get_secret_value(), "text": f"pin {pin.get_secret_value()}",
                         k: "as a key", "code": code.get_secret_value(), "count": 42})
        raise ValueError(f"refused pin {pin.get_secret_value()} with {k}")

    connect = create_tool(connect_body, name="connect", description="Connect.")
    agent = Agent(name="svc", tools=[connect], model=ScriptedChatModel(
        lambda m: "done" if m[-1].type == "tool" else turn(
            call("connect", {"api_key": KEY, "pin": pin, "code": short}, "c1"))))
    asked = agent.generate("connect")
    payload = asked.suspend_payload
    assert payload["pin"] == MASK and payload["text"] == f"pin {MASK}"
    assert payload[MASK] == "as a key" and KEY not in json.dumps(payload)
    assert payload["code"] == MASK and payload["count"] == 42
    with pytest.raises(ValueError, match=re.escape(f"refused pin {MASK} with {MASK}")):
        agent.resume_generate("go", run_id=asked.run_id)


class _Code(BaseModel):
    code: SecretStr


@pytest.mark.parametrize("says", ["result", "error"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_tool_that_says_back_the_secret_it_was_resumed_with_shows_the_mask(
        tmp_path: Path, flavour: str, says: str) -> None:
    """A secret of a `resume_schema` (a one-time code) reaches the tool, and the record of the
    decision only: a tool that said it back showed it in its result, and so in the
    conversation's checkpoints, the recorded outcome and every view, where the secrets of its
    arguments showed the mask (helper-114). What it says back, and its error, show the mask."""
    code = "OTP-73914628"
    got: list[str] = []

    def body(amount: int, ctx: ToolContext) -> str:
        answer = ctx.suspend({"message": "Your one-time code?"})
        got.append(answer.code.get_secret_value())
        if says == "error":
            raise ValueError(f"code {answer.code.get_secret_value()} refused by the bank")
        return f"sent {amount} with code {answer.code.get_secret_value()}"

    async def abody(amount: int, ctx: ToolContext) -> str:
        return body(amount, ctx)

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    wire = create_tool(body if flavour == "sync" else abody, name="wire",
                       description="Wire money.", resume_schema=_Code)
    agent = Agent(name="bank", tools=[wire], checkpointer=url, model=ScriptedChatModel(
        lambda m: "done" if m[-1].type == "tool" else turn(call("wire", {"amount": 5}, "w1"))))
    first = agent.generate("wire 5")
    resume = (agent.resume_generate if flavour == "sync" else
              lambda *a, **k: asyncio.run(agent.aresume_generate(*a, **k)))
    try:
        done = resume({"code": code}, run_id=first.run_id)
        shown = done._repr_html_() + json.dumps([m.content for m in done.messages])
    except Exception as exc:  # (the tool's error, raised to the caller)
        shown = "".join(traceback.format_exception(exc))
    assert got == [code]
    cfg = {"configurable": {"thread_id": first.thread_id}}
    history = json.dumps([s.values for s in agent.graph.get_state_history(cfg)], default=str)
    outcomes = str(agent._storage.ledger._sql.query("SELECT outcome FROM graphkit_calls"))
    for where, text in {"views": shown, "conversation": history, "outcome": outcomes}.items():
        assert code not in text, f"the code is shown in {where}"
    assert MASK in shown + history


@pytest.mark.parametrize("how", ["command", "path", "args", "note"])
def test_a_tool_error_made_of_its_secret_shows_the_mask(how: str) -> None:
    """An error's message is made of more than its args: a failed command's `cmd`, the path an
    `OSError` names, a mapping in its args, a note. The error raised to the caller, its text
    and the outcome recorded show the mask."""
    import subprocess
    import traceback

    def fail_body(api_key: SecretStr) -> str:
        key = api_key.get_secret_value()
        if how == "command":
            subprocess.run(["false", f"--token={key}"], check=True)
        if how == "path":
            open(f"/nonexistent/{key}")  # noqa: SIM115
        if how == "args":
            raise ValueError({"headers": {"Authorization": key}})
        error = RuntimeError("refused")
        error.add_note(f"with {key}")
        raise error

    fail = create_tool(fail_body, name="fail", description="Fail.")
    agent = Agent(name="svc", tools=[fail], checkpointer="memory",
                  model=ScriptedChatModel([turn(call("fail", {"api_key": KEY}, "f1")), "ok"]))
    with pytest.raises(Exception) as raised:
        agent.generate("go")
    shown = "".join(traceback.format_exception(raised.value))
    outcomes = str(agent._storage.ledger._sql.query("SELECT outcome FROM graphkit_calls"))
    assert KEY not in shown and KEY not in outcomes
    assert MASK in shown and (how == "note" or MASK in outcomes)  # (a note is not recorded)


def test_what_a_tool_says_back_is_scrubbed_of_every_kind_of_secret() -> None:
    """Its artifact too; each item of a `Secret[list]` or `Secret[dict]`; of two secrets, one
    inside the other, the longer whole; a key masked onto one already there is kept."""
    from langchain_core.tools import tool as lc_tool

    user, password = "adminuser", "adminuser-PW-77"

    @lc_tool("fetch", response_format="content_and_artifact")
    def fetch(api_key: SecretStr, keys: Secret[list[str]], creds: Secret[dict[str, str]],
              name: SecretStr, pw: SecretStr) -> tuple[str, dict[str, Any]]:
        """Fetch."""
        k = api_key.get_secret_value()
        said = (f"{k} {keys.get_secret_value()} {creds.get_secret_value()} "
                f"login {name.get_secret_value()}:{pw.get_secret_value()}")
        return said, {"key": k, k: "as a key", MASK: "already here"}

    agent = Agent(name="svc", tools=[fetch], checkpointer="memory", model=ScriptedChatModel([
        turn(call("fetch", {"api_key": KEY, "keys": ["sk-list-A1", "sk-list-B2"],
                            "creds": {"db": "sk-dict-C3"}, "name": user, "pw": password},
                  "f1")), "ok"]))
    done = agent.generate("go")
    (said,) = [m for m in done.messages if m.type == "tool"]
    text = json.dumps([said.content, said.artifact])
    for secret in (KEY, "sk-list-A1", "sk-list-B2", "sk-dict-C3", "PW-77"):
        assert secret not in text, secret
    assert said.artifact == {"key": MASK, MASK: "already here",
                             f"{MASK} (another)": "as a key"}


class _CodeError(Exception):
    def __str__(self) -> str:
        return f"code {self.args[0]:06d} refused"  # made of a number


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


class _Interrupting(Exception):
    def __str__(self) -> str:
        raise KeyboardInterrupt  # (not an Exception: helper-39)


@pytest.mark.parametrize("error", ["formats its number", "has no message", "exits 1",
                                   "interrupts its message"])
def test_an_error_scrubbing_cannot_break_is_recorded_once_and_raised_as_it_is(
        tmp_path: Path, error: str) -> None:
    """Scrubbing keeps an error what it was: a number stays a number (a caller compares a
    `returncode`; one that is the secret and so shows in the message is not raised: see
    `test_what_langgraph_keeps_of_a_tool_error_shows_no_secret`), and an error that cannot
    say its message still has its outcome recorded. Else the outcome went unrecorded, and the
    approved call ran again in the next process that resumed the run (helper-38)."""
    import subprocess

    ran: list[int] = []

    def pay_body(api_key: SecretStr, pin: Secret[int]) -> str:
        ran.append(pin.get_secret_value())
        if error == "formats its number":
            raise _CodeError(pin.get_secret_value())
        if error == "has no message":
            raise _Unprintable(api_key.get_secret_value())
        if error == "interrupts its message":
            raise _Interrupting(api_key.get_secret_value())
        subprocess.run(["false"], check=True)
        return "unreachable"

    pay = create_tool(pay_body, name="pay", description="Pay.", needs_approval=True)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = Agent(name="billing", tools=[pay], checkpointer=url, model=ScriptedChatModel(
        lambda m: "done" if m[-1].type == "tool" else turn(
            call("pay", {"api_key": KEY, "pin": 4242 if error != "exits 1" else 1}, "p1"))))
    first = agent.generate("pay")
    kind = {"formats its number": WithheldToolError, "has no message": _Unprintable,
            "exits 1": subprocess.CalledProcessError,
            "interrupts its message": _Interrupting}[error]
    with pytest.raises(kind) as raised:
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    if error == "exits 1":
        assert raised.value.returncode == 1
    (outcome,), = agent._storage.ledger._sql.query("SELECT outcome FROM graphkit_calls")
    assert outcome and KEY not in outcome and "4242" not in outcome
    again = Agent(name="billing", tools=[pay], checkpointer=url,
                  model=ScriptedChatModel(lambda m: "done")).resume(run_id=first.run_id)
    assert again.text == "done" and len(ran) == 1


class _Said:
    """A value of its own that says the secret: no scrubbing reaches into it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


@dataclasses.dataclass
class _Config:
    key: str


def _noted(key: str) -> BaseException:
    error = ValueError("bad")
    error.__notes__ = [_Said(f"note {key}")]  # (a list of text, by convention only)
    return error


def _chained(key: str) -> BaseException:
    error: BaseException = ValueError(_Said(key))
    for n in range(70):
        try:
            raise ValueError(f"wrap {n}") from error
        except ValueError as wrapped:
            error = wrapped
    return error


@dataclasses.dataclass
class _Declined(Exception):
    """LangGraph's serializer stores a dataclass by its fields, not its repr."""

    message: str
    context: frozenset[str] = dataclasses.field(repr=False)

    def __str__(self) -> str:
        return self.message


class _Text(str):
    def __str__(self) -> str:
        return "nothing here"

    def __repr__(self) -> str:
        return "'nothing here'"


class _Lying(Exception):
    def __init__(self, held: _Said) -> None:
        super().__init__()
        self.held = held

    def __str__(self) -> str:
        return _Text(f"declined {self.held.text}")


class _Note(str):
    def __str__(self) -> str:
        return self.said  # type: ignore[attr-defined,no-any-return]


def _noted_by_text(key: str) -> BaseException:
    note = _Note("a note")
    note.said = f"note {key}"  # type: ignore[attr-defined]
    error = ValueError("declined")
    error.__notes__ = [note]
    return error


class _Failing(Exception):
    __module__ = "mytests"


class _PortError(Exception):
    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.port = port

    def __str__(self) -> str:
        return f"cannot connect to port {self.port}"


class _SaysANumber(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]


class _ReadOnlyArgs(Exception):
    @property  # type: ignore[override]
    def args(self) -> tuple[Any, ...]:
        return ("nothing here",)

    @args.setter
    def args(self, value: tuple[Any, ...]) -> None:
        raise AttributeError("read-only")


_SHOWS_ITS_SECRET: dict[str, tuple[Callable[[str], BaseException], type[BaseException]]] = {
    "has no message": (lambda k: _Unprintable(f"refused {k}"), _Unprintable),
    "says a number": (lambda k: _SaysANumber(f"refused {k}"), _SaysANumber),
    "has read-only args": (lambda k: _ReadOnlyArgs(f"refused {k}"), _ReadOnlyArgs),
    "is in a group": (lambda k: ExceptionGroup("several", [
        ValueError(f"one {k}"), _Unprintable(f"two {k}")]), ExceptionGroup),
    "holds it in a value of its own": (lambda k: ValueError(_Said(f"refused {k}")),
                                       WithheldToolError),
    "interrupts with it in a value of its own": (
        lambda k: KeyboardInterrupt(_Said(f"stop {k}")), KeyboardInterrupt),
    "holds it in a value its repr escapes": (
        lambda k: ValueError(_Config(k)), WithheldToolError),  # (a key of several lines)
    "shows it in its source line": (lambda k: SyntaxError(
        "invalid", ("<config>", 1, 10, f"api_key = {k}!", 1, 11)), SyntaxError),
    "notes it in a value of its own": (_noted, WithheldToolError),
    "comes at the end of a long chain": (_chained, WithheldToolError),
    "cancels with it": (lambda k: asyncio.CancelledError(f"cancelled {k}"), NodeCancelledError),
    "has a long message that is cut at it": (lambda k: ValueError(_Said("x" * 283 + k)),
                                             WithheldToolError),
    "keeps it in a field LangGraph stores": (
        lambda k: _Declined("card declined", frozenset([k])), WithheldToolError),
    "says it through text of its own kind": (lambda k: _Lying(_Said(k)), WithheldToolError),
    "notes it through text of its own kind": (_noted_by_text, WithheldToolError),
    "holds its bytes": (lambda k: ValueError(bytearray(k.encode())), WithheldToolError),
    "names a URL that escapes it": (
        lambda k: ValueError(f"GET https://api.example.com/x?key={quote(k)} failed"), ValueError),
}

_KEYS = {"holds it in a value its repr escapes": f"-----BEGIN KEY-----\n{KEY}\n-----END KEY-----",
         "holds its bytes": f"{KEY}-pässwört", "names a URL that escapes it": f"{KEY}+/="}
"""The cases whose secret has characters a repr, bytes or a URL show otherwise."""


@pytest.mark.parametrize(("secret", "error"), [
    ("Error", ValueError("boom")), ("test", _Failing("x")), ("1234", _PortError(12345)),
    ("1234", TimeoutError("request 20240611123456 timed out"))])
def test_an_error_that_shows_no_secret_is_raised_as_it_is(secret: str,
                                                          error: Exception) -> None:
    """A secret that is part of an error's class or module name ("Error", "test"), or a
    secret number inside a longer one (a PIN 1234, port 12345), is not one shown: the error
    is raised as the tool raised it, and the outcome keeps the names (helper-45,
    helper-46)."""
    @create_tool(needs_approval=True)
    def charge(amount: int, api_key: SecretStr) -> str:
        """Charge a card."""
        raise error

    agent = Agent(name="billing", tools=[charge], checkpointer="memory",
                  model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                      call("charge", {"amount": 5, "api_key": secret}, "c1"))))
    first = agent.generate("charge")
    with pytest.raises(type(error)) as raised:
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert raised.value is error
    (outcome,), = agent._storage.ledger._sql.query("SELECT outcome FROM graphkit_calls")
    assert f"'charge' failed ({type(error).__name__}:" in outcome


@pytest.mark.parametrize(("error", "flavour"), [
    (error, flavour) for error, (_, kind) in _SHOWS_ITS_SECRET.items()
    for flavour in ("sync", "async")
    # (asyncio stops its loop at a KeyboardInterrupt raised in a task, and LangChain runs an
    # async tool in a task of its own: no handler of the run sees it)
    if not (flavour == "async" and kind is KeyboardInterrupt)])
def test_what_langgraph_keeps_of_a_tool_error_shows_no_secret(tmp_path: Path, error: str,
                                                              flavour: str) -> None:
    """LangGraph stores the repr of a node's error in the checkpoint (its `writes`), and hands
    the error to the caller. An error is scrubbed where its text is made (the C-level `args`
    a read-only `args` property hides, an error that had no message to begin with, a group's
    members); one whose secret cannot be reached is not raised: an error of its kind for a
    `KeyboardInterrupt`, else a `WithheldToolError`, carries the outcome recorded instead.
    Before, each kept the secret in the checkpoint (helper-42)."""
    import sqlite3

    make, kind = _SHOWS_ITS_SECRET[error]
    key = _KEYS.get(error, KEY)
    ran: list[str] = []

    def charge_sync(amount: int, api_key: SecretStr) -> str:
        ran.append(api_key.get_secret_value())
        raise make(api_key.get_secret_value())

    async def charge_async(amount: int, api_key: SecretStr) -> str:
        return charge_sync(amount, api_key)

    charge = create_tool(charge_sync if flavour == "sync" else charge_async, name="charge",
                         description="Charge a card.", needs_approval=True)
    db = tmp_path / "runs.db"
    agent = Agent(name="billing", tools=[charge], checkpointer=f"sqlite:///{db}",
                  model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                      call("charge", {"amount": 5, "api_key": key}, "c1"))))
    first = agent.generate("charge")
    with pytest.raises(kind) as raised:
        if flavour == "sync":
            agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
        else:
            asyncio.run(agent.aapprove_tool_call_generate(run_id=first.run_id,
                                                          decided_by="cfo"))
    assert type(raised.value) is kind and KEY not in repr(raised.value)
    assert KEY not in "".join(traceback.format_exception(raised.value))
    try:
        said = str.__str__(str(raised.value))  # (its text, whatever its own `__str__` says)
    except Exception:
        said = ""
    assert KEY not in said
    if kind in (WithheldToolError, KeyboardInterrupt):
        assert "Tool call 'charge' failed" in str(raised.value)
    with sqlite3.connect(db) as conn:
        stored = [bytes(v) if isinstance(v, bytes) else str(v).encode()
                  for table in ("writes", "checkpoints")
                  for row in conn.execute(f"SELECT * FROM {table}") for v in row]
    assert stored and not any(KEY.encode() in v for v in stored)
    (outcome,), = agent._storage.ledger._sql.query("SELECT outcome FROM graphkit_calls")
    assert KEY[:4] not in (outcome or "")  # (not even a part: it is cut once scrubbed)
    again = Agent(name="billing", tools=[charge], checkpointer=f"sqlite:///{db}",
                  model=ScriptedChatModel(lambda m: "done")).resume(run_id=first.run_id)
    assert again.text == "done" and len(ran) == 1


def test_an_error_keeps_its_kinds_of_values_as_its_secrets_are_taken_out() -> None:
    """What the message of an error is made of keeps its type (an `OrderedDict`, a named
    tuple, a number), its slots and a `SystemExit`'s code are scrubbed too, and an attribute
    that cannot be read stops nothing (helper-39)."""
    import collections

    from graphkit._secrets import scrub_exception

    class Slotted(Exception):
        __slots__ = ("token",)

    class OddPath(Exception):
        @property
        def filename(self) -> str:
            raise ValueError("no path")

    pair = collections.namedtuple("pair", "name value")
    error = RuntimeError(KEY)
    error.headers = collections.OrderedDict(auth=KEY)  # type: ignore[attr-defined]
    error.pair = pair("key", KEY)  # type: ignore[attr-defined]
    error.code = 4242  # type: ignore[attr-defined]
    slotted, odd, leaving = Slotted(), OddPath(KEY), SystemExit(KEY)
    slotted.token = KEY
    for raised in (error, slotted, odd, leaving):
        scrub_exception(raised, [KEY, "4242"])
    assert error.args == (MASK,) and error.code == 4242  # type: ignore[attr-defined]
    assert error.headers == {"auth": MASK}  # type: ignore[attr-defined]
    assert type(error.headers) is collections.OrderedDict  # type: ignore[attr-defined]
    assert error.pair == pair("key", MASK)  # type: ignore[attr-defined]
    assert slotted.token == MASK and odd.args == (MASK,) and leaving.code == MASK


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_the_error_a_caller_was_handling_is_left_as_it_is(flavour: str) -> None:
    """Python makes the error a caller was handling, as it decided a call, the context of the
    tool's error: it was read as the tool's, rewritten in place (the caller's own error
    lost a user name) and made an ordinary tool error withheld (helper-46). Only as that
    context is it the caller's: a tool that raises it itself (a client that raises its last
    error again) has it judged as its own (helper-47)."""
    raised_by_tool: list[BaseException] = []

    @create_tool(needs_approval=True)
    def login(user: SecretStr) -> str:
        """Log in."""
        if raised_by_tool:
            raise raised_by_tool[0]
        raise ConnectionError("service unavailable (503)")

    agent = Agent(name="sync", tools=[login], checkpointer="memory",
                  model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                      call("login", {"user": "alice"}, "l1"))))
    first = agent.generate("log in")
    try:
        raise LookupError("the nightly sync for alice failed")
    except LookupError as handled:
        with pytest.raises(ConnectionError, match="503"):
            if flavour == "sync":
                agent.approve_tool_call_generate(run_id=first.run_id, decided_by="ops")
            else:
                asyncio.run(agent.aapprove_tool_call_generate(run_id=first.run_id,
                                                              decided_by="ops"))
        assert str(handled) == "the nightly sync for alice failed"
    second = agent.generate("log in again", thread_id=first.thread_id)
    try:
        raise ConnectionError("auth rejected for alice")
    except ConnectionError as last:
        raised_by_tool.append(last)
        with pytest.raises((ConnectionError, WithheldToolError)) as again:
            agent.approve_tool_call_generate(run_id=second.run_id, decided_by="ops")
        assert "alice" not in repr(again.value)


@dataclasses.dataclass
class _CardError(Exception):
    pin: str


def test_a_secret_number_is_masked_inside_what_a_tool_builds_of_it() -> None:
    """A tool may build a phone number or an IBAN from a PIN: its result masks the PIN inside
    longer numbers (the whole-number rule of fc41fb5 let `+1 5554821` show it), and an
    error whose dataclass field holds the PIN as text is withheld (msgpack's string header
    was read as a digit before it; helper-47)."""
    @create_tool(needs_approval=True)
    def card(pin: Secret[int]) -> str:
        """Issue a card."""
        return f"card ready; phone +1 555{pin.get_secret_value()}"

    agent = Agent(name="cards", tools=[card], checkpointer="memory",
                  model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                      call("card", {"pin": 4821}, f"c{len(m)}"))))
    first = agent.approve_tool_call_generate(run_id=agent.generate("card").run_id,
                                             decided_by="ops")
    (result,) = [m for m in first.messages if m.type == "tool"]
    assert "4821" not in str(result.content) and "555" in str(result.content)
    # where its field cannot be set to the mask, the check must find it in what is stored
    assert still_shows(_CardError(pin="4821"), ["4821"])
    assert not still_shows(_CardError(pin="14821"), ["4821"])


def test_a_predicate_that_raises_over_a_secret_logs_its_kind_only(
        caplog: pytest.LogCaptureFixture) -> None:
    """A `needs_approval` predicate reads the arguments in clear; one that raised logged its
    error whole, the secret in its message, on stderr with no logging set up (helper-113).
    As an approvers policy's, its error is named by its kind only; the call still asks."""
    import logging

    def pay_body(amount: int, pin: SecretStr) -> str:
        return "paid"

    pay = create_tool(pay_body, name="pay", description="Pay.",
                      needs_approval=lambda args: int(args["pin"].get_secret_value()) > 1000)
    agent = Agent(name="shop", tools=[pay], model=ScriptedChatModel(
        [turn(call("pay", {"amount": 5, "pin": KEY}, "p1")), "done"]))
    with caplog.at_level(logging.DEBUG):
        paused = agent.generate("pay")
    assert paused.finish_reason == "suspended"
    assert "ValueError" in caplog.text and KEY not in caplog.text


@pytest.mark.parametrize("edit", [
    {"tokens": ["NEW-TOKEN-1", MASK], "named": {"prod": MASK}},  # one put before it
    {"tokens": [MASK, MASK], "named": {"prod": MASK}},  # one more
    {"tokens": [MASK], "named": {"staging": MASK}},  # under another key
])
@pytest.mark.parametrize("door", ["api", "inbox"])
def test_an_edit_that_moves_a_masked_secret_is_refused_and_the_tool_never_gets_the_mask(
        sqlite_url: str, door: str, edit: dict[str, Any]) -> None:
    """A masked secret left where the card showed it keeps its value; one moved, added or
    renamed reached the tool as the mask itself (helper-114). Refused, typed; nothing
    decided; an edit that keeps each secret where it was still runs with the real values."""
    from graphkit.errors import InvalidApprovedArgsError

    seen: list[Any] = []

    def vault_body(tokens: list[SecretStr], named: dict[str, SecretStr]) -> str:
        seen.append(([t.get_secret_value() for t in tokens],
                     {k: v.get_secret_value() for k, v in named.items()}))
        return "ok"

    vault = create_tool(vault_body, name="vault", description="Keep.", needs_approval=True)
    agent = Agent(name="a", tools=[vault], checkpointer=sqlite_url, model=ScriptedChatModel(
        [turn(call("vault", {"tokens": [KEY], "named": {"prod": "NAMED-5555"}}, "c1")),
         "done"]))
    first = agent.generate("go")
    (pending,) = first.pending_approvals

    def approve(args: dict[str, Any]) -> None:
        if door == "api":
            agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a", args=args)
        else:
            Inbox(sqlite_url, agents=[agent]).approve(pending.id, decided_by="a", args=args)
            agent.resume(run_id=first.run_id)

    with pytest.raises(InvalidApprovedArgsError, match="mask"):
        approve(edit)
    assert seen == [] and Inbox(sqlite_url).get(pending.id).status == "pending"
    approve({"tokens": [MASK], "named": {"prod": MASK}})
    assert seen == [([KEY], {"prod": "NAMED-5555"})]


class _Target(BaseModel):
    url: str
    token: SecretStr


@pytest.mark.parametrize("edit", ["drop the first", "swap them", "change a url"])
def test_a_list_item_keeps_its_masked_secret_only_where_it_is_left_as_shown(edit: str) -> None:
    """Masks were restored by position: the reviewer dropped the first of two targets, and
    the partner's address got the internal token (helper-116); a swap did the same. A
    secret in a list's item is kept only for the item left as shown, at its place (the last
    one dropped moves none: helper-118); else the edit is refused, typed, and nothing runs.
    A text of the model's own that reads like the mask is its value: left as written, it is
    no stray mask."""
    from graphkit.errors import InvalidApprovedArgsError

    seen: list[Any] = []

    def push_body(targets: list[_Target], note: str) -> str:
        seen.append([(t.url, t.token.get_secret_value()) for t in targets])
        return "pushed"

    push = create_tool(push_body, name="push", description="Push.", needs_approval=True)
    given = {"targets": [{"url": "https://internal", "token": "TOKEN-INTERNAL"},
                         {"url": "https://partner", "token": "TOKEN-PARTNER"}], "note": MASK}
    agent = Agent(name="a", tools=[push], model=ScriptedChatModel(
        lambda m: "done" if m[-1].type == "tool" else turn(call("push", given, "p1"))))
    first = agent.generate("push")
    shown = first.pending_approvals[0].args
    internal, partner = shown["targets"]
    targets = {"drop the first": [partner], "swap them": [partner, internal],
               "change a url": [{**internal, "url": "https://elsewhere"}, partner]}[edit]
    with pytest.raises(InvalidApprovedArgsError, match="mask"):
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a",
                                         args={**shown, "targets": targets})
    assert seen == []
    if edit == "drop the first":  # the last one dropped moves none: the first keeps its own
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a",
                                         args={**shown, "targets": [internal]})
        assert seen == [[("https://internal", "TOKEN-INTERNAL")]]
        return
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a", args=shown)
    assert seen == [[("https://internal", "TOKEN-INTERNAL"), ("https://partner", "TOKEN-PARTNER")]]


def test_an_edit_of_a_call_that_holds_no_secret_may_say_the_mask() -> None:
    """A reviewer who redacts a message to the mask's own text, on a tool that takes no
    secret, was refused as if a secret had moved (helper-118): it is the text to post."""
    posted: list[str] = []

    def post_body(text: str) -> str:
        posted.append(text)
        return "posted"

    post = create_tool(post_body, name="post", description="Post.", needs_approval=True)
    agent = Agent(name="a", tools=[post], model=ScriptedChatModel(
        [turn(call("post", {"text": "the launch codes are 1234"}, "p1")), "done"]))
    first = agent.generate("post")
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a", args={"text": MASK})
    assert posted == [MASK]


def test_an_edit_that_gives_one_dict_under_two_arguments_moves_no_secret() -> None:
    """A reviewer's script gave the internal headers' dict as the partner's too (one
    object, `args["partner"] = args["internal"]`): each secret restored in it showed at the
    other place as well, and the partner got the internal key (helper-117). Restored in a
    copy that shares nothing, the mask under the partner's argument is a stray one: refused."""
    from graphkit.errors import InvalidApprovedArgsError

    seen: list[Any] = []

    def notify_body(partner: dict[str, SecretStr], internal: dict[str, SecretStr]) -> str:
        seen.append(({k: v.get_secret_value() for k, v in partner.items()},
                     {k: v.get_secret_value() for k, v in internal.items()}))
        return "sent"

    notify = create_tool(notify_body, name="notify", description="Notify.", needs_approval=True)
    agent = Agent(name="a", tools=[notify], model=ScriptedChatModel(
        [turn(call("notify", {"partner": {"X-Partner": "PARTNER-KEY"},
                              "internal": {"X-Internal": "INTERNAL-KEY"}}, "n1")), "done"]))
    first = agent.generate("notify")
    args = dict(first.pending_approvals[0].args)
    args["partner"] = args["internal"]
    with pytest.raises(InvalidApprovedArgsError, match="mask"):
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a", args=args)
    assert seen == []


class _Cred(BaseModel):
    host: str
    password: SecretStr


@pytest.mark.parametrize("edit", ["drop the first", "drop the first, add one"])
def test_items_shown_alike_keep_no_secret_once_the_list_changes_around_them(edit: str) -> None:
    """Two credentials of one host are shown alike: dropping the first kept the first's
    password for the one left (the reviewer meant to drop it: helper-119). Which of them an
    item is cannot be told once the shown items change; the edit is refused."""
    from graphkit.errors import InvalidApprovedArgsError

    seen: list[Any] = []

    def rotate_body(creds: list[_Cred]) -> str:
        seen.append([(c.host, c.password.get_secret_value()) for c in creds])
        return "rotated"

    rotate = create_tool(rotate_body, name="rotate", description="Rotate.", needs_approval=True)
    agent = Agent(name="a", tools=[rotate], model=ScriptedChatModel(
        [turn(call("rotate", {"creds": [{"host": "h", "password": "P-ONE"},
                                        {"host": "h", "password": "P-TWO"}]}, "r1")), "done"]))
    first = agent.generate("rotate")
    kept = first.pending_approvals[0].args["creds"][1]
    creds = [kept] if edit == "drop the first" else [kept, {"host": "h2", "password": "NEW"}]
    with pytest.raises(InvalidApprovedArgsError, match="mask"):
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="a",
                                         args={"creds": creds})
    assert seen == []
