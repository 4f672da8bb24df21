"""Webhook notifications of approvals: requested, decided, expired.

The ledger writes each notified audit entry to its outbox in the transaction that writes the
entry (whenever some process sharing the database notifies: the `notify` row of
`graphkit_meta`), so a crash or a restart loses none. A `Dispatcher`, one daemon thread per
process and ledger, delivers them: it opens a delivery per event and webhook, claims due
deliveries with a lease (so two processes rarely send the same event at once), POSTs each one
signed, and retries with exponential backoff. Delivery is at least once: an event keeps its
`id` across retries and processes, and receivers drop the ids they have seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import importlib
import json
import logging
import os
import threading
import time
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, TypeVar

import httpx

from graphkit._ledger import Ledger, OutboxEvent, iso_ms
from graphkit._owner import new_owner
from graphkit._text import printable

__all__ = [
    "SIGNATURE_HEADER",
    "Dispatcher",
    "Webhook",
    "render",
    "sign",
    "start_notifications",
    "verify_signature",
]

log = logging.getLogger("graphkit.notify")
_T = TypeVar("_T")

SIGNATURE_HEADER = "X-Graphkit-Signature"
"""`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the webhook's secret>`."""
EVENT_HEADER = "X-Graphkit-Event"
EVENT_ID_HEADER = "X-Graphkit-Event-Id"
POLL_SECONDS = 1.0
"""How often an idle dispatcher looks for due deliveries (writes in this process wake it)."""
BATCH = 10
"""Deliveries claimed at once per webhook; the claim's lease covers sending all of them."""
LEASE_SECONDS = 30.0
MARGIN_SECONDS = 60.0
"""Events are opened for delivery again this far back: a transaction that recorded an event
before the dispatcher looked may commit after it looked."""
SWEEP_SECONDS = 300.0
"""How often every event since a webhook's registration (within `RETENTION_SECONDS`) is looked
at again: a transaction that recorded an event and committed later than `MARGIN_SECONDS`
after (a lock it waited on, a process paused) left it behind the cursor, never sent
(helper-130)."""
CURSOR_SAVE_SECONDS = 60.0
RETENTION_SECONDS = 7 * 24 * 3600.0
"""Events older than this with nothing left to attempt are pruned from the outbox."""
PRUNE_EVERY_SECONDS = 3600.0
MAX_ERROR = 1_000


@dataclass(frozen=True, slots=True)
class Webhook:
    """Where to POST approval events.

    Args:
        url: An `http://` or `https://` URL.
        secret: Signs every request (`X-Graphkit-Signature`); check it with
            `graphkit.verify_signature`. Optional only for receivers that cannot check a
            signature (a Slack incoming webhook, whose URL is its secret).
        format: `"json"` (`{"id", "type", "created_at", "approval": {...}}`) or `"slack"`
            (`{"text", "blocks"}` for a Slack incoming webhook).
        timeout: Seconds per request, in all (connecting, sending, the answer).
        max_attempts: Attempts per event before it is given up (recorded in the ledger).
        review_url: Base URL of your review UI: events link to `<review_url>/approvals/<id>`.
        backoff: Seconds before the first retry; each retry waits twice as long, up to
            `max_backoff`.
    """

    url: str
    _: KW_ONLY
    secret: str | None = field(default=None, repr=False)
    format: Literal["json", "slack"] = "json"
    timeout: float = 10.0
    max_attempts: int = 10
    review_url: str | None = None
    backoff: float = 1.0
    max_backoff: float = 300.0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            msg = f"webhook url must start with http:// or https://, got {self.url!r}"
            raise ValueError(msg)
        if self.secret is not None and (not isinstance(self.secret, str) or not self.secret):
            msg = "webhook secret must be a non-empty string (or None for no signature)"
            raise ValueError(msg)
        if self.format not in ("json", "slack"):
            msg = f"webhook format must be 'json' or 'slack', got {self.format!r}"
            raise ValueError(msg)
        if not self.timeout > 0 or not self.backoff > 0 or self.max_backoff < self.backoff:
            msg = "webhook timeout and backoff must be positive, and max_backoff >= backoff"
            raise ValueError(msg)
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or (
                self.max_attempts < 1):
            msg = f"webhook max_attempts must be a positive integer, got {self.max_attempts!r}"
            raise ValueError(msg)

    @property
    def target(self) -> str:
        """Its name in the ledger: the same URL and format are the same target in every
        process (the secret may rotate; it is never stored)."""
        digest = hashlib.sha256(f"{self.format}\n{self.url}".encode()).hexdigest()
        return f"wh_{digest[:24]}"

    def retry_in(self, attempts: int) -> float | None:
        """Seconds before the next attempt after `attempts` failed ones; None: give up."""
        if attempts >= self.max_attempts:
            return None
        return float(min(self.backoff * 2 ** max(attempts - 1, 0), self.max_backoff))


