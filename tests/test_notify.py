"""Webhook notifications: approval.requested, approval.decided and approval.expired reach a
local receiver, signed, at least once with a stable id, across retries and a killed process.
No network but loopback."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from graphkit import Agent, Inbox, Webhook, verify_signature
from graphkit._ledger import AuditRow, Ledger
from graphkit._notify import (
    _DISPATCHERS,
    SIGNATURE_HEADER,
    Dispatcher,
    sign,
    start_notifications,
)
from tests.helpers import agent_with, call, lax_inbox, turn
from tests.test_storage import ROOT

SECRET = "whsec_test_4d2f"
PAY = {"amount": 40, "payee": {"name": "ACME"}}


def pay(n: int = 1) -> list[Any]:
    script: list[Any] = []
    for i in range(n):
        script += [turn(call("pay", {**PAY, "amount": i + 1}, f"c{i}")), "done"]
    return script


class Receiver:
    """A webhook endpoint on 127.0.0.1 that checks signatures and fails the first
    `fail_first` requests with HTTP 500."""

    def __init__(self, secret: str | None = SECRET, *, port: int = 0, fail_first: int = 0,
                 delay: float = 0.0) -> None:
        self.secret = secret
        self.fail_first = fail_first
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                header = self.headers.get(SIGNATURE_HEADER)
                verified = receiver.secret is None or verify_signature(
                    header, body, receiver.secret)
                with receiver.lock:
                    failing = receiver.fail_first > 0
                    receiver.fail_first -= int(failing)
                    status = 500 if failing else 200 if verified else 401
                    receiver.requests.append({
                        "status": status, "verified": verified, "signature": header,
                        "raw": body, "body": json.loads(body),
                        "event_id": self.headers.get("X-Graphkit-Event-Id")})
                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/graphkit"

    def delivered(self) -> list[dict[str, Any]]:
        """Bodies of the requests answered 2xx, in arrival order."""
        with self.lock:
            return [r["body"] for r in self.requests if r["status"] == 200]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def _stop_dispatchers() -> Iterator[None]:
    yield
    for dispatcher in list(_DISPATCHERS.values()):
        dispatcher.stop()


def _dispatcher(owner: Agent | Inbox) -> Dispatcher:
    assert owner.dispatcher is not None
    return owner.dispatcher


def _types(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["approval"]["event"]) for e in events]


def test_requested_decided_and_expired_arrive_signed(durable_url: str,
                                                     receiver: Receiver) -> None:
    hook = Webhook(receiver.url, secret=SECRET)
    agent, tools = agent_with(pay(2), checkpointer=durable_url, name="billing", notify=[hook])
    dispatcher = _dispatcher(agent)
    paused = agent.generate("pay")
    (pending,) = paused.pending_approvals
    assert dispatcher.flush(timeout=20)
    (requested,) = receiver.delivered()
    assert requested["type"] == "approval.requested"
    assert requested["approval"]["approval_id"] == pending.id
    assert requested["approval"]["tool_name"] == "pay"
    assert requested["approval"]["agent_path"] == ["billing"]
    assert requested["approval"]["args_before"] == {**PAY, "amount": 1}
    assert set(requested) == {"id", "type", "created_at", "approval"}
    assert requested["created_at"].endswith("Z")

    # Signed: the header checks out, and only for exactly this body, recently.
    sent = receiver.requests[0]
    assert sent["verified"] and sent["event_id"] == requested["id"]
    assert verify_signature(sent["signature"], sent["raw"], SECRET)
    assert verify_signature(sent["signature"], sent["raw"].decode(), SECRET)
    assert not verify_signature(sent["signature"], sent["raw"].replace(b"pay", b"pax"), SECRET)
    assert not verify_signature(sent["signature"], sent["raw"], "another secret")
    stale = sign(sent["raw"], SECRET, int(time.time()) - 301)
    assert not verify_signature(stale, sent["raw"], SECRET)
    assert verify_signature(stale, sent["raw"], SECRET, tolerance=600)

    # Decided in the inbox (a process without notify= of its own): approval.decided.
    Inbox(durable_url).approve(pending.id, decided_by="alice", comment="ok")
    assert dispatcher.flush(timeout=20)
    decided = receiver.delivered()[-1]
    assert decided["type"] == "approval.decided" and decided["id"] != requested["id"]
    assert decided["approval"]["event"] == "approved"
    assert decided["approval"]["decided_by"] == "alice"
    assert decided["approval"]["comment"] == "ok"
    assert agent.resume(run_id=paused.run_id).finish_reason == "stop"
    assert tools.ran == [("pay", {**PAY, "amount": 1})]

    # Undecided in time: approval.expired.
    late, _ = agent_with(pay(1), checkpointer=durable_url, name="billing",
                         approval_ttl=timedelta(milliseconds=50))
    waiting = late.generate("pay later").pending_approvals[0]
    time.sleep(0.1)
    assert [p.id for p in Inbox(durable_url).expire()] == [waiting.id]
    assert dispatcher.flush(timeout=20)
    events = receiver.delivered()
    assert _types(events) == [("approval.requested", "requested"),
                              ("approval.decided", "approved"),
                              ("run.finished", "ran"),
                              ("approval.requested", "requested"),
                              ("approval.expired", "expired")]
    assert events[2]["outcome"] == "ran" and events[2]["result"] == "paid 1 to ACME"
    assert events[2]["approval"]["tool_call_id"] == "c0"  # (as each approval event's)
    assert events[-1]["approval"]["approval_id"] == waiting.id
    assert len({e["id"] for e in events}) == 5
    assert all(r["verified"] for r in receiver.requests)
    assert {d["attempts"] for d in agent._storage.ledger.deliveries()} == {1}


def test_a_failing_receiver_gets_the_event_again_with_the_same_id(sqlite_url: str) -> None:
    receiver = Receiver(fail_first=2)
    try:
        agent, _ = agent_with(pay(), checkpointer=sqlite_url,
                              notify=[Webhook(receiver.url, secret=SECRET, backoff=0.1)])
        agent.generate("pay")
        assert _dispatcher(agent).flush(timeout=20)
        assert [r["status"] for r in receiver.requests] == [500, 500, 200]
        ids = {r["body"]["id"] for r in receiver.requests} | {
            r["event_id"] for r in receiver.requests}
        assert len(ids) == 1
        (delivery,) = agent._storage.ledger.deliveries()
        assert delivery["attempts"] == 3 and delivery["delivered_at"] is not None
        assert delivery["event_id"] in ids
    finally:
        receiver.close()


def test_retries_back_off_and_give_up_after_max_attempts(sqlite_url: str) -> None:
    hook = Webhook("http://127.0.0.1:9/x", secret=SECRET, max_attempts=5)
    assert [hook.retry_in(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, None]
    assert Webhook("http://h/", backoff=100, max_backoff=250).retry_in(3) == 250
    receiver = Receiver(fail_first=10)
    try:
        agent, _ = agent_with(pay(), checkpointer=sqlite_url, notify=[
            Webhook(receiver.url, secret=SECRET, backoff=0.05, max_attempts=2)])
        agent.generate("pay")
        assert _dispatcher(agent).flush(timeout=20)  # nothing left to attempt
        (delivery,) = agent._storage.ledger.deliveries()
        assert delivery["attempts"] == 2 and delivery["delivered_at"] is None
        assert delivery["next_at"] is None and delivery["last_error"].startswith("HTTP 500")
        assert len(receiver.requests) == 2
    finally:
        receiver.close()


def test_connection_refused_is_retried(sqlite_url: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hook"
    agent, _ = agent_with(pay(), checkpointer=sqlite_url,
                          notify=[Webhook(url, secret=SECRET, backoff=0.2)])
    agent.generate("pay")
    assert _dispatcher(agent).flush(timeout=0) is False
    (delivery,) = agent._storage.ledger.deliveries()
    assert delivery["attempts"] >= 1 and "ConnectError" in delivery["last_error"]
    receiver = Receiver(port=port)
    try:
        assert _dispatcher(agent).flush(timeout=20)
        (event,) = receiver.delivered()
        assert event["id"] == delivery["event_id"]
    finally:
        receiver.close()


def _listening(serve: Callable[[socket.socket], None]) -> socket.socket:
    """A socket on 127.0.0.1 that serves each connection in a thread of its own, until it is
    closed: a receiver that misbehaves below HTTP."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def accept() -> None:
        with contextlib.suppress(OSError):  # (closed)
            while True:
                threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True
                                 ).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def _beside_a_misbehaving_receiver(serve: Callable[[socket.socket], None], timeout: float,
                                   url: str, receiver: Receiver) -> tuple[Agent, socket.socket]:
    """An agent notifying two webhooks: first one whose receiver `serve`s each connection below
    HTTP (within `timeout`), then the healthy `receiver`; and the misbehaving one's socket."""
    slow = _listening(serve)
    misbehaving = Webhook(f"http://127.0.0.1:{slow.getsockname()[1]}/hook", secret=SECRET,
                          timeout=timeout, backoff=30)
    agent, _ = agent_with(pay(), checkpointer=url,
                          notify=[misbehaving, Webhook(receiver.url, secret=SECRET)])
    return agent, slow


