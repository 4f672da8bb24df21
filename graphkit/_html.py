"""HTML for the web inbox: the review card, the pending list, audit trails, forms from JSON
schemas. Every piece of text that a model, a tool, a client or a reviewer wrote is escaped;
no card carries script of its own.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING, Any

from graphkit._secrets import masked_message
from graphkit._text import printable
from graphkit.errors import GraphkitError, InvalidApprovedArgsError

if TYPE_CHECKING:
    from graphkit.types import PendingApproval

__all__ = ["audit_table", "card", "fields", "page", "parse_fields", "pending_rows"]


def _e(value: Any) -> str:
    """Text for reading, escaped: bidi overrides, zero-width and control characters show as
    escapes (`printable`), as the CLI prints them: a prompt of "Pay 50 to \\u202eevil" read
    as another payee on the page (helper-120)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return escape(printable(text, lines=True), quote=True)


def _value(value: str) -> str:
    """A value a form sends back (a field's name or content, a choice), escaped only: it
    must come back as it was given."""
    return escape(value, quote=True)


def _json(value: Any) -> str:
    return escape(json.dumps(value, indent=2, ensure_ascii=True, default=str), quote=True)


def _when(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None


def _span(seconds: float) -> str:
    seconds = abs(int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def age(item: PendingApproval) -> str:
    created = _when(item.created_at)
    return _span((datetime.now(UTC) - created).total_seconds()) if created else "?"


def time_left(item: PendingApproval) -> str:
    expires = _when(item.expires_at)
    if expires is None:
        return "no expiry"
    left = (expires - datetime.now(UTC)).total_seconds()
    return f"{_span(left)} left" if left > 0 else "expired"


def page(title: str, body: str, *, identity: str | None = None, csrf: str | None = None,
         live: bool = False, base: str = "/") -> str:
    """A whole page. `live` subscribes it to server-sent updates of the pending list."""
    who = (f'<form method="post" action="logout" class="who">{_e(identity)} '
           f'<input type="hidden" name="csrf" value="{_e(csrf or "")}">'
           '<button>Sign out</button></form>') if identity else ""
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<base href='{_e(base)}'><title>{_e(title)} · graphkit</title>"
        "<link rel='stylesheet' href='static/app.css'>"
        "<script src='static/app.js' defer></script></head>"
        f"<body data-live='{'1' if live else ''}'>"
        f"<header><a href='./' class='brand'>graphkit inbox</a>"
        f"<nav><a href='./'>Pending</a> <a href='grants'>Grants</a></nav>{who}</header>"
        f"<main>{body}</main></body></html>"
    )


def pending_rows(items: Sequence[PendingApproval]) -> str:
    """The rows of the pending list, newest first."""
    if not items:
        return "<tr class='empty'><td colspan='7'>Nothing waits for a decision.</td></tr>"
    rows = []
    for item in sorted(items, key=lambda p: p.created_at, reverse=True):
        kind = "input" if item.kind == "suspension" else "approval"
        rows.append(
            f"<tr data-id='{_e(item.id)}'>"
            f"<td><a href='approvals/{_e(item.id)}'>{_e(item.tool_name)}</a></td>"
            f"<td>{_e(item.prompt or '')}</td>"
            f"<td>{_e(' › '.join(item.agent_path))}</td>"
            f"<td>{kind}</td><td>{age(item)}</td><td>{time_left(item)}</td>"
            f"<td><code>{_e(item.id)}</code></td></tr>")
    return "".join(rows)


def pending_table(items: Sequence[PendingApproval], agents: Iterable[str],
                  tools: Iterable[str], chosen: Mapping[str, str]) -> str:
    def options(name: str, values: Iterable[str]) -> str:
        opts = "".join(
            f"<option value='{_value(v)}'{' selected' if chosen.get(name) == v else ''}>{_e(v)}"
            "</option>" for v in sorted(set(values)))
        return f"<select name='{name}'><option value=''>all {name}s</option>{opts}</select>"

    return (
        "<h1>Waiting for a decision</h1>"
        "<form method='get' class='filters'>" + options("agent", agents)
        + options("tool", tools) + "<button>Filter</button></form>"
        "<table class='pending'><thead><tr><th>Tool</th><th>Prompt</th><th>Agent</th>"
        "<th>Kind</th><th>Age</th><th>Expiry</th><th>Id</th></tr></thead>"
        f"<tbody id='pending'>{pending_rows(items)}</tbody></table>"
    )


def card(item: PendingApproval, *, messages: Sequence[Mapping[str, Any]] = (),
         no_messages: str | None = None) -> str:
    """The review card: what would run, why it asks, where it comes from, what is known."""
    rows = [
        ("Tool", f"<code>{_e(item.tool_name)}</code>"),
        ("Prompt", _e(item.prompt or "")),
        ("Agent", _e(" › ".join(item.agent_path))),
        ("Arguments", f"<pre>{_json(item.args)}</pre>"),
        ("Defaults", f"<pre>{_json(item.metadata.get('defaults'))}</pre>"),
        ("Digest", f"<code>{_e(item.args_digest)}</code>"),
        ("Status", f"<span class='status {_e(item.status)}'>{_e(item.status)}</span>"),
        ("Created", f"{_e(item.created_at)} ({age(item)} ago)"),
        ("Expiry", time_left(item)),
    ]
    if item.kind == "suspension":
        rows.insert(1, ("Asks for", f"<pre>{_json(item.metadata.get('suspend_payload'))}</pre>"))
    if item.status != "pending":
        # no name: an anonymous reviewer, or graphkit itself (expiry, a new message)
        rows.append(("Decided by", f"{_e(item.decided_by or 'no named reviewer')}"
                     f"{' — ' + _e(item.comment) if item.comment else ''}"))
    if item.approved_args is not None:
        rows.append(("Approved args", f"<pre>{_json(item.approved_args)}</pre>"))
    left = "style='text-align:left;vertical-align:top'"  # notebooks right-align tables
    body = "".join(f"<tr><th {left}>{k}</th><td {left}>{v}</td></tr>" for k, v in rows)
    recent = ""
    if messages:
        lines = "".join(
            f"<li><b>{_e(m.get('type', '?'))}</b> {_e(str(m.get('content', ''))[:400])}</li>"
            for m in messages[-8:])
        recent = f"<h3>Recent messages</h3><ol class='messages'>{lines}</ol>"
    elif no_messages:
        recent = f"<p class='no-messages'>{_e(no_messages)}</p>"
    return f"<section class='card' data-id='{_e(item.id)}'><table>{body}</table>{recent}</section>"


def fields(schema: Mapping[str, Any] | None, values: Mapping[str, Any], prefix: str) -> str:
    """Form inputs for an object schema's properties, filled with `values`; anything nested is
    a JSON text area. (A text area's content starts with a line break, which HTML drops: one
    the value starts with is kept.)"""
    props = (schema or {}).get("properties") or {}
    if not props:
        return (f"<label>Arguments (JSON)<textarea name='{prefix}__json' rows='6'>\n"
                f"{_json(dict(values))}</textarea></label>")
    out = []
    required = set((schema or {}).get("required") or [])
    for name, spec in props.items():
        kind, value = _shown(spec, values, name)
        label = f"{_e(name)}{' *' if name in required else ''}"
        field = f"{prefix}.{_value(name)}"
        if kind == "boolean":
            checked = " checked" if value else ""
            out.append(f"<label><input type='checkbox' name='{field}' value='true'{checked}> "
                       f"{label}</label>")
        elif kind == "text":  # an input would drop the line breaks, or scroll past a tail
            out.append(f"<label>{label}<textarea name='{field}' rows='3' data-kind='string'>"
                       f"\n{_value(_as_text(kind, value))}</textarea></label>")
        elif kind in ("integer", "number", "string"):
            secret = isinstance(spec, Mapping) and spec.get("format") == "password"
            typ = "number" if kind != "string" else "password" if secret else "text"
            step = " step='any'" if kind == "number" else ""
            shown = "" if value is None else _value(_as_text(kind, value))
            out.append(f"<label>{label}<input type='{typ}'{step} name='{field}' "
                       f"value='{shown}' data-kind='{kind}'></label>")
        else:
            out.append(f"<label>{label} (JSON)<textarea name='{field}' rows='3' "
                       f"data-kind='json'>\n{_json(value)}</textarea></label>")
    return "".join(out)


def _shown(spec: Any, values: Mapping[str, Any], name: str) -> tuple[str | None, Any]:
    """(the kind of input `fields` makes for a property, the value it shows): `"text"` is a
    string with line breaks, shown in a text area."""
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    value = values.get(name, spec.get("default") if isinstance(spec, Mapping) else None)
    if kind == "string" and isinstance(value, str) and (
            "\n" in value or "\r" in value or len(printable(value)) > LONG_TEXT):
        return "text", value
    return kind, value


LONG_TEXT = 60
"""Characters, as shown (escapes included: helper-146), past which a string is edited in a
text area: an input scrolls the rest out of sight (a memo's tail after a run of spaces,
helper-144)."""


def _as_text(kind: str | None, value: Any) -> str:
    """A string or number as a form shows it: control and format characters as escapes, as
    the card shows them (`printable`; filled raw, a bidi override made an input read as
    another payee: helper-144). Left as it was, the field keeps the value (`parse_fields`)."""
    return printable(str(value), lines=kind == "text")


def _as_sent(kind: str | None, value: Any) -> str | None:
    """What a browser sends back for an input `fields` made, untouched (None: nothing, an
    unchecked box), as `parse_fields` reads it: line breaks as `\n`, a number input emptied
    of what is no finite number (`inf`, `nan`)."""
    if kind == "boolean":
        return "true" if value else None
    if kind == "text":
        text = _as_text(kind, value)
    elif kind in ("integer", "number", "string"):
        text = "" if value is None else _as_text(kind, value)
        if kind != "string" and not _finite(value):
            text = ""
    else:
        text = json.dumps(value, indent=2, ensure_ascii=True, default=str)
    return _received(text.replace("\x00", "\ufffd"))


def _is_default(spec: Any, value: Any) -> bool:
    """Whether `value` is a null the property gets by default when left out (`x: int = None`,
    which the tool's model refuses if sent back explicitly). Only a null: a schema writes a
    secret's default as the mask, which an untouched secret also shows (helper-69)."""
    return (value is None and isinstance(spec, Mapping) and "default" in spec
            and spec["default"] is None)


def _finite(value: Any) -> bool:
    try:
        return value is None or math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):
        return False


