"""The reviewers' web inbox: `graphkit serve --db URL`, or `graphkit.web:app` in langgraph.json.

Server-rendered pages (Starlette), a little JavaScript, every asset in the package. No page
and no decision without an authenticated reviewer; every state-changing request is a POST
with a CSRF token; decisions go through `graphkit.Inbox`, the one decision path, so the
approvers policy, digests, expiry and the ledger's exactly-once claim apply as at every other
door. The pending list updates live through server-sent events.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from langchain_core.messages import BaseMessage
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from graphkit import _html as render
from graphkit._limits import MAX_BYTES, human_size
from graphkit._review import named
from graphkit._settings import Approvers
from graphkit._storage import Storage, open_storage
from graphkit.agent import SERVER_ENV
from graphkit.errors import ArgsDigestMismatchError, GraphkitError, ResumeDataError
from graphkit.inbox import Inbox
from graphkit.server_auth import parse_tokens
from graphkit.types import PendingApproval
from graphkit.web._auth import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    Authenticator,
    Sessions,
    SignIns,
    token_authenticator,
)
from graphkit.web._server import Continuation, ServerRuns, local_continuation
from graphkit.web._server import thread_messages as server_thread_messages

if TYPE_CHECKING:
    from graphkit.agent import Agent

__all__ = ["app", "create_app", "server_app"]

STATIC = Path(__file__).with_name("static")
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'self'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""No page of the inbox may be framed (a click on a hidden card must not decide anything),
and nothing but the package's own assets runs on it."""
HSTS = ("Strict-Transport-Security", "max-age=31536000")
"""Served over https (directly, or behind a proxy that says so): the browser never sends the
session cookie, or takes a page, over plain http to this host again."""
logger = logging.getLogger("graphkit")
LIVE_SECONDS = 0.5
"""How often the live list looks for changes."""


ThreadMessages = Callable[[str], Awaitable[list[BaseMessage]]]
"""Reads a thread's messages from where its state lives (the LangGraph server's API)."""


class _Web:
    """The app's state: the inbox, who is looking, and how sessions are signed."""

    def __init__(self, inbox: Inbox, authenticate: Authenticator | None,
                 tokens: Mapping[str, str], sessions: Sessions,
                 thread_messages: ThreadMessages | None = None,
                 server: ServerRuns | None = None) -> None:
        self.inbox = inbox
        self.server = server
        """The LangGraph server this app is mounted in, which continues decided runs."""
        self._retrying: asyncio.Task[None] | None = None
        self.authenticate = authenticate
        self.check_token = token_authenticator(tokens) if tokens else None
        self.sessions = sessions
        self.sign_ins = SignIns()
        self.credentials = {sessions.credential(token): identity
                            for token, identity in tokens.items()}
        """The tokens known now, as sessions keep them: a session lives while its token does."""
        self.thread_messages = thread_messages

    def keep_continuing(self) -> None:
        """Inside a LangGraph server: from the first request on, start again every
        continuation whose last attempt failed (a task on the server's loop)."""
        if self.server is not None and self._retrying is None:
            self.server.loop = asyncio.get_running_loop()
            self._retrying = self.server.loop.create_task(self.server.keep_continuing())

    async def pending(self, viewer: str) -> list[PendingApproval]:
        """What waits on a decision the viewer may see, as `present` lets it be shown."""
        return await self.present(await asyncio.to_thread(self.inbox.pending, viewer=viewer))

    async def present(self, items: list[PendingApproval], *, fresh: bool = False
                      ) -> list[PendingApproval]:
        """The items a reviewer may still be asked about: inside a LangGraph server, not
        those of a thread deleted on it (`ServerRuns.present` declines them)."""
        if self.server is None:
            return items
        return await self.server.present(items, fresh=fresh)

    async def messages(self, item: PendingApproval, viewer: str) -> list[BaseMessage]:
        """The run's messages for a card, as the viewer may see them: the agent's own state,
        else (inside the LangGraph server, which keeps the state of the graphs it serves) the
        server's."""
        found: list[BaseMessage] = await asyncio.to_thread(self.inbox.messages, item.id,
                                                           viewer=viewer)
        if found or self.thread_messages is None:
            return found
        thread_id = await asyncio.to_thread(self.inbox._thread_of, item.id)
        if thread_id is None:
            return []
        try:
            served = await self.thread_messages(thread_id)
        except Exception as exc:  # context only: the card is shown without it
            logger.warning("inbox: could not read thread %s from the server (%s)", thread_id,
                           type(exc).__name__)  # (a deleted thread is no trace's business)
            return []
        seen: list[BaseMessage] = await asyncio.to_thread(self.inbox.seen_messages, served,
                                                          item, viewer)
        return seen

    async def reviewer(self, request: Request) -> tuple[str, str] | None:
        """(identity, session) of the signed-in reviewer, or None. In a thread: a session is
        checked against the ledger (ended sessions), and a company's authenticator is its own
        code, which may wait on anything."""
        return await asyncio.to_thread(self._reviewer, request)

    def _reviewer(self, request: Request) -> tuple[str, str] | None:
        """A blank identity is nobody signed in (as a blank `decided_by` is no name); an
        authenticator that returns anything but text or None is a bug, not a reviewer. A
        company's authenticator answers every request: no session cookie (one left from
        sign-ins with tokens under the same secret, say) speaks over it."""
        if self.authenticate is None:
            cookie = request.cookies.get(SESSION_COOKIE)
            identity = named(self.sessions.identity(cookie, self.credentials))
            return (identity, cookie) if identity is not None and cookie is not None else None
        found = self.authenticate(request)
        if found is not None and not isinstance(found, str):
            msg = (f"the web inbox's authenticate returned {type(found).__name__}; it "
                   "must return the reviewer's identity as text, or None")
            raise TypeError(msg)
        found = named(found)
        return (found, f"callable|{found}") if found else None


