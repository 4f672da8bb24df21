"""Who is looking at the web inbox: an authenticator, signed session cookies, CSRF tokens.

The default authenticator is the bearer-token mapping of `graphkit.server_auth`
(`GRAPHKIT_TOKENS`): a reviewer signs in with their token once and gets a session cookie.
A company's own login plugs in as a callable that reads the request (a reverse proxy's
header, say) and returns the reviewer's identity, or None.

Every signature is bound to its purpose (a session, a CSRF token, a sign-in form, a notice),
so no token made for one purpose passes for another; a session is ended server-side on
sign-out (the ledger remembers ended sessions until they would have expired anyway), and is
bound to the token it was opened with: it ends when that token is taken out of the mapping
(a reviewer off-boarded, a leaked token replaced), not eight hours later.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping

from starlette.requests import Request

__all__ = ["LOGIN_COOKIE", "SESSION_COOKIE", "Authenticator", "Sessions", "SignIns",
           "token_authenticator"]

SESSION_COOKIE = "graphkit_session"
LOGIN_COOKIE = "graphkit_login"
"""A random value the sign-in form must echo: a cross-site form cannot sign a victim in."""
SESSION_SECONDS = 8 * 3600
CSRF_SECONDS = SESSION_SECONDS
"""A CSRF token is good for one such window of time after the one its page was served in."""

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


class SignIns:
    """Failed sign-ins per client: after `limit` within `window` seconds, that client's
    sign-ins are refused until the window has passed, so a token cannot be guessed at the
    speed of the network (it is still only as strong as it is long: make tokens random). A
    client is its address as uvicorn reads it: behind a proxy, the `X-Forwarded-For` of a
    proxy it trusts (`FORWARDED_ALLOW_IPS`, 127.0.0.1 by default), which the proxy must set,
    not pass on from the client."""

    def __init__(self, limit: int = 10, window: float = 60.0) -> None:
        self.limit, self.window = limit, window
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> list[float]:
        kept = [t for t in self._failures.get(client, []) if now - t < self.window]
        if kept:
            self._failures[client] = kept
        else:
            self._failures.pop(client, None)
        return kept

    def blocked(self, client: str) -> bool:
        with self._lock:
            return len(self._recent(client, time.monotonic())) >= self.limit

    def failed(self, client: str) -> None:
        with self._lock:
            now = time.monotonic()
            if len(self._failures) > 10_000:  # many clients: forget those whose window passed
                for other in list(self._failures):
                    self._recent(other, now)
            self._failures.setdefault(client, []).append(now)


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(text: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None


class Sessions:
    """Signed, expiring session cookies and the tokens bound to each session."""

    def __init__(self, secret: str | None = None,
                 ended: Callable[[str], bool] | None = None) -> None:
        key = secret or os.environ.get("GRAPHKIT_SECRET") or secrets.token_hex(32)
        self._key = key.encode()
        self._ended = ended or (lambda nonce: False)

    def sign(self, purpose: str, text: str) -> str:
        message = f"graphkit-web|{purpose}|{text}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def credential(self, token: str) -> str:
        """What a session keeps of the token it was opened with: enough to tell whether that
        token is still known, nothing that signs anyone in."""
        return self.sign("credential", token)[:32]

    def issue(self, identity: str, credential: str) -> str:
        expires = int(time.time()) + SESSION_SECONDS
        body = f"v2.{_b64(identity)}.{expires}.{secrets.token_hex(16)}.{credential}"
        return f"{body}.{self.sign('session', body)}"

    def parse(self, cookie: str | None) -> tuple[str, str, int, str] | None:
        """(identity, nonce, expires, credential) of a valid session cookie."""
        parts = (cookie or "").split(".")
        if len(parts) != 6 or parts[0] != "v2":
            return None
        body = ".".join(parts[:5])
        if not hmac.compare_digest(parts[5], self.sign("session", body)):
            return None
        identity, expires, nonce = _unb64(parts[1]), parts[2], parts[3]
        if identity is None or not expires.isdigit() or int(expires) < time.time():
            return None
        if self._ended(nonce):
            return None
        return identity, nonce, int(expires), parts[4]

    def identity(self, cookie: str | None, credentials: Mapping[str, str]) -> str | None:
        """The session's reviewer, while the token it was opened with still names them
        (`credentials`: `credential(token)` -> identity, of the tokens known now)."""
        parsed = self.parse(cookie)
        if parsed is None or credentials.get(parsed[3]) != parsed[0]:
            return None
        return parsed[0]

    def csrf(self, session: str) -> str:
        """The session's CSRF token for pages served now. It is bound to a window of time as
        well: under a company's authenticator a session is the identity alone, and a token
        bound to nothing else stayed good for that reviewer for as long as the secret
        (helper-120)."""
        return self._csrf(session, int(time.time() // CSRF_SECONDS))

    def _csrf(self, session: str, window: int) -> str:
        return self.sign("csrf", f"{window}|{session}")

    def check_csrf(self, session: str, token: object) -> bool:
        """Whether `token` is the session's, from a page served in this window or the one
        before (a page is good for at least `CSRF_SECONDS`)."""
        if not isinstance(token, str):
            return False
        now = int(time.time() // CSRF_SECONDS)
        return any(hmac.compare_digest(token, self._csrf(session, w)) for w in (now, now - 1))
