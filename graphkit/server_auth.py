"""Bearer-token auth for the LangGraph server, so a resume's decider is a known reviewer.

Under `langgraph dev` / LangGraph Platform the server puts the authenticated user of a run in
`config["configurable"]["langgraph_auth_user"]` (a server-side object with `.identity`; a
client's own `langgraph_auth_user` in config/context is stripped and overwritten), and the
approval gate reads the decider from there, never from the resume payload. This module makes
that user mean something: each bearer token maps to one reviewer identity.

With reviewers named (`reviewers=`, or `$GRAPHKIT_REVIEWERS`), threads are private: each
thread, its runs and its crons are their creator's (LangGraph's owner filter), and only the
creator and the reviewers may read, search, run or change them. Without, every caller is a
reviewer of every thread.

It also keeps clients from writing around the gate: graphkit's store namespace ("graphkit",
...) is off limits to the HTTP store API, `POST /threads/{id}/state` (update_state) is refused,
and runs whose `command` carries `goto` or `update` are refused; `command={"resume": ...}` and
plain inputs go through. Graph nodes are unaffected: these handlers only see HTTP requests.

Nothing here runs at import time; a deployment calls `make_auth()` in its own module (see
`graphs/auth.py`) and names it in langgraph.json: `"auth": {"path": "./graphs/auth.py:auth"}`.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Collection, Mapping
from typing import Any

from langgraph_sdk import Auth
from langgraph_sdk.auth import is_studio_user

__all__ = ["ANONYMOUS", "GRAPHKIT_NAMESPACE", "REVIEWERS_ENV", "TOKENS_ENV", "make_auth",
           "parse_tokens", "reviewers_of"]

TOKENS_ENV = "GRAPHKIT_TOKENS"
"""Environment variable with the token map: `{"tok": "identity"}` or `tok=identity,tok2=id2`."""

REVIEWERS_ENV = "GRAPHKIT_REVIEWERS"
"""Environment variable naming the reviewers (`release-manager,cfo`): with it, threads are
private to their creators and these identities."""

GRAPHKIT_NAMESPACE = "graphkit"
"""First element of the store namespaces graphkit reserves: closed to clients (graphkit keeps
its records in the ledger; an older graphkit kept an inbox index here)."""

ANONYMOUS = "anonymous"
"""Identity given to callers without a token when anonymous access is allowed."""


def parse_tokens(text: str) -> dict[str, str]:
    """Read a token map from its env form; malformed input raises so a server fails at start."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise ValueError(f"{TOKENS_ENV} must be a JSON object of token -> identity")
        pairs = list(loaded.items())
    else:
        pairs = []
        for item in text.split(","):
            if not item.strip():
                continue
            token, sep, identity = item.partition("=")
            if not sep:
                raise ValueError(f"{TOKENS_ENV} entry {item.strip()[:4]}... is not token=identity")
            pairs.append((token.strip(), identity.strip()))
    tokens: dict[str, str] = {}
    for token, identity in pairs:
        if not isinstance(token, str) or not isinstance(identity, str) or not token or not identity:
            raise ValueError(f"{TOKENS_ENV} needs non-empty string tokens and identities")
        tokens[token] = identity
    return tokens


def reviewers_of(text: str) -> frozenset[str]:
    """The reviewers `$GRAPHKIT_REVIEWERS` names (comma-separated identities)."""
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def _lookup(tokens: Mapping[bytes, str], presented: str) -> str | None:
    """Check a presented token against every known one in constant time (no early exit)."""
    candidate = presented.encode()
    found: str | None = None
    for token, identity in tokens.items():
        if hmac.compare_digest(candidate, token):
            found = identity
    return found


def _forbidden(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=403, detail=detail)