def _received(raw: str) -> str:
    """A submitted value's line breaks as one `\n` (browsers send CRLF, and a lone CR as one)."""
    return raw.replace("\r\n", "\n").replace("\r", "\n")


def parse_fields(schema: Mapping[str, Any] | None, form: Mapping[str, str],
                 prefix: str, shown: Mapping[str, Any] | None = None,
                 error: type[GraphkitError] = InvalidApprovedArgsError) -> dict[str, Any]:
    """Read the inputs `fields` made back into JSON values (the tool's own model validates);
    text that is not one (`1e3` for an integer, JSON nested past Python's depth) is `error`,
    naming the field, never its value (a builtin error reached the reviewer: helper-106).

    With `shown` (the values the form was filled with), an input the reviewer left as it was
    keeps the value the card showed (left out where it was absent, or where it is the
    default, which it then gets): a form cannot hold every value (a leading line break, a
    carriage return, NUL, `inf`, a null in a number or a check box), and an edit of one field
    changed the others it could not hold."""
    def unreadable(field: str, kind: str) -> GraphkitError:
        return error(f"field {field!r} does not hold a valid {kind}")

    props = (schema or {}).get("properties") or {}
    if not props:
        try:
            whole = json.loads(form.get(f"{prefix}__json", "{}") or "{}")
        except (ValueError, RecursionError):
            raise unreadable(f"{prefix}__json", "JSON object") from None
        if not isinstance(whole, dict):
            raise unreadable(f"{prefix}__json", "JSON object")
        return whole
    out: dict[str, Any] = {}
    for name, spec in props.items():
        key = f"{prefix}.{name}"
        raw = None if form.get(key) is None else _received(form[key])
        if shown is not None:
            kind, value = _shown(spec, shown, name)
            if raw == _as_sent(kind, value):
                if name in shown and not _is_default(spec, shown[name]):
                    out[name] = shown[name]
                continue
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if kind == "boolean":
            out[name] = raw == "true"
            continue
        if raw is None:
            continue
        try:
            if kind == "integer":
                out[name] = int(raw) if raw.strip() else None
            elif kind == "number":
                out[name] = float(raw) if raw.strip() else None
            elif kind == "string":
                out[name] = raw
            else:
                out[name] = json.loads(raw) if raw.strip() else None
        except (ValueError, RecursionError):
            raise unreadable(name, kind if kind in ("integer", "number") else "JSON value"
                             ) from None
        if out[name] is None:
            del out[name]
    return out