# ---------------------------------------------------------------------- signatures


def sign(body: bytes, secret: str, timestamp: int | None = None) -> str:
    """The `X-Graphkit-Signature` value for `body`."""
    t = int(time.time()) if timestamp is None else int(timestamp)
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify_signature(header: str | None, body: bytes | str, secret: str, *,
                     tolerance: float = 300) -> bool:
    """Whether `header` (`X-Graphkit-Signature`) signs exactly `body` (the raw request body)
    with `secret`, at most `tolerance` seconds from now (an older one may be a replay)."""
    if not header or not secret or not isinstance(header, str):
        return False
    raw = body.encode() if isinstance(body, str) else bytes(body)
    timestamp: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isascii() and value.isdigit() and len(value) < 16:
            timestamp = int(value)
        elif key == "v1" and value:
            macs.append(value)
    if timestamp is None or not macs or abs(time.time() - timestamp) > tolerance:
        return False
    expected = sign(raw, secret, timestamp).partition(",v1=")[2].encode()
    return any(hmac.compare_digest(expected, mac.encode()) for mac in macs)


# ---------------------------------------------------------------------- bodies


def _link(webhook: Webhook, event: OutboxEvent) -> str | None:
    approval_id = (event.payload.get("approval") or {}).get("approval_id")
    if webhook.review_url and approval_id:
        return f"{webhook.review_url.rstrip('/')}/approvals/{approval_id}"
    link = event.payload.get("link")
    return str(link) if link else None


def _json_body(webhook: Webhook, event: OutboxEvent) -> dict[str, Any]:
    body: dict[str, Any] = {"id": event.event_id, "type": event.type,
                            "created_at": iso_ms(event.created_at),
                            "approval": event.payload.get("approval") or {}}
    for key in ("replaces", "outcome", "result", "grant_id"):
        if key in event.payload:
            body[key] = event.payload[key]
    link = _link(webhook, event)
    if link:
        body["link"] = link
    return body


_VERBS = {
    "approved": "approved", "edited": "approved with edited arguments", "rejected": "rejected",
    "responded": "answered without running", "auto_approved": "approved by a remembered grant",
    "resumed": "answered", "cancelled": "cancelled", "superseded": "superseded",
}


def _escape(text: Any, limit: int = 1_500) -> str:
    """Slack mrkdwn text: `&`, `<` and `>` escaped (no links or mentions smuggled in)."""
    value = str(text)
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: Any, limit: int = 200) -> str:
    """A value that is not ours (a name, an id, a path) as Slack inline code, on one line,
    that nothing in it can close: a backtick or a line break in a thread id or a reviewer's
    name ended the span, and what followed read as the message's own ("approved by cfo
    (Security)", helper-53). Its backticks show as the look-alike U+02CB."""
    return f"`{_escape(printable(str(text)), limit).replace('`', 'ˋ')}`"


