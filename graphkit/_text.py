"""Text from models, tools, reviewers and clients, made safe to print on a terminal.

A tool argument, a prompt or a comment can hold escape sequences that clear the screen, set
the window title or move the cursor, a carriage return that overwrites what a reviewer reads,
or bidi overrides that show text in another order than it is stored. Any of these can make a
review card say something other than what will run. `printable` turns every such character
into a visible escape, so what is printed is what is stored.
"""

from __future__ import annotations

import unicodedata

__all__ = ["printable"]

_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
"""Controls (C0, DEL, C1; ESC starts every terminal sequence), format characters (bidi
overrides and isolates, zero-width characters), lone surrogates (which cannot even be
encoded for output), unassigned code points (a newer terminal may treat them as formats),
and the line and paragraph separators. Other spaces and private-use characters show as
themselves."""

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_KEPT_IN_LINES = "\n\t"


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with control and format characters replaced by visible escapes (`\\x1b`,
    `\\u202e`, `\\n`), so it prints on one line exactly as stored. Backslashes are left as
    they are: the result is for reading, not for parsing back. With `lines`, line breaks and
    tabs stay as they are (a web page shows them as space, or in a `pre` as breaks: neither
    hides or reorders text, as a bidi override or a zero-width character on a page does)."""
    if text.isprintable():
        return text
    kept = _KEPT_IN_LINES if lines else ""
    return "".join(ch if ch in kept else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    if ch.isprintable() or unicodedata.category(ch) not in _ESCAPED:
        return ch
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