def _base(request: Request) -> str:
    return (request.scope.get("root_path") or "") + "/"


def _same_origin(request: Request) -> bool:
    """A browser's POST names the page it came from: it must be this site, port included (a
    sibling port or subdomain is same-site to cookies, but not the same origin). Clients that
    send neither header are not browsers a page could have steered."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        return not claimed
    parts = urlsplit(claimed)
    host = request.headers.get("host", "")
    return parts.scheme in ("http", "https") and parts.netloc == host


SIGN_IN_BYTES = 64 * 1024
"""The most a sign-in form may send (a token and a nonce)."""
FORM_BYTES = 4 * MAX_BYTES + 64 * 1024
"""The most a decision's form may send: an edit of the largest value, percent-encoded."""


async def _form(request: Request, limit: int = FORM_BYTES) -> dict[str, str] | None:
    """The posted form; None when its body is over `limit` bytes, read no further (an
    anonymous sign-in of 64 MB was read and parsed whole: helper-78)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    body = b"".join(chunks).decode("utf-8", errors="replace")
    return {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}


def _too_large(limit: int) -> Response:
    return PlainTextResponse(f"the form is larger than {human_size(limit)}", status_code=413)


def create_app(url_or_storage: str | Storage | None = None, *,
               authenticate: Authenticator | Mapping[str, str] | None = None,
               agents: Sequence[Agent] = (), secret: str | None = None,
               thread_messages: ThreadMessages | None = None,
               continue_runs: bool = False, viewers: Approvers | None = None) -> Starlette:
    """The web inbox for the runs kept in `url_or_storage` (default: `$GRAPHKIT_DB`).

    Args:
        authenticate: A mapping of sign-in tokens to reviewer identities (default: the
            `GRAPHKIT_TOKENS` environment variable), or a callable that reads a request and
            returns the reviewer's identity (a company's own login), or None.
        agents: Agents whose runs these are: edits are then validated by the tool's own model
            and the agent's policy answers at once; the run's recent messages are shown.
        secret: Signs session cookies (default `GRAPHKIT_SECRET`, else random per process).
        thread_messages: Where to read a run's messages when its agent's own storage does not
            hold them (`server_app` reads them from the LangGraph server).
        continue_runs: Inside a LangGraph server (`server_app` sets it): once a reviewer
            takes the last decision a run waits on, the server's runs API continues it, as
            that reviewer, and its card follows the run to its outcome.
        viewers: `(identity, pending) -> bool`: what each signed-in reviewer may see (the
            list, cards, arguments, messages, audit, grants). Default: what the agents'
            approvers policy lets them decide (`Inbox.may_view`).
    """
    target = url_or_storage or os.environ.get("GRAPHKIT_DB")
    if not target:
        msg = "no storage given: pass a URL or set GRAPHKIT_DB (e.g. sqlite:///runs.db)"
        raise GraphkitError(msg)
    storage = target if isinstance(target, Storage) else open_storage(target)
    tokens = (dict(authenticate) if isinstance(authenticate, Mapping)
              else parse_tokens(os.environ.get("GRAPHKIT_TOKENS", "")) if authenticate is None
              else {})
    inbox = Inbox(storage, agents=agents, viewers=viewers)
    server = ServerRuns(storage.ledger) if continue_runs else None
    if server is not None:
        inbox.readers = server.readers  # the deployment's thread filters, at every door
    web = _Web(inbox, authenticate if callable(authenticate) else None, tokens,
               Sessions(secret, ended=storage.ledger.session_ended), thread_messages, server)
    return Starlette(routes=_routes(web), middleware=[Middleware(_Secured)])


class _Secured:
    """Adds `SECURITY_HEADERS` to every response (and `HSTS` to those sent over https)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        extra = [HSTS] if scope.get("scheme") == "https" else []

        async def secured(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                headers += [(k.lower().encode(), v.encode())
                            for k, v in [*SECURITY_HEADERS.items(), *extra]]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, secured if scope["type"] == "http" else send)