def test_a_receiver_that_answers_a_byte_at_a_time_holds_no_other_webhook(
        sqlite_url: str, receiver: Receiver) -> None:
    """httpx's timeout bounds each read: a receiver dripping its answer held the request, and
    every webhook of the dispatcher after it, for as long as it liked (and `stop` waited on
    it). A request gets `timeout` seconds in all; the event is retried."""
    stop = threading.Event()

    def drip(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
                if stop.wait(0.3):
                    return
                conn.sendall(bytes([byte]))

    agent, slow = _beside_a_misbehaving_receiver(drip, 1.0, sqlite_url, receiver)
    try:
        agent.generate("pay")
        started = time.monotonic()
        _dispatcher(agent).run_once()
        assert time.monotonic() - started < 5
        assert _types(receiver.delivered()) == [("approval.requested", "requested")]
        failed = [d for d in agent._storage.ledger.deliveries() if d["last_error"]]
        assert len(failed) == 1 and "no complete answer within 1 s" in failed[0]["last_error"]
        started = time.monotonic()
        _dispatcher(agent).stop(timeout=5)
        assert time.monotonic() - started < 5
    finally:
        stop.set()
        slow.close()


def test_a_receiver_that_never_answers_holds_up_no_other_webhook_while_it_is_retried(
        sqlite_url: str, receiver: Receiver) -> None:
    """One dispatcher thread sent every webhook in turn, and a receiver that never answers
    kept it busy with batch after batch of its own (each request its full timeout): events
    recorded while no dispatcher ran reached the healthy receiver only after ten seconds a
    batch (minutes, with more; helper-130). Each webhook has its thread: twelve events reach
    the healthy one within seconds, while the silent one is still being tried."""
    stop = threading.Event()
    slow = _listening(lambda conn: stop.wait(30))
    hooks = [Webhook(f"http://127.0.0.1:{slow.getsockname()[1]}/hook", secret=SECRET,
                     timeout=1.0), Webhook(receiver.url, secret=SECRET)]
    try:
        agent, _ = agent_with(pay(12), checkpointer=sqlite_url, notify=hooks)
        _dispatcher(agent).stop()
        for _ in range(12):
            agent.generate("pay")
        start_notifications(agent._storage.ledger, hooks)
        deadline = time.monotonic() + 6
        while len(receiver.delivered()) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _types(receiver.delivered()) == [("approval.requested", "requested")] * 12
        assert time.monotonic() < deadline
    finally:
        stop.set()
        slow.close()


def test_a_request_out_of_time_leaves_no_connection_or_thread_behind(
        sqlite_url: str, receiver: Receiver) -> None:
    """A request left behind at its deadline kept its connection (from the pool every webhook
    of the dispatcher shares) and its thread for as long as the receiver dripped: enough of
    them starved every other webhook, whose events were then given up (helper-53). At its
    deadline a request is ended, and its connection closed."""
    closed = threading.Event()
    stop = threading.Event()

    def drip(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Pad: ")
                while not stop.wait(0.05):
                    conn.sendall(b"a")
            except OSError:
                closed.set()

    agent, slow = _beside_a_misbehaving_receiver(drip, 0.5, sqlite_url, receiver)
    try:
        agent.generate("pay")
        _dispatcher(agent).run_once()
        assert [t.name for t in threading.enumerate() if "webhook-post" in t.name] == []
        assert closed.wait(3), "the receiver still holds a connection the dispatcher left"
        assert _types(receiver.delivered()) == [("approval.requested", "requested")]
    finally:
        stop.set()
        slow.close()


def test_a_name_lookup_that_hangs_holds_a_request_no_longer_than_its_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup runs in the event loop's executor, where cancelling does not stop it, and
    `asyncio.run` waited for it on the way out: a resolver that hung held the request, and
    every webhook of the round after it, well past the timeout (helper-55)."""
    real = socket.getaddrinfo
    release = threading.Event()

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("hang.example", b"hang.example"):
            release.wait(30)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                  "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    dispatcher = Dispatcher(Ledger.sqlite())
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match="within 1 s"):
            dispatcher._post(Webhook("http://hang.example/hook", timeout=1.0), b"{}", {})
        assert time.monotonic() - started < 5
    finally:
        release.set()


def test_events_recorded_while_stopped_are_delivered_by_the_next_dispatcher(
        sqlite_url: str, receiver: Receiver) -> None:
    hook = Webhook(receiver.url, secret=SECRET)
    agent, _ = agent_with(pay(), checkpointer=sqlite_url, notify=[hook])
    _dispatcher(agent).stop()
    paused = agent.generate("pay")
    Inbox(sqlite_url).decline(paused.pending_approvals[0].id, decided_by="bob")
    time.sleep(0.2)
    assert receiver.requests == []
    inbox = Inbox(sqlite_url, notify=[hook])
    assert _dispatcher(inbox).flush(timeout=20)
    events = receiver.delivered()
    assert _types(events) == [("approval.requested", "requested"),
                              ("approval.decided", "rejected")]
    assert events[1]["approval"]["decided_by"] == "bob"


def test_a_stopped_dispatcher_sends_nothing_more_and_gives_back_what_it_claimed(
        sqlite_url: str) -> None:
    """After `stop()` each webhook's thread went on through the batch it had claimed (ten
    requests, each up to its timeout: a minute of requests to a silent receiver after the
    process said stop), and those events waited out the claim's lease before anyone sent them
    (helper-131). It ends after the request it is sending; the rest is due again at once,
    the attempt not counted, and the next dispatcher delivers it."""
    slow = Receiver(delay=1.0)
    hook = Webhook(slow.url, secret=SECRET, timeout=5.0)
    try:
        agent, _ = agent_with(pay(5), checkpointer=sqlite_url, notify=[hook])
        _dispatcher(agent).stop()
        for _ in range(5):
            agent.generate("pay")
        dispatcher = start_notifications(agent._storage.ledger, [hook])
        deadline = time.monotonic() + 10
        while not slow.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        dispatcher.stop(timeout=10)
        sent = len(slow.requests)
        time.sleep(1.5)
        assert len(slow.requests) == sent == 1
        left = [d for d in agent._storage.ledger.deliveries() if d["delivered_at"] is None]
        assert [d["attempts"] for d in left] == [0] * 4
        assert _dispatcher(Inbox(sqlite_url, notify=[hook])).flush(timeout=10)
        assert len(slow.delivered()) == 5
    finally:
        slow.close()


def test_an_event_whose_transaction_commits_late_is_delivered_all_the_same(
        sqlite_url: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """An outbox row's time is its INSERT's; the cursor moves to a minute before the
    dispatcher last looked. A transaction that committed its event later than that (it
    waited on a lock, its process was paused) left the event behind the cursor: never sent,
    a restarted dispatcher's saved cursor past it too (helper-130). Every event since the
    webhook's registration is looked at again now and then (`SWEEP_SECONDS`)."""
    import graphkit._notify as notify

    monkeypatch.setattr(notify, "SWEEP_SECONDS", 0.0, raising=False)
    hook = Webhook(receiver.url, secret=SECRET)
    agent, _ = agent_with(pay(), checkpointer=sqlite_url, notify=[hook])
    _dispatcher(agent).stop()
    ledger = agent._storage.ledger
    # (registered an hour ago)
    ledger._sql.execute("UPDATE graphkit_meta SET value = ? WHERE key = ?",
                        (json.dumps({"since": ledger.now() - 3600}), f"notify.since.{hook.target}"))
    dispatcher = Dispatcher(ledger)
    dispatcher.add([hook])
    dispatcher.run_once()  # (the cursor: a minute before now)
    agent.generate("pay")
    ledger._sql.execute("UPDATE graphkit_outbox SET created_at = created_at - 120")
    dispatcher.run_once()
    assert _types(receiver.delivered()) == [("approval.requested", "requested")]


def test_a_killed_process_loses_no_event(sqlite_url: str, tmp_path: Path) -> None:
    """Events recorded by a process whose receiver was down, killed before delivering them
    (one tried once, one never), arrive from a new process, each with its recorded id."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hooks/graphkit"
    done = subprocess.run([sys.executable, "-m", "tests.notify_agent", sqlite_url, url, SECRET],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == -9, done.stderr
    first, second = json.loads(done.stdout.strip().splitlines()[-1])

    ledger = Ledger.sqlite(sqlite_url.removeprefix("sqlite:///"))
    recorded = ledger._sql.query("SELECT event_id, approval_id FROM graphkit_outbox "
                                 "ORDER BY created_at")
    assert [r[1] for r in recorded] == [first, second]
    assert [d["attempts"] for d in ledger.deliveries()] == [1]  # the second never tried

    receiver = Receiver(port=port)
    try:
        inbox = Inbox(sqlite_url, notify=[Webhook(url, secret=SECRET, backoff=0.2)])
        assert _dispatcher(inbox).flush(timeout=20)
        events = receiver.delivered()
        # A retry waits its backoff: the event never tried may arrive first.
        assert sorted((e["id"], e["approval"]["approval_id"]) for e in events) == sorted(
            (str(r[0]), r[1]) for r in recorded)
        assert all(r["verified"] for r in receiver.requests)
    finally:
        receiver.close()


def test_every_process_writes_events_once_one_notifies(sqlite_url: str,
                                                       receiver: Receiver) -> None:
    """An agent without notify= records events once an Inbox in another ledger notifies;
    a re-run audit write (same dedupe key) records no second event."""
    quiet, _ = agent_with(pay(6), checkpointer=sqlite_url)
    quiet.generate("pay")  # no process notifies yet: no event
    ledger = quiet._storage.ledger
    assert ledger._sql.query("SELECT COUNT(*) FROM graphkit_outbox") == [(0,)]

    inbox = Inbox(sqlite_url, notify=[Webhook(receiver.url, secret=SECRET)])
    for _ in range(5):
        quiet.generate("pay")
    assert _dispatcher(inbox).flush(timeout=20)
    ids = [e["id"] for e in receiver.delivered()]
    assert len(ids) == 5 and len(set(ids)) == 5

    row = AuditRow(thread_id="t", approval_id="apr_x", dedupe="apr_x:requested",
                   entry={"event": "requested", "approval_id": "apr_x"})
    ledger.audit([row])
    ledger.audit([row])
    ledger.audit([AuditRow(thread_id="t", approval_id="apr_x",
                           entry={"event": "refused", "approval_id": "apr_x"})])
    assert ledger._sql.query(
        "SELECT COUNT(*) FROM graphkit_outbox WHERE approval_id = 'apr_x'") == [(1,)]


def test_agents_and_inboxes_on_one_database_share_the_processs_dispatcher(
        sqlite_url: str, receiver: Receiver) -> None:
    """Each `Agent` or `Inbox` made with `notify=` started a dispatcher of its own that
    nothing stopped: a process that made one per request grew threads without end (one
    per webhook each, and a keeper; helper-131). A process has one per database; what
    each one asks to notify is added to it."""
    def notify_threads() -> int:
        return sum(t.name.startswith("graphkit-notify") for t in threading.enumerate())

    hooks = [Webhook(receiver.url, secret=SECRET), Webhook(receiver.url + "?2", secret=SECRET)]
    first = Inbox(sqlite_url, notify=hooks[:1])
    before = notify_threads()
    made = [Inbox(sqlite_url, notify=hooks) for _ in range(10)]
    made.append(agent_with(pay(), checkpointer=sqlite_url, notify=hooks[1:])[0])  # type: ignore[arg-type]
    assert {id(_dispatcher(m)) for m in made} == {id(_dispatcher(first))}
    assert {w.target for w in _dispatcher(first).webhooks} == {h.target for h in hooks}
    assert notify_threads() == before + 1  # (the second webhook's)


def test_two_dispatchers_on_one_database_do_not_send_twice(sqlite_url: str,
                                                           receiver: Receiver) -> None:
    hook = Webhook(receiver.url, secret=SECRET)
    first, second = (Inbox(sqlite_url, notify=[hook]) for _ in range(2))
    for d in (first, second):
        _dispatcher(d).stop()
    agent, _ = agent_with(pay(12), checkpointer=sqlite_url)
    for _ in range(12):
        agent.generate("pay")
    dispatchers = [Dispatcher(Inbox(sqlite_url)._storage.ledger) for _ in range(2)]
    for d in dispatchers:
        d.add([hook])
    threads = [threading.Thread(target=d.flush, kwargs={"timeout": 20}) for d in dispatchers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [e["id"] for e in receiver.delivered()]
    assert len(ids) == 12 and len(set(ids)) == 12
    for d in dispatchers:
        d.stop()


def test_slack_format(sqlite_url: str) -> None:
    receiver = Receiver(secret=None)
    try:
        hook = Webhook(receiver.url, format="slack", review_url="https://review.example/")
        agent, _ = agent_with(pay(), checkpointer=sqlite_url, name="billing", notify=[hook])
        paused = agent.generate("pay")
        approval_id = paused.pending_approvals[0].id
        Inbox(sqlite_url).approve(approval_id, decided_by="alice <@U123>", comment="ship it")
        assert _dispatcher(agent).flush(timeout=20)
        requested, decided = receiver.delivered()
        assert receiver.requests[0]["signature"] is None  # no secret: nothing to sign with
        link = f"https://review.example/approvals/{approval_id}"
        for body in (requested, decided):
            assert set(body) == {"text", "blocks"} and isinstance(body["text"], str)
            assert all(isinstance(b, dict) and b["type"] in ("section", "context")
                       for b in body["blocks"])
            shown = json.dumps(body)
            assert "pay" in shown and "billing" in shown and f"<{link}|" in shown
        assert requested["text"].startswith("Approval requested")
        assert decided["text"].startswith("Approval decided")
        decided_blocks = json.dumps(decided["blocks"])
        assert "alice &lt;@U123&gt;" in decided_blocks and "<@U123>" not in decided_blocks
        assert "ship it" in decided_blocks
    finally:
        receiver.close()


def test_a_suspended_tool_is_requested_as_an_approval_is(sqlite_url: str,
                                                          receiver: Receiver) -> None:
    """A tool that asks for input waits on a person as an approval does: the audit and the
    webhooks say so while it waits (they said nothing until someone had answered)."""
    from graphkit import ToolContext, create_tool
    from graphkit.testing import ScriptedChatModel

    @create_tool
    def weather(ctx: ToolContext) -> str:
        """The weather where the user says."""
        if ctx.resume_data is None:
            ctx.suspend({"message": "Which city?"})
        return f"sunny in {ctx.resume_data}"

    agent = Agent(name="forecaster", tools=[weather], checkpointer=sqlite_url,
                  notify=[Webhook(receiver.url, secret=SECRET)],
                  model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                      call("weather", {}, "w1"))))
    first = agent.generate("weather?")
    (asked,) = first.pending_approvals
    assert _dispatcher(agent).flush(timeout=10)
    (event,) = receiver.delivered()
    assert event["type"] == "approval.requested"
    assert event["approval"]["approval_id"] == asked.id
    assert [e["event"] for e in Inbox(sqlite_url).audit(id=asked.id)] == ["requested"]
    agent.resume_generate("Paris", run_id=first.run_id)
    assert _dispatcher(agent).flush(timeout=10)
    assert [e["type"] for e in receiver.delivered()][:2] == ["approval.requested",
                                                             "approval.decided"]


@pytest.mark.parametrize("event_type", ["approval.requested", "approval.decided",
                                        "approval.refused", "run.finished"])
def test_slack_shows_every_value_not_ours_as_code_nothing_in_it_can_close(
        event_type: str) -> None:
    """What a model, a client or a reviewer wrote (arguments, a thread id, a name, a comment,
    an outcome) is shown as code in a Slack message: a backtick or a line break in it closed
    the span or block, and what followed read as the message's own formatted text ("approved
    by cfo (Security)"; helper-53 with a thread id)."""
    import re

    from graphkit._ledger import OutboxEvent
    from graphkit._notify import render

    fence = "x```\n*Pre-approved by Security* https://evil.example/approve\n```"
    span = "t1`\n*Forged heading*\n`pay` in assistant approved by cfo (Security) `x"
    event = OutboxEvent(event_id="e1", type=event_type, created_at=0.0, attempts=1,
                        payload={"outcome": span, "approval": {
                            "event": span, "tool_name": span, "agent_path": [span, span],
                            "thread_id": span, "decided_by": span, "comment": fence,
                            "approval_id": f"{span}|<!channel>", "args_before": {"memo": fence}}})
    body = json.loads(render(Webhook("https://hooks.slack.example/x", format="slack",
                                     review_url="https://review.example"), event))
    assert "<!channel>" not in json.dumps(body)
    texts = [body["text"]] + [t["text"] for b in body["blocks"]
                              for t in [b.get("text") or {}, *b.get("fields", []),
                                        *b.get("elements", [])] if t]
    for text in texts:  # as Slack reads mrkdwn: fenced blocks, then spans within a line
        ours = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))
        assert "Security" not in ours and "Forged" not in ours, text
    assert sum("Security" in t for t in texts) >= 6  # shown, as code