def audit_table(entries: Sequence[Mapping[str, Any]]) -> str:
    if not entries:
        return "<p>No audit entries.</p>"
    head = ("When", "Event", "Tool", "By", "Comment", "Detail")
    rows = "".join(
        "<tr>" + "".join(f"<td>{_e(str(e.get(k) or ''))}</td>" for k in (
            "at", "event", "tool_name", "decided_by", "comment", "detail")) + "</tr>"
        for e in entries)
    return (f"<table class='audit'><thead><tr>{''.join(f'<th>{h}</th>' for h in head)}"
            f"</tr></thead><tbody>{rows}</tbody></table>")


def _message(message: Any) -> str:
    message = masked_message(message)
    kind = getattr(message, "type", "?")
    text = str(getattr(message, "text", "") or getattr(message, "content", "") or "")
    calls = getattr(message, "tool_calls", None) or []
    extra = "".join(f"<div class='call'>→ <code>{_e(c.get('name'))}</code> "
                    f"<code>{_e(json.dumps(c.get('args'), default=str))}</code></div>"
                    for c in calls)
    status = getattr(message, "status", None)
    mark = f" <span class='status {_e(status)}'>{_e(status)}</span>" if kind == "tool" else ""
    return (f"<li><b>{_e(kind)}</b>{mark} {_e(text[:2000])}{extra}</li>")