def _routes(web: _Web) -> list[Any]:
    def html(request: Request, title: str, body: str, *, live: bool = False,
             status: int = 200) -> HTMLResponse:
        who: tuple[str, str] | None = getattr(request.state, "reviewer", None)
        csrf = web.sessions.csrf(who[1]) if who else None
        return HTMLResponse(render.page(title, body, identity=who[0] if who else None,
                                        csrf=csrf, live=live, base=_base(request)),
                            status_code=status)

    def guarded(handler: Callable[..., Any], *, post: bool = False) -> Callable[..., Any]:
        """No page without a reviewer; no POST without the session's CSRF token."""

        async def endpoint(request: Request) -> Response:
            web.keep_continuing()
            who = await web.reviewer(request)
            request.state.reviewer = who
            if who is None:
                if post or request.url.path.endswith("/events"):
                    return PlainTextResponse("sign in first", status_code=401)
                return RedirectResponse(_base(request) + "login", status_code=303)
            form: dict[str, str] | None = {}
            if post:
                if not _same_origin(request):
                    return PlainTextResponse("cross-origin request refused", status_code=403)
                form = await _form(request)
                if form is None:
                    return _too_large(FORM_BYTES)
                if not web.sessions.check_csrf(who[1], form.get("csrf")):
                    return PlainTextResponse("missing, wrong or expired CSRF token: reload the "
                                             "page and try again", status_code=403)
            result: Response = await handler(request, who[0], who[1], form)
            return result

        return endpoint

    async def login_page(request: Request) -> Response:
        error = request.query_params.get("error")
        note = "<p class='error'>That token is not known.</p>" if error else ""
        if web.check_token is None and web.authenticate is None:  # (nobody can sign in)
            note = ("<p class='error'>No reviewer tokens are set up for this inbox: set "
                    "GRAPHKIT_TOKENS (see docs/reviewing.md).</p>")
        request.state.reviewer = await web.reviewer(request)
        nonce = secrets.token_hex(16)
        body = ("<h1>Sign in</h1>" + note + "<form method='post' action='login'>"
                f"<input type='hidden' name='login' value='{nonce}'>"
                "<label>Reviewer token<input type='password' name='token' autofocus></label>"
                "<button>Sign in</button></form>")
        response = html(request, "Sign in", body)
        response.set_cookie(LOGIN_COOKIE, f"{nonce}.{web.sessions.sign('login', nonce)}",
                            httponly=True, secure=request.url.scheme == "https",
                            samesite="strict", path=_base(request), max_age=600)
        return response

    async def login(request: Request) -> Response:
        if not _same_origin(request):
            return PlainTextResponse("cross-origin sign-in refused", status_code=403)
        form = await _form(request, SIGN_IN_BYTES)
        if form is None:
            return _too_large(SIGN_IN_BYTES)
        nonce, _, seal = (request.cookies.get(LOGIN_COOKIE) or "").partition(".")
        if not (nonce and hmac.compare_digest(seal, web.sessions.sign("login", nonce))
                and hmac.compare_digest(nonce, form.get("login", ""))):
            return PlainTextResponse("sign in from the sign-in page", status_code=403)
        client = request.client.host if request.client else "?"
        if web.sign_ins.blocked(client):
            logger.warning("inbox: sign-ins from %s refused for a while: too many wrong tokens",
                           client)
            return PlainTextResponse("too many wrong tokens: try again in a minute",
                                     status_code=429)
        token = form.get("token", "")
        identity = named(web.check_token(token)) if web.check_token else None
        if identity is None:
            web.sign_ins.failed(client)
            logger.warning("inbox: a sign-in from %s with an unknown token", client)
            return RedirectResponse(_base(request) + "login?error=1", status_code=303)
        response = RedirectResponse(_base(request), status_code=303)
        session = web.sessions.issue(identity, web.sessions.credential(token))
        response.set_cookie(SESSION_COOKIE, session, httponly=True,
                            secure=request.url.scheme == "https",
                            samesite="strict", path=_base(request))
        response.delete_cookie(LOGIN_COOKIE, path=_base(request))
        return response

    async def logout(request: Request, who: str, session: str, form: dict[str, str]
                     ) -> Response:
        parsed = await asyncio.to_thread(web.sessions.parse, request.cookies.get(SESSION_COOKIE))
        if parsed is not None:  # ended for good, not only forgotten by this browser
            await asyncio.to_thread(web.inbox._storage.ledger.end_session, parsed[1],
                                    float(parsed[2]))
        response = RedirectResponse(_base(request) + "login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=_base(request))
        return response

    async def listing(request: Request, who: str
                      ) -> tuple[list[PendingApproval], list[PendingApproval]]:
        everything = await web.pending(who)
        agent = request.query_params.get("agent") or None
        tool = request.query_params.get("tool") or None
        chosen = [p for p in everything if (agent is None or p.agent_path[:1] == [agent])
                  and (tool is None or p.tool_name == tool)]
        return everything, chosen

    async def index(request: Request, who: str, session: str, form: dict[str, str]
                    ) -> Response:
        everything, chosen = await listing(request, who)
        if request.query_params.get("fragment"):
            return HTMLResponse(render.pending_rows(chosen))
        body = render.pending_table(chosen, (p.agent_path[0] for p in everything if
                                             p.agent_path), (p.tool_name for p in everything),
                                    dict(request.query_params))
        return html(request, "Pending", body, live=True)

    async def events(request: Request, who: str, session: str, form: dict[str, str]
                     ) -> Response:
        async def stream() -> AsyncIterator[str]:
            seen: list[str] | None = None
            while not await request.is_disconnected():
                still = await web.reviewer(request)
                if still is None or still[0] != who:
                    return  # signed out (or the session ended elsewhere): no more updates
                now = sorted(p.id for p in await web.pending(who))
                if now != seen:
                    seen = now
                    yield f"event: pending\ndata: {json.dumps(now)}\n\n"
                await asyncio.sleep(LIVE_SECONDS)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    def decide_form(item: PendingApproval, csrf: str, schemas: Mapping[str, Any]) -> str:
        if item.status != "pending":
            return "<p class='decided'>This request was decided; nothing is left to do.</p>"
        hidden = (f"<input type='hidden' name='csrf' value='{render._e(csrf)}'>"
                  f"<input type='hidden' name='digest' value='{render._e(item.args_digest)}'>")
        if item.kind == "suspension":
            return (f"<form method='post' action='approvals/{render._e(item.id)}/resume' "
                    "class='decide'><h3>Answer</h3>" + hidden
                    + render.fields(schemas.get("resume_schema"), {}, "data")
                    + "<button name='do' value='resume'>Resume</button></form>"
                    + _decline_form(item, hidden))
        allowed = set(item.allowed_decisions)
        forms = []
        if "approve" in allowed:
            forms.append(
                f"<form method='post' action='approvals/{render._e(item.id)}/approve' "
                "class='decide'><h3>Approve as shown</h3>" + hidden
                + "<label>Comment<input name='comment'></label>"
                "<label><input type='checkbox' name='remember' value='thread'> Approve later "
                "calls of this tool in this thread too (that I may approve)</label>"
                "<button name='do' value='approve'>Approve</button></form>")
        if "edit" in allowed:
            forms.append(
                f"<form method='post' action='approvals/{render._e(item.id)}/edit' "
                "class='decide edit'><h3>Approve with other arguments</h3>" + hidden
                + render.fields(schemas.get("schema"), item.args, "arg")
                + "<label>Comment<input name='comment'></label>"
                "<button name='do' value='edit'>Approve these arguments</button></form>")
        if "respond" in allowed:
            forms.append(
                f"<form method='post' action='approvals/{render._e(item.id)}/respond' "
                "class='decide respond'><h3>Answer instead of running</h3>" + hidden
                + "<label>What the model reads as the result<textarea name='message' "
                "required></textarea></label>"
                "<button name='do' value='respond'>Send answer</button></form>")
        if "reject" in allowed:
            forms.append(_decline_form(item, hidden))
        return "".join(forms)

    async def approval(request: Request, who: str, session: str, form: dict[str, str]
                       ) -> Response:
        approval_id = request.path_params["id"]
        try:
            item = await asyncio.to_thread(web.inbox.get, approval_id, viewer=who)
            if not await web.present([item], fresh=True):  # declined (its thread is gone)
                item = await asyncio.to_thread(web.inbox.get, approval_id, viewer=who)
            messages = await web.messages(item, who)
            schemas = await asyncio.to_thread(web.inbox.schema, approval_id)
        except GraphkitError as exc:
            return html(request, "Not found", f"<p class='error'>{render._e(str(exc))}</p>",
                        status=404)
        recent = [{"type": m.type, "content": m.content or "; ".join(
            f"calls {c['name']}({json.dumps(c.get('args'), default=str)})"
            for c in getattr(m, "tool_calls", None) or [])} for m in messages]
        refusal = request.query_params.get("refused") or ""
        seal = web.sessions.sign("notice", f"{session}|{approval_id}|{refusal}")
        genuine = refusal and hmac.compare_digest(seal, request.query_params.get("seal", ""))
        note = f"<p class='error refused'>{render._e(refusal)}</p>" if genuine else ""
        after = (await web.server.continuation(item) if web.server is not None else
                 await asyncio.to_thread(local_continuation, web.inbox._storage.ledger, item))
        body = (f"<h1>{render._e(item.tool_name)}</h1>{note}"
                + render.card(item, messages=recent, no_messages=None if (
                    web.inbox.agents or web.thread_messages) else NO_AGENTS)
                + (_continuation(after) if after is not None else
                   decide_form(item, web.sessions.csrf(session), schemas))
                + f"<p><a href='approvals/{render._e(item.id)}/audit'>Audit trail</a> · "
                f"<a href='threads/audit?thread={render._e(quote(item.thread_id or '', safe=''))}'>"
                "thread</a></p>")
        response = html(request, item.tool_name, body)
        if after is not None and not after.finished and web.server is not None:
            response.headers["Refresh"] = "2"  # follow the run until it ends
        return response

    async def act(request: Request, who: str, session: str, form: dict[str, str]) -> Response:
        approval_id = request.path_params["id"]
        action = request.path_params["action"]
        where = _base(request) + f"approvals/{approval_id}"
        try:
            # theirs to see; and (inside a LangGraph server) of a thread it still holds, else
            # declined now, and the decision refused as for any decided request
            shown = await asyncio.to_thread(web.inbox.get, approval_id, viewer=who)
            await web.present([shown], fresh=True)
            if action == "decline":
                await asyncio.to_thread(web.inbox.decline, approval_id, decided_by=who,
                                        comment=form.get("comment") or None)
            elif action in ("approve", "edit") and not form.get("digest"):
                raise ArgsDigestMismatchError(
                    "the decision carries no digest of the arguments its card showed; "
                    "reload the card and decide again")
            elif action == "approve":  # exactly what the card showed, bound by its digest
                await asyncio.to_thread(
                    web.inbox.approve, approval_id, decided_by=who,
                    comment=form.get("comment") or None, args_digest=form["digest"],
                    remember="thread" if form.get("remember") == "thread" else "once")
            elif action == "edit":
                schema = (await asyncio.to_thread(web.inbox.schema, approval_id)).get("schema")
                # what the card showed (the digest holds it to that), as the viewer saw it
                args = render.parse_fields(schema, form, "arg", shown=shown.args)
                await asyncio.to_thread(
                    web.inbox.approve, approval_id, decided_by=who,
                    comment=form.get("comment") or None, args=args,
                    args_digest=form["digest"])
            elif action == "respond":
                await asyncio.to_thread(web.inbox.respond, approval_id, decided_by=who,
                                        message=form.get("message") or "")
            elif action == "resume":
                schema = (await asyncio.to_thread(web.inbox.schema, approval_id)).get(
                    "resume_schema")
                data = render.parse_fields(schema, form, "data", shown={},
                                           error=ResumeDataError)
                await asyncio.to_thread(web.inbox.resume, approval_id, data, decided_by=who)
            else:
                return PlainTextResponse("unknown action", status_code=404)
            if web.server is not None:
                await web.server.continue_run(await asyncio.to_thread(web.inbox.get,
                                                                      approval_id), who)
        except (GraphkitError, ValueError, RecursionError) as exc:
            text = f"{type(exc).__name__}: {exc}"[:600]
            seal = web.sessions.sign("notice", f"{session}|{approval_id}|{text}")
            return RedirectResponse(f"{where}?{urlencode({'refused': text, 'seal': seal})}",
                                    status_code=303)
        return RedirectResponse(where, status_code=303)

    async def audit_of(request: Request, who: str, session: str, form: dict[str, str]
                       ) -> Response:
        try:
            if "id" in request.path_params:
                entries = await asyncio.to_thread(web.inbox.audit, id=request.path_params["id"],
                                                  viewer=who)
                title = f"Audit of {request.path_params['id']}"
            else:  # a thread id is the client's text: `/`, `?`, `#` and all, in the query
                thread = (request.path_params.get("thread")
                          or request.query_params.get("thread", ""))
                entries = await asyncio.to_thread(web.inbox.audit, viewer=who, thread_id=thread)
                title = f"Audit of thread {thread}"
        except GraphkitError as exc:
            return html(request, "Not found", f"<p class='error'>{render._e(str(exc))}</p>",
                        status=404)
        return html(request, title, f"<h1>{render._e(title)}</h1>" + render.audit_table(entries))

    async def grants(request: Request, who: str, session: str, form: dict[str, str]
                     ) -> Response:
        csrf = render._e(web.sessions.csrf(session))
        rows = "".join(
            f"<tr><td><code>{render._e(g['id'])}</code></td>"
            f"<td>{render._e('/'.join(g['agent_path']))}:{render._e(g['tool_name'])}</td>"
            f"<td>{render._e(g['thread_id'])}</td><td>{render._e(g['grantor'] or '')}</td>"
            f"<td>{render._e(g['state'])}</td><td>"
            + ("" if g["state"] != "active" else
               f"<form method='post' action='grants/{render._e(g['id'])}/revoke'>"
               f"<input type='hidden' name='csrf' value='{csrf}'><button>Revoke</button></form>")
            + "</td></tr>" for g in await asyncio.to_thread(web.inbox.grants, viewer=who))
        body = ("<h1>Grants</h1><table class='grants'><thead><tr><th>Id</th><th>Tool</th>"
                "<th>Thread</th><th>Grantor</th><th>State</th><th></th></tr></thead>"
                f"<tbody>{rows or '<tr><td colspan=6>No grants.</td></tr>'}</tbody></table>")
        return html(request, "Grants", body)

    async def revoke(request: Request, who: str, session: str, form: dict[str, str]
                     ) -> Response:
        try:
            await asyncio.to_thread(web.inbox.revoke, request.path_params["id"], decided_by=who,
                                    viewer=who)
        except GraphkitError as exc:
            return PlainTextResponse(str(exc), status_code=409)
        return RedirectResponse(_base(request) + "grants", status_code=303)

    return [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", guarded(logout, post=True), methods=["POST"]),
        Route("/", guarded(index), methods=["GET"]),
        Route("/events", guarded(events), methods=["GET"]),
        Route("/approvals/{id}", guarded(approval), methods=["GET"]),
        Route("/approvals/{id}/audit", guarded(audit_of), methods=["GET"]),
        Route("/approvals/{id}/{action}", guarded(act, post=True), methods=["POST"]),
        Route("/threads/audit", guarded(audit_of), methods=["GET"]),
        Route("/threads/{thread}/audit", guarded(audit_of), methods=["GET"]),
        Route("/grants", guarded(grants), methods=["GET"]),
        Route("/grants/{id}/revoke", guarded(revoke, post=True), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


NO_AGENTS = ("No conversation is shown: this inbox was started without the agents whose runs "
             "these are, so it cannot read their state. Start it with them "
             "(`graphkit serve --db URL --agent module:attr`, or create_app(..., agents=[...]))"
             " to see what the user asked, and to have edits checked by the tools' own models.")


CONTINUATION = {
    "waiting": "Decided. The run waits for its other decisions before it continues.",
    "ready": ("Decided; waiting to continue. Nothing is left to decide: a `graphkit worker` "
              "on this database continues the run, or `graphkit resume RUN_ID --agent "
              "module:attr`."),
    "queued": ("Decided. The run's continuation has not started on the LangGraph server yet; "
               "the inbox hands it over again shortly."),
    "resume": ("Decided. Nothing continues the run from this inbox: its last decision was "
               "taken outside it (the CLI or `Inbox`, where no sign-in vouches for whom the "
               "run would continue as), or expired. It continues when a client resumes its "
               "thread (`command={\"resume\": {}}`)."),
    "pending": "Decided. The LangGraph server has queued the run's continuation.",
    "running": "Decided. The run continues on the LangGraph server…",
    "success": "Decided. The run continued on the LangGraph server and finished.",
    "continued": "Decided. The run continued.",
    "interrupted": "Decided. The run continued and now waits for another decision.",
    "deleted": "Its thread was deleted on the LangGraph server: nothing continues the run.",
}


def _continuation(after: Continuation) -> str:
    """What became of a decided run on the server, on its card."""
    text = CONTINUATION.get(after.status,
                            f"Decided. The run continued on the LangGraph server: {after.status}.")
    if after.why:
        text = f"{text} Its last attempt did not start: {after.why}."
    result = ""
    if after.outcome is not None:
        result = (f"<p class='outcome {render._e(str(after.outcome.get('status')))}'>Result of "
                  f"the call: <code>{render._e(str(after.outcome.get('content')))}</code></p>")
    elif after.finished:
        result = "<p class='outcome'>The call did not run.</p>"
    return (f"<div class='continuation' data-status='{render._e(after.status)}'>"
            f"<p class='decided'>{render._e(text)}</p>{result}</div>")


def _decline_form(item: PendingApproval, hidden: str) -> str:
    return (f"<form method='post' action='approvals/{render._e(item.id)}/decline' "
            "class='decide decline'><h3>Decline</h3>" + hidden
            + "<label>Comment<input name='comment'></label>"
            "<button name='do' value='decline'>Decline</button></form>")


class _LazyApp:
    """An app built on its first request: `graphkit.web:app` for langgraph.json's
    `"http": {"app": ...}`.

    Inside the LangGraph server it serves the runs of the agents that server serves (their
    shared ledger: `GRAPHKIT_DB` if set, else the server process's memory);
    elsewhere the database `GRAPHKIT_DB` names. Its pages live under `prefix`, beside the
    server's API.
    """

    def __init__(self, *, agents: Sequence[Agent] = (), authenticate: Any = None,
                 prefix: str = "/inbox", viewers: Approvers | None = None) -> None:
        self.agents = agents
        self.authenticate = authenticate
        self.viewers = viewers
        self.prefix = prefix
        self._app: Starlette | None = None

    async def _build(self) -> Starlette:
        from graphkit._storage import served_agents, served_storage

        url = os.environ.get("GRAPHKIT_DB")
        served = bool(os.environ.get(SERVER_ENV))
        target: str | Storage = (await asyncio.to_thread(served_storage)
                                 if served or not url else url)
        # opening a database (and a first request's Inbox) reads storage: not on the loop
        return await asyncio.to_thread(
            lambda: create_app(target, authenticate=self.authenticate,
                               agents=self.agents or (served_agents() if served else ()),
                               thread_messages=server_thread_messages if served else None,
                               continue_runs=served, viewers=self.viewers))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = await self._build()
        await self._app(scope, receive, send)


def server_app(*, agents: Sequence[Agent] = (), authenticate: Any = None,
               prefix: str = "/inbox", viewers: Approvers | None = None) -> Starlette:
    """The web inbox to mount in a LangGraph server (`"http": {"app": "module:app"}`), under
    `prefix`; give it the served agents so edits are checked by their tools' own models."""
    lazy = _LazyApp(agents=agents, authenticate=authenticate, prefix=prefix, viewers=viewers)
    return Starlette(routes=[Mount(prefix, app=lazy)])


app = server_app()