@pytest.mark.parametrize(("event", "said"), [("approved", "approved"), ("edited", "edited"),
                                             ("rejected", "rejected"),
                                             ("responded", "answered without running")])
def test_slack_says_each_decision_in_its_own_word(event: str, said: str) -> None:
    """A Slack message names a decision as the API, the CLI and the audit do (it said
    "declined" for `rejected`)."""
    from graphkit._ledger import OutboxEvent
    from graphkit._notify import render

    decided = OutboxEvent(event_id="e1", type="approval.decided", created_at=0.0, attempts=1,
                          payload={"approval": {"event": event, "tool_name": "pay",
                                                "agent_path": ["billing"], "decided_by": "cfo"}})
    body = json.loads(render(Webhook("https://hooks.slack.example/x", format="slack"), decided))
    assert said in json.dumps(body) and "declined" not in json.dumps(body)


def test_verify_signature_rejects_what_it_should() -> None:
    body = b'{"id":"e1"}'
    header = sign(body, SECRET)
    assert verify_signature(header, body, SECRET)
    assert not verify_signature(header, body + b" ", SECRET)
    assert not verify_signature(None, body, SECRET)
    assert not verify_signature("", body, SECRET)
    assert not verify_signature("garbage", body, SECRET)
    assert not verify_signature(header.split(",")[1], body, SECRET)  # no timestamp
    assert not verify_signature(header, body, "")
    assert not verify_signature(sign(body, SECRET, int(time.time()) + 3600), body, SECRET)
    t = header.split(",")[0]
    assert not verify_signature(f"{t},v1=00", body, SECRET)
    assert verify_signature(f"{t},v1=00,{header.split(',')[1]}", body, SECRET)  # rotation