def result(res: Any) -> str:
    """A run's result: why it stopped, its answer, what waits, and its messages."""
    pending = [card(p) for p in res.pending_approvals if p.status == "pending"]
    waiting = ("<h4>Waiting for a decision</h4>" + "".join(pending)) if pending else ""
    messages = "".join(_message(m) for m in res.messages)
    return (
        f"<div class='graphkit-result'><p><b>finish_reason</b>: {_e(res.finish_reason)} · "
        f"<b>run</b> <code>{_e(res.run_id)}</code></p>"
        + (f"<blockquote>{_e(res.text)}</blockquote>" if res.text else "")
        + waiting + f"<details><summary>{len(res.messages)} messages</summary><ol>{messages}"
        "</ol></details></div>"
    )


def listing(items: Sequence[PendingApproval]) -> str:
    """The inbox's pending list, as a table (no links: there is no server behind it)."""
    rows = "".join(
        f"<tr><td><code>{_e(p.tool_name)}</code></td><td>{_e(p.prompt or '')}</td>"
        f"<td>{_e(' › '.join(p.agent_path))}</td><td>{_e(p.kind)}</td><td>{age(p)}</td>"
        f"<td>{time_left(p)}</td><td><code>{_e(p.id)}</code></td></tr>" for p in items)
    return ("<table class='pending'><thead><tr><th>Tool</th><th>Prompt</th><th>Agent</th>"
            "<th>Kind</th><th>Age</th><th>Expiry</th><th>Id</th></tr></thead>"
            f"<tbody>{rows or '<tr><td colspan=7>Nothing waits.</td></tr>'}</tbody></table>")


_MD_SPECIAL = "\\`*_{}[]()#+-.!|<>&~"


def _md(value: Any) -> str:
    """Text for Markdown: every markup character escaped (no links, images or raw HTML), one
    line, control and format characters as escapes (`printable`, as `_e`)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = printable(" ".join(text.splitlines()))
    return "".join(f"\\{c}" if c in _MD_SPECIAL else c for c in text)


def _md_code(value: Any) -> str:
    """A Markdown code span that shows `value` literally, backticks and all (a fence longer
    than any run of backticks in it: replacing them showed a shell's command substitution as
    a harmless quote, helper-66). Line breaks, which a span shows as spaces, and control and
    format characters are escapes (`printable`)."""
    text = printable(value if isinstance(value, str) else json.dumps(value, default=str))
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def card_markdown(item: PendingApproval) -> str:
    lines = [f"**{_md(item.kind)}** {_md_code(item.tool_name)} — {_md(item.prompt or '')}",
             f"- agent: {_md(' › '.join(item.agent_path))}",
             f"- args: {_md_code(item.args)}",
             f"- status: {_md(item.status)}"
             + (f" by {_md(item.decided_by)}" if item.decided_by else ""),
             f"- expiry: {time_left(item)}", f"- id: {_md_code(item.id)}"]
    return "\n".join(lines)


def result_markdown(res: Any) -> str:
    parts = [f"**finish_reason**: {_md(res.finish_reason)}"]
    if res.text:
        parts.append(f"> {_md(res.text)}")
    parts += [card_markdown(p) for p in res.pending_approvals if p.status == "pending"]
    return "\n\n".join(parts)