def _block(value: Any, limit: int = 2_000) -> str:
    """Words or data that are not ours as a Slack code block, shown as written: each backtick
    is followed by a zero-width space, which no run of them survives as a fence."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True,
                                                           indent=1)
    return "```" + _escape(text, limit).replace("`", "`\u200b") + "```"


def _slack_body(webhook: Webhook, event: OutboxEvent) -> dict[str, Any]:
    entry: Mapping[str, Any] = event.payload.get("approval") or {}
    tool = _code(entry.get("tool_name") or "a tool")
    path = _code("/".join(entry.get("agent_path") or []) or "?")
    decider = entry.get("decided_by")
    by = f" by {_code(decider)}" if decider else ""
    what = str(entry.get("event") or "")
    if event.type == "approval.requested":
        title = "Approval requested"
        summary = f"{tool} in {path} waits for a decision"
    elif event.type == "approval.expired":
        title = "Approval expired"
        summary = f"{tool} in {path} was not decided in time: declined"
    elif event.type == "approval.refused":
        title = "Decision withdrawn"
        summary = (f"{tool} in {path}: the decision{by} was refused by the agent's checks "
                   "and does not stand; it waits again")
    elif event.type == "grant.revoked":
        title = "Grant revoked"
        summary = f"later {tool} calls in {path} ask again"
    elif event.type == "run.finished":
        title = "Call finished"
        outcome = str(event.payload.get("outcome") or "")
        summary = f"{tool} in {path}: " + {"ran": "ran", "failed": "failed",
                                           "not_run": "did not run",
                                           "stopped": "was stopped after it started"
                                           }.get(outcome, _code(outcome))
    else:
        title = "Approval decided"
        summary = f"{tool} in {path} {_VERBS.get(what) or _code(what, 50)}{by}"
    link = _link(webhook, event)
    if link:  # (a link's text ends at "|", the link at ">")
        link = "".join(f"%{ord(c):02X}" if c in "<>|" or not c.isprintable() or c.isspace()
                       else "&amp;" if c == "&" else c for c in link)
    fields = [{"type": "mrkdwn", "text": f"*Tool*\n{tool}"},
              {"type": "mrkdwn", "text": f"*Agent*\n{path}"}]
    if event.type != "approval.requested":
        fields.append({"type": "mrkdwn",
                       "text": f"*Decided by*\n{_code(decider) if decider else '-'}"})
    if entry.get("thread_id"):
        fields.append({"type": "mrkdwn", "text": f"*Thread*\n{_code(entry['thread_id'])}"})
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*\n{summary}"}},
        {"type": "section", "fields": fields},
    ]
    args = entry.get("args_after") if entry.get("args_after") is not None else entry.get(
        "args_before")
    if args is not None:
        blocks.append({"type": "section",
                       "text": {"type": "mrkdwn", "text": f"*Arguments*\n{_block(args)}"}})
    if entry.get("comment"):
        blocks.append({"type": "section", "text": {
            "type": "mrkdwn", "text": f"*Comment*\n{_block(str(entry['comment']))}"}})
    if link:
        blocks.append({"type": "section", "text": {
            "type": "mrkdwn", "text": f"<{link}|Open the review card>"}})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": (
        f"approval {_code(entry.get('approval_id') or '-', 100)} · event "
        f"{_code(event.event_id)} · {event.type}")}]})
    text = f"{title}: {summary}" + (f" <{link}|review>" if link else "")
    return {"text": text, "blocks": blocks}


def render(webhook: Webhook, event: OutboxEvent) -> bytes:
    """The request body of `event` for `webhook`, as sent (and signed)."""
    body = _slack_body(webhook, event) if webhook.format == "slack" else _json_body(
        webhook, event)
    return json.dumps(body, default=str, separators=(",", ":"), ensure_ascii=False).encode()


# ---------------------------------------------------------------------- delivery


def _import_what_a_request_imports() -> None:
    """Import what httpx imports on its first request (httpcore, anyio's asyncio backend), in
    the thread that makes a dispatcher: each webhook's thread posts from an event loop of its
    own, and two loops importing them at once waited on Python's import lock, a blocking call
    the LangGraph server's detector refuses (the request failed). (A lock of our own to send
    the first request alone held a process forked meanwhile forever: helper-131.)"""
    for name in ("httpcore", "anyio._backends._asyncio"):
        with contextlib.suppress(ImportError):  # (another version: it imports its own way)
            importlib.import_module(name)


def _on_a_loop_of_its_own(request: Coroutine[Any, Any, _T]) -> _T:
    """Run `request` on a new event loop, and close it without waiting for the threads of its
    executor: `asyncio.run` waits for them, and a name lookup runs in one, which a hanging
    resolver kept well past the webhook's timeout (helper-55). Such a lookup ends on its own."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(request)
    finally:
        loop.close()