def test_webhook_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="http"):
        Webhook("ftp://x")
    with pytest.raises(ValueError, match="format"):
        Webhook("https://x", format="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="secret"):
        Webhook("https://x", secret="")
    with pytest.raises(ValueError, match="max_attempts"):
        Webhook("https://x", max_attempts=0)
    assert SECRET not in repr(Webhook("https://x", secret=SECRET))
    assert Webhook("https://x", secret="a").target == Webhook("https://x", secret="b").target
    assert Webhook("https://x").target != Webhook("https://x", format="slack").target
    with pytest.raises(ValueError, match="twice"):
        Agent(name="a", model=_model(),
              notify=[Webhook("https://x"), Webhook("https://x", secret="s")])


def _model() -> Any:
    from graphkit.testing import ScriptedChatModel

    return ScriptedChatModel(["hi"])


def test_notifications_follow_outcomes(sqlite_url: str, receiver: Receiver) -> None:
    """Every event that contradicts an earlier one is sent too: a receiver that keeps the last
    event per approval holds the truth. A decision the gate withdraws (an edit the tool's own
    model reads otherwise) is followed by `approval.refused` naming the `approval.decided` it
    replaces; a revoked grant by `grant.revoked`; each decided call by `run.finished` with
    its outcome: ran, failed, not_run."""
    from graphkit import create_tool
    from graphkit.testing import ScriptedChatModel

    @create_tool(needs_approval=True)
    def transfer(amount: float, to: str) -> str:
        """Move money."""
        if to == "FAIL":
            raise RuntimeError("bank down")
        return f"moved {amount} to {to}"

    from langchain_core.messages import HumanMessage

    def script(messages: list[Any]) -> Any:
        if not isinstance(messages[-1], HumanMessage):
            return "one"
        asked = sum(isinstance(m, HumanMessage) for m in messages)
        to = {1: "ACME", 2: "FAIL"}.get(asked, "ACME")
        return turn(call("transfer", {"amount": float(asked), "to": to}, f"t{asked}"))
    def cfo_only(decided_by: str | None, pending: Any) -> bool:
        return decided_by == "cfo"

    agent = Agent(name="bank", tools=[transfer], model=ScriptedChatModel(script),
                  checkpointer=sqlite_url, approvers=cfo_only,
                  notify=[Webhook(receiver.url, secret=SECRET)])
    first = agent.generate("move")
    (pending,) = first.pending_approvals
    # a door with a policy of its own records mallory's approval; the agent's gate refuses
    # it and withdraws it: the call waits again
    lax_inbox(sqlite_url).approve(pending.id, decided_by="mallory")
    agent.resume(run_id=first.run_id)
    assert agent._storage.ledger.approval(pending.id).status == "pending"
    # approved again, as it is: it runs
    done = agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo",
                                            remember="thread")
    assert done.text == "one"
    with pytest.raises(RuntimeError, match="bank down"):  # the grant approves it: it fails
        agent.generate("again", thread_id=first.thread_id)
    (grant,) = Inbox(sqlite_url).grants(thread_id=first.thread_id)
    Inbox(sqlite_url).revoke(grant["id"], decided_by="cfo")
    third = agent.generate("and again", thread_id=first.thread_id)
    agent.decline_tool_call_generate(run_id=third.run_id, decided_by="cfo")
    assert _dispatcher(agent).flush(timeout=20)
    events = receiver.delivered()
    by_approval: dict[str, dict[str, Any]] = {}
    for event in events:
        by_approval[event["approval"]["approval_id"]] = event  # the last event per approval
    kinds = [e["type"] for e in events if e["approval"]["approval_id"] == pending.id]
    assert kinds == ["approval.requested", "approval.decided", "approval.refused",
                     "approval.decided", "run.finished", "grant.revoked"]
    decided = next(e for e in events if e["type"] == "approval.decided"
                   and e["approval"]["approval_id"] == pending.id)
    refused = next(e for e in events if e["type"] == "approval.refused")
    assert refused["replaces"] == decided["id"]
    finished = [e for e in events if e["type"] == "run.finished"
                and e["approval"]["approval_id"] == pending.id]
    assert [e["outcome"] for e in finished] == ["ran"]
    assert all(e["type"] == "run.finished" for a, e in by_approval.items() if a != pending.id)
    outcomes = sorted(e["outcome"] for e in events if e["type"] == "run.finished")
    assert outcomes == ["failed", "not_run", "ran"]
    revoked = [e for e in events if e["type"] == "grant.revoked"]
    assert len(revoked) == 1 and revoked[0]["grant_id"] == grant["id"]
    # every event's time as every other timestamp graphkit writes: milliseconds, UTC with Z
    # (`run.finished` said whole seconds: helper-113)
    import re

    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
                            e["approval"]["at"]) for e in events), [
        (e["type"], e["approval"]["at"]) for e in events]


