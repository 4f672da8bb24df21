"""Who is looking at the web inbox: an authenticator, a signed session cookie, CSRF tokens.

The default authenticator is the bearer-token mapping of `graphkit.server_auth`
(`GRAPHKIT_TOKENS`): a reviewer signs in with their token once and gets a session cookie.
A company's own login plugs in as a callable that reads the request (a reverse proxy's
header, say) and returns the reviewer's identity, or None.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request

__all__ = ["SESSION_COOKIE", "Authenticator", "Sessions", "token_authenticator"]

SESSION_COOKIE = "graphkit_session"
SESSION_SECONDS = 8 * 3600

Authenticator = Callable[[Request], str | None]
"""Reads a request and returns the reviewer's identity, or None (then the sign-in page asks for
a token, when tokens are configured)."""


def token_authenticator(tokens: Mapping[str, str]) -> Callable[[str], str | None]:
    """Token -> identity, compared in constant time against every known token."""
    known = [(token.encode(), identity) for token, identity in tokens.items()]

    def check(token: str) -> str | None:
        found = None
        for candidate, identity in known:
            if hmac.compare_digest(candidate, token.encode()):
                found = identity
        return found

    return check


class Sessions:
    """Signed, expiring session cookies and the CSRF token bound to each session."""

    def __init__(self, secret: str | None = None) -> None:
        key = secret or os.environ.get("GRAPHKIT_SECRET") or secrets.token_hex(32)
        self._key = key.encode()

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def issue(self, identity: str) -> str:
        expires = int(time.time()) + SESSION_SECONDS
        nonce = secrets.token_hex(8)
        body = f"{identity}|{expires}|{nonce}"
        return f"{body}|{self._sign(body)}"

    def identity(self, cookie: str | None) -> str | None:
        if not cookie or cookie.count("|") < 3:
            return None
        body, _, signature = cookie.rpartition("|")
        if not hmac.compare_digest(signature, self._sign(body)):
            return None
        identity, expires, _ = body.rsplit("|", 2)
        if not expires.isdigit() or int(expires) < time.time():
            return None
        return identity

    def csrf(self, session: str) -> str:
        return self._sign(f"csrf|{session}")

    def check_csrf(self, session: str, token: Any) -> bool:
        return isinstance(token, str) and hmac.compare_digest(token, self.csrf(session))