class Dispatcher:
    """Delivers the outbox of one ledger to this process's webhooks, in daemon threads: one
    per webhook, so that a receiver that is slow or away holds up no other (one thread for
    them all sent a slow receiver's retries, batch after batch, before any event to the
    next: helper-130), and one that keeps the outbox (pruning).

    `flush(timeout=...)` delivers synchronously (for tests and scripts); `stop()` ends the
    threads (events recorded meanwhile wait in the outbox for the next dispatcher).
    """

    def __init__(self, ledger: Ledger, *, poll: float = POLL_SECONDS,
                 key: tuple[int, int | str] | None = None) -> None:
        self.ledger = ledger
        self.poll = poll
        self.owner = new_owner()
        self.key = key if key is not None else _key(ledger)
        """Where `start_notifications` registers it (a stopped one leaves the registry)."""
        self._webhooks: dict[str, Webhook] = {}
        self._cursors: dict[str, float] = {}
        self._saved: dict[str, float] = {}
        self._swept: dict[str, float] = {}
        self._lock = threading.Lock()
        self._rounds: dict[str, threading.Lock] = {}
        """One per webhook: its deliveries go one round at a time (a flush beside its
        thread)."""
        self._wakes: dict[str, threading.Event] = {}
        self._senders: dict[str, threading.Thread] = {}
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._tls = httpx.create_ssl_context()
        self._pruned = 0.0
        _import_what_a_request_imports()

    @property
    def webhooks(self) -> list[Webhook]:
        with self._lock:
            return list(self._webhooks.values())

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def add(self, webhooks: Iterable[Webhook]) -> None:
        """Deliver to these webhooks too (a webhook with the same URL and format replaces the
        one it had: a rotated secret)."""
        with self._lock:
            for webhook in webhooks:
                self._webhooks[webhook.target] = webhook
                self._rounds.setdefault(webhook.target, threading.Lock())
                self._wakes.setdefault(webhook.target, threading.Event())
            running = self._thread is not None and self._thread.is_alive()
        if running:
            self._start_senders()

    def _start_senders(self) -> None:
        """A thread for each webhook that has none running."""
        with self._lock:
            for target in self._webhooks:
                sender = self._senders.get(target)
                if self._stopped.is_set() or (sender is not None and sender.is_alive()):
                    continue
                sender = self._senders[target] = threading.Thread(
                    target=self._send_all, args=(target,), daemon=True,
                    name=f"graphkit-notify-{len(self._senders)}")
                sender.start()

    def start(self) -> None:
        with self._lock:
            if self._stopped.is_set():
                msg = "this dispatcher was stopped; start_notifications makes a new one"
                raise RuntimeError(msg)
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._run, name="graphkit-notify",
                                            daemon=True)
            if self.wake not in Ledger._outbox_listeners:
                Ledger._outbox_listeners.append(self.wake)
            self._thread.start()
        self._start_senders()

    def wake(self) -> None:
        with self._lock:
            wakes = list(self._wakes.values())
        for event in wakes:
            event.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop each thread after the request it is sending; undelivered events stay in the
        outbox, and what a thread had claimed beyond that request is given back, due at once
        for the next dispatcher (a batch of requests to a silent receiver went on for a
        minute after `stop`: helper-131). A stopped dispatcher does not start again."""
        self._stopped.set()
        self.wake()
        with _REGISTRY_LOCK:
            if _DISPATCHERS.get(self.key) is self:
                del _DISPATCHERS[self.key]
        with self._lock:
            threads = [self._thread, *self._senders.values()]
        if self.wake in Ledger._outbox_listeners:
            Ledger._outbox_listeners.remove(self.wake)
        deadline = time.monotonic() + timeout
        for thread in threads:  # (together: each waits out its own request at most)
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def flush(self, timeout: float = 10.0) -> bool:
        """Deliver every due event now, waiting for retries that fall due within `timeout`
        seconds. True when nothing is left to attempt (delivered, or given up)."""
        if self._stopped.is_set():
            msg = "this dispatcher was stopped"
            raise RuntimeError(msg)
        deadline = time.monotonic() + timeout
        while True:
            self.run_once()
            webhooks = self.webhooks
            wait = self.ledger.next_delivery({w.target: w.max_attempts for w in webhooks})
            if wait is None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(max(wait, 0.01), remaining, 0.5))

    def run_once(self) -> int:
        """One round for every webhook, side by side: open deliveries for new events, then
        claim and send the due ones. Returns the number of requests sent."""
        webhooks = self.webhooks
        if len(webhooks) <= 1:
            sent = sum(self._round(w.target) for w in webhooks)
        else:
            with ThreadPoolExecutor(len(webhooks), thread_name_prefix="graphkit-notify-round"
                                    ) as pool:
                sent = sum(pool.map(self._round, [w.target for w in webhooks]))
        self._prune()
        return sent

    def _round(self, target: str) -> int:
        """One round of one webhook (`run_once`'s, or its thread's)."""
        sent = 0
        with self._lock:
            webhook, held = self._webhooks.get(target), self._rounds.get(target)
        if webhook is None or held is None:
            return 0
        with held:
            if self._stopped.is_set():
                return 0
            self._open(target)
            while True:
                webhook = self._webhooks.get(target, webhook)  # (a secret rotated meanwhile)
                batch = self.ledger.claim_deliveries(
                    target, self.owner, max_attempts=webhook.max_attempts,
                    lease=LEASE_SECONDS + BATCH * webhook.timeout, limit=BATCH)
                for i, event in enumerate(batch):
                    if self._stopped.is_set():  # (the rest is given back, due at once)
                        self.ledger.unclaim([e.event_id for e in batch[i:]], target,
                                            self.owner)
                        break
                    self._send(webhook, event)
                    sent += 1
                if len(batch) < BATCH or self._stopped.is_set():
                    break
        return sent

    def _prune(self) -> None:
        if time.monotonic() - self._pruned > PRUNE_EVERY_SECONDS:
            self._pruned = time.monotonic()
            self.ledger.prune_outbox(RETENTION_SECONDS)

    def _open(self, target: str) -> None:
        cursor = self._cursors.get(target)
        if cursor is None:
            cursor = self.ledger.notify_cursor(target)
            if cursor is None:  # registered by another ledger object: from now on
                self.ledger.enable_notify([target])
                cursor = self.ledger.notify_cursor(target) or self.ledger.now()
            self._saved[target] = cursor
        if time.monotonic() - self._swept.get(target, 0.0) > SWEEP_SECONDS:
            self._swept[target] = time.monotonic()
            since = self.ledger.notify_since(target)
            floor = self.ledger.now() - RETENTION_SECONDS
            self.ledger.open_deliveries(target, max(floor, cursor if since is None else since))
        looked = self.ledger.open_deliveries(target, cursor)
        cursor = max(cursor, looked - MARGIN_SECONDS)
        self._cursors[target] = cursor
        if cursor - self._saved.get(target, cursor) >= CURSOR_SAVE_SECONDS:
            self.ledger.save_notify_cursor(target, cursor)
            self._saved[target] = cursor

    def _send(self, webhook: Webhook, event: OutboxEvent) -> None:
        error: str | None = None
        try:
            body = render(webhook, event)
            headers = {"Content-Type": "application/json", "User-Agent": "graphkit-webhook",
                       EVENT_HEADER: event.type, EVENT_ID_HEADER: event.event_id}
            if webhook.secret:
                headers[SIGNATURE_HEADER] = sign(body, webhook.secret)
            status, text = self._post(webhook, body, headers)
            if not 200 <= status < 300:
                error = f"HTTP {status}: {text[:200]}"
        except Exception as exc:  # a connection error, a timeout, or a body that cannot be made
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            self.ledger.delivered(event.event_id, webhook.target)
            return
        retry_in = webhook.retry_in(event.attempts)
        log.warning("webhook %s: event %s (%s) attempt %d failed: %s%s", webhook.target,
                    event.event_id, event.type, event.attempts, error,
                    "" if retry_in is not None else "; giving up")
        self.ledger.delivery_failed(event.event_id, webhook.target, self.owner,
                                    error=error[:MAX_ERROR], retry_in=retry_in)

    def _post(self, webhook: Webhook, body: bytes, headers: dict[str, str]
              ) -> tuple[int, str]:
        """The POST's status and the start of its body, within `webhook.timeout` in all.
        httpx's timeout bounds each read, so a receiver that answers a byte at a time could
        hold a request as long as it liked. A request left behind at its deadline held its
        connection and thread as long, and enough of them starved every other webhook of
        connections (helper-53): so the request is cancelled at its deadline, which closes
        its connection, on a loop of its own (the caller may be on one: a notebook)."""
        with ThreadPoolExecutor(1, thread_name_prefix="graphkit-webhook-post") as pool:
            return pool.submit(_on_a_loop_of_its_own, self._apost(webhook, body, headers)
                               ).result()

    async def _apost(self, webhook: Webhook, body: bytes, headers: dict[str, str]
                     ) -> tuple[int, str]:
        async with httpx.AsyncClient(follow_redirects=False, verify=self._tls) as client:
            try:
                async with asyncio.timeout(webhook.timeout), client.stream(
                        "POST", webhook.url, content=body, headers=headers,
                        timeout=webhook.timeout) as response:
                    text = b"" if 200 <= response.status_code < 300 else await anext(
                        response.aiter_bytes(MAX_ERROR), b"")
                    return response.status_code, text.decode("utf-8", "replace")
            except TimeoutError:
                msg = f"no complete answer within {webhook.timeout:g} s"
                raise TimeoutError(msg) from None

    def _run(self) -> None:
        """The outbox's keeper (its webhooks each have a thread of their own)."""
        while not self._stopped.is_set():
            try:
                self._prune()
            except Exception:  # the database was away: try again later
                log.exception("graphkit notifications: pruning the outbox failed")
            self._stopped.wait(self.poll)

    def _send_all(self, target: str) -> None:
        """One webhook's thread: a round whenever woken (a write in this process), else every
        `poll` seconds."""
        wake = self._wakes[target]
        while not self._stopped.is_set():
            try:
                self._round(target)
            except Exception:  # the database was away: try again on the next round
                log.exception("graphkit notifications: a delivery round failed")
            if wake.wait(self.poll) and not self._stopped.is_set():
                wake.clear()
                self._stopped.wait(0.02)  # let the transaction that woke us commit