def test_a_call_fenced_after_its_process_died_is_told_as_finished(sqlite_url: str) -> None:
    """An approved payment's process dies after the tool started; a new user message fences
    the call (it never runs again; whether it took effect is unknown): `run.finished` says
    so, so the receiver's last event for the approval is not "approved"."""
    import sqlite3

    from graphkit import create_tool
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import cfo_only, dead_owner

    db = sqlite_url.removeprefix("sqlite:///")
    dead = dead_owner()

    @create_tool(needs_approval=True)
    def pay(amount: int, payee: dict[str, Any]) -> str:
        """Pay."""
        conn = sqlite3.connect(db)  # the payment went out; the process dies (as if)
        conn.execute("UPDATE graphkit_calls SET executed = ? WHERE tool_name = 'pay'", (dead,))
        conn.commit()
        conn.close()
        raise KeyboardInterrupt("power loss")

    agent = Agent(name="assistant", tools=[pay], checkpointer=sqlite_url, approvers=cfo_only,
                  model=ScriptedChatModel([turn(call("pay", PAY, "c1")), "ok", "answer"]))
    agent._storage.ledger.enable_notify(["http://127.0.0.1:9/hook"])
    first = agent.generate("pay ACME")
    (pending,) = first.pending_approvals
    Inbox(sqlite_url, agents=[agent]).approve(pending.id, decided_by="cfo")
    with pytest.raises(KeyboardInterrupt):
        agent.resume(run_id=first.run_id)
    agent.generate("what happened?", thread_id=first.thread_id)
    rows = agent._storage.ledger._sql.query(
        "SELECT type, payload FROM graphkit_outbox WHERE approval_id = ? ORDER BY created_at",
        (pending.id,))
    assert [t for t, _ in rows][-1] == "run.finished"
    last = json.loads(rows[-1][1])
    assert last["outcome"] == "failed" and "unknown" in last["result"]
