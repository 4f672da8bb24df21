"""A deployment's own auth with LangGraph's owner filter (the pattern of LangGraph's resource
authorization docs): bearer tokens ($GRAPHKIT_TOKENS) -> identities, and every thread and run
is its creator's alone, but for the release manager, whom the deployment lets read and run
any thread (so the continuations of what they decide in the inbox run). The auditor may
read every thread but start no run at all (a 403 of its own handler)."""

from __future__ import annotations

import os
from typing import Any

from langgraph_sdk import Auth

from graphkit.server_auth import TOKENS_ENV, parse_tokens

TOKENS = parse_tokens(os.environ.get(TOKENS_ENV, ""))
REVIEWERS = {"release-manager"}
auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None = None) -> Auth.types.MinimalUserDict:
    scheme, _, token = (authorization or "").strip().partition(" ")
    identity = TOKENS.get(token.strip()) if scheme.lower() == "bearer" else None
    if identity is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid bearer token")
    return {"identity": identity, "display_name": identity, "permissions": []}


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str] | None:
    filters = {"owner": ctx.user.identity}
    if isinstance(value, dict):
        metadata = value.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata.update(filters)
    if ctx.user.identity in REVIEWERS or (ctx.user.identity == "auditor"
                                          and ctx.action in ("read", "search")):
        return None
    return filters


@auth.on.threads.create_run
async def no_runs_for_auditors(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str] | None:
    """Auditors may read, never start a run: a refusal (403), not a filter."""
    if ctx.user.identity == "auditor":
        raise Auth.exceptions.HTTPException(status_code=403, detail="auditors start no runs")
    return await owner_only(ctx, value)