_DISPATCHERS: dict[tuple[int, int | str], Dispatcher] = {}
_REGISTRY_LOCK = threading.Lock()


def _key(ledger: Ledger, database: str | None = None) -> tuple[int, int | str]:
    """A process's dispatcher for a database: one, whichever `Agent` or `Inbox` opened it (a
    dispatcher each, never stopped, left threads that grew with every one made: helper-131);
    for an in-memory database (or none named), its ledger's."""
    return os.getpid(), database if database and database != "memory" else id(ledger)


def start_notifications(ledger: Ledger, webhooks: Sequence[Webhook], *,
                        database: str | None = None) -> Dispatcher:
    """Turn the outbox on in `ledger`'s database (at `database`, its URL), register
    `webhooks`, and start (or extend) this process's dispatcher for that database."""
    hooks = list(webhooks)
    for webhook in hooks:
        if not isinstance(webhook, Webhook):
            msg = f"notify= takes graphkit.Webhook objects, got {type(webhook).__name__}"
            raise TypeError(msg)
    targets = [w.target for w in hooks]
    if len(set(targets)) != len(targets):
        msg = "notify= names the same webhook (URL and format) twice"
        raise ValueError(msg)
    review_url = next((w.review_url for w in hooks if w.review_url), None)
    ledger.enable_notify(targets, review_url=review_url)
    key = _key(ledger, database)
    with _REGISTRY_LOCK:
        dispatcher = _DISPATCHERS.get(key)
        if dispatcher is None:
            dispatcher = _DISPATCHERS[key] = Dispatcher(ledger, key=key)
    dispatcher.add(hooks)
    dispatcher.start()
    return dispatcher