def make_auth(
    tokens: Mapping[str, str] | None = None,
    *,
    allow_anonymous: bool | None = None,
    allow_studio: bool | None = None,
    reviewers: Collection[str] | None = None,
) -> Auth:
    """Build the server's Auth: bearer tokens -> reviewer identities, plus graphkit's guards.

    `tokens` defaults to `$GRAPHKIT_TOKENS`. Without a token a request is the anonymous user
    only when `allow_anonymous` (default: no tokens configured, so a local `langgraph dev` for
    Studio keeps working); otherwise 401. A wrong token is always 401. `allow_studio` (default:
    `allow_anonymous`) admits the server's own Studio users, which skip the token check: under
    `langgraph dev` any request with `x-auth-scheme: langsmith` is "langgraph-studio-user"
    unless langgraph.json's auth sets `"disable_studio_auth": true`.

    `reviewers` (default: `$GRAPHKIT_REVIEWERS`, comma-separated) makes threads private: a
    thread, its runs and its crons belong to the identity that created them, and only it and
    the reviewers may read, search, run or change them; anyone else gets "not found". Only
    reviewers change a thread's owner, or create, change or delete assistants.
    Reviewers read and run every thread: a decision in the mounted inbox is continued as its
    reviewer's run. Without reviewers, every caller reads and runs every thread.
    """
    table = dict(tokens) if tokens is not None else parse_tokens(os.environ.get(TOKENS_ENV, ""))
    by_bytes = {token.encode(): identity for token, identity in table.items()}
    anonymous_ok = not table if allow_anonymous is None else allow_anonymous
    studio_ok = anonymous_ok if allow_studio is None else allow_studio

    readers = (frozenset(reviewers) if reviewers is not None
               else reviewers_of(os.environ.get(REVIEWERS_ENV, "")))

    def owned(ctx: Auth.types.AuthContext, value: Any, *, creates: bool) -> dict[str, str] | None:
        """With private threads, the owner filter: what the caller creates is stamped theirs
        (never what they change: a reviewer's update would take the thread over), and a caller
        not a reviewer sees only their own."""
        if not readers:
            return None
        mine = {"owner": ctx.user.identity}
        metadata = value.get("metadata") if isinstance(value, dict) else None
        if (ctx.action == "update" and isinstance(metadata, Mapping) and "owner" in metadata
                and ctx.user.identity not in readers):
            # a thread given away (or its owner blanked) would read as another's own work
            raise _forbidden("A thread's owner is not yours to change")
        if creates and isinstance(value, dict):
            if metadata is None:
                metadata = value["metadata"] = {}
            if isinstance(metadata, dict):
                metadata.update(mine)
        return None if ctx.user.identity in readers else mine

    auth = Auth()

    @auth.authenticate
    async def authenticate(authorization: str | None = None) -> Auth.types.MinimalUserDict:
        """Map `Authorization: Bearer <token>` to its identity; 401 otherwise."""
        if not authorization or not authorization.strip():
            if anonymous_ok:
                return {"identity": ANONYMOUS, "display_name": ANONYMOUS, "permissions": []}
            raise Auth.exceptions.HTTPException(
                status_code=401, detail="Missing bearer token",
                headers={"WWW-Authenticate": "Bearer"})
        scheme, _, presented = authorization.strip().partition(" ")
        identity = _lookup(by_bytes, presented.strip()) if scheme.lower() == "bearer" else None
        if identity is None:
            raise Auth.exceptions.HTTPException(
                status_code=401, detail="Invalid bearer token",
                headers={"WWW-Authenticate": "Bearer"})
        return {"identity": identity, "display_name": identity, "permissions": []}

    def check_caller(ctx: Auth.types.AuthContext) -> None:
        """Studio users never passed `authenticate`; admit them only when configured to."""
        if not studio_ok and is_studio_user(ctx.user):
            raise Auth.exceptions.HTTPException(
                status_code=401, detail="Studio access is disabled; send a bearer token")

    @auth.on
    async def everything_else(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
        """Any resource/action without a narrower handler: authenticated callers may proceed."""
        check_caller(ctx)

    @auth.on.threads
    async def threads(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str] | None:
        """A thread: its creator's and the reviewers' when threads are private."""
        check_caller(ctx)
        return owned(ctx, value, creates=ctx.action == "create")

    @auth.on.assistants
    async def assistants(ctx: Auth.types.AuthContext, value: Any) -> None:
        """With private threads, only reviewers create, change or delete assistants: the
        graphs' own are every caller's, and one changed (a recursion limit of 1) or deleted
        stopped every other caller's runs (helper-61)."""
        check_caller(ctx)
        if readers and ctx.action in ("create", "update", "delete") and (
                ctx.user.identity not in readers):
            raise _forbidden("Only reviewers create, change or delete assistants")

    @auth.on.crons
    async def crons(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str] | None:
        """A cron runs on a thread: its creator's and the reviewers' when threads are private."""
        check_caller(ctx)
        return owned(ctx, value, creates=ctx.action == "create")

    @auth.on.store
    async def store(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
        """graphkit's namespace is written only by graph nodes, never through the HTTP API.

        A search or namespace listing without a prefix would cover ("graphkit", ...) too, so
        clients must name a prefix (the value's "namespace" is the prefix for those actions).
        """
        check_caller(ctx)
        namespace = tuple(value.get("namespace") or ())
        if not namespace:
            if ctx.action in ("search", "list_namespaces"):
                raise _forbidden("Store searches and listings need a namespace prefix")
            return
        if namespace[0] == GRAPHKIT_NAMESPACE:
            raise _forbidden(f"The {GRAPHKIT_NAMESPACE!r} store namespace is read-only to clients")

    @auth.on.threads.update
    async def threads_update(
        ctx: Auth.types.AuthContext, value: Auth.types.ThreadsUpdate
    ) -> dict[str, str] | None:
        """Refuse client state writes; metadata patches and run cancels stay allowed.

        The server sends this action for three requests: `PATCH /threads/{id}` (value has
        `metadata`), run cancel (value has `action` and `metadata`), and thread state writes
        (`POST /threads/{id}/state`, `POST /threads` with `supersteps`), whose value is only
        `{"thread_id": ...}`. State writes are refused: `update_state(as_node=
        "approval_gate")` would let a client forge a decision.
        """
        check_caller(ctx)
        if "metadata" not in value and "action" not in value:
            raise _forbidden("Thread state writes are disabled; resume with a decision instead")
        return owned(ctx, value, creates=False)

    @auth.on.threads.create_run
    async def create_run(
        ctx: Auth.types.AuthContext, value: Auth.types.RunsCreate
    ) -> dict[str, str] | None:
        """Allow inputs and `command={"resume": ...}`; refuse a command's `goto` or `update`,
        and a command given with input.

        `goto` could jump straight to the tools node and `update` could write state, both
        around the approval gate.
        """
        check_caller(ctx)
        kwargs: Mapping[str, Any] = value.get("kwargs") or {}
        command = kwargs.get("command")
        if command and not isinstance(command, Mapping):
            raise _forbidden("Unrecognised run command")
        carried = sorted(k for k in ("goto", "update") if command and command.get(k) is not None)
        if carried:
            raise _forbidden(f"Run commands with {' or '.join(carried)} are disabled; "
                             "only resume is allowed")
        given = kwargs.get("input")
        if command and _says_something(given):
            # LangGraph runs the command and drops the input: a user's message that was to
            # supersede what waits vanished while the decision beside it applied (helper-115).
            # An empty input is no message: Agent Chat UI resumes with `input: {}` (helper-118)
            raise _forbidden("A run takes input or a resume command, not both: the input "
                             "would be dropped; send the message as its own run")
        if isinstance(given, Mapping) and _says_something(given.get("options")):
            # A client's options were a run's on a thread only the server ran: a later run's
            # input turned a request's `require_tool_approval` off (helper-123). The agent's
            # settings decide; graphkit's API records a request's own with its run.
            raise _forbidden("Run input may not set graphkit's run options (the agent's "
                             "settings apply to runs on the server)")
        return owned(ctx, value, creates=True)

    return auth


def _says_something(value: Any, depth: int = 0) -> bool:
    """Whether a run's input holds anything (`{}`, `{"messages": []}` and None hold nothing;
    what nests deeper than any message is taken to: helper-119's 700 levels were a 500)."""
    if depth > 32:
        return True
    if isinstance(value, Mapping):
        return any(_says_something(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_says_something(v, depth + 1) for v in value)
    return value is not None and value != ""
