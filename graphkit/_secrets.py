"""Secret arguments (`SecretStr`, `SecretBytes`, `Secret[...]`): the tool receives the real
value and the digest covers it; every view of a call shows the mask instead.

The gate's plan and the ledger keep the real arguments (they run). Which parts of them are
secret is found once, when a call is planned, from the tool's own JSON dump (pydantic masks
secrets there), and recorded with the call's approval (`metadata["secret_paths"]`); every
rendering (the interrupt value, the inbox, the audit, webhooks, cards) masks those paths.
An edit that leaves a masked value as shown keeps the real one.

Long text is withheld the same way from the interrupt value (`withheld`): a 1 MiB file a model
writes through a tool is kept once in the ledger, not again in every checkpoint's interrupt;
the interrupt shows its length, digest and start, and an edit that leaves that as shown keeps
the real text (`restored`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, quote_plus

from langchain_core.messages import AIMessage, AIMessageChunk, message_chunk_to_message
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graphkit._digest import args_digest

__all__ = ["MASK", "PATHS_KEY", "SALT_KEY", "SECRETS_KEY", "WITHHELD_CHARS", "copy_secrets",
           "holds_mask", "holds_secret", "masked", "masked_ai", "masked_message", "masked_record",
           "new_salt", "observed", "record_digest", "record_paths", "restored",
           "salted_digest", "scrub_exception", "scrubbed", "secret_paths", "secret_values",
           "shows_masked", "still_shows", "stray_mask", "unmasked", "with_secrets", "withheld"]

SECRETS_KEY = "graphkit_secret_paths"
"""In an AI message's `response_metadata` (which no provider is sent): where each of its tool
calls holds secrets, by tool call id, so that any view of the message can mask them."""

MASK = "**********"
"""What pydantic shows for a secret, and what every view of one shows."""

Path = list[str | int]


def secret_paths(shown: Any, real: Any, at: Path | None = None) -> list[Path]:
    """Where `shown` (the tool's JSON dump, secrets masked) masks what `real` holds. A part
    whose shape differs between the two (a set's members reordered) is secret as a whole."""
    at = at or []
    if isinstance(shown, str):
        return [at] if shown == MASK and real != MASK else []
    if isinstance(shown, Mapping) and isinstance(real, Mapping):
        if set(shown) == set(real):
            return [p for key in shown for p in secret_paths(shown[key], real[key], [*at, key])]
    elif (isinstance(shown, list) and isinstance(real, list) and len(shown) == len(real)):
        return [p for i, (s, r) in enumerate(zip(shown, real, strict=True))
                for p in secret_paths(s, r, [*at, i])]
    return [at] if holds_mask(shown) else []


def stray_mask(edited: Any, real: Any, at: Path | None = None) -> bool:
    """Whether `edited` shows the mask where `real` holds no such text: a mask no secret
    stands behind (the model's own text that reads like the mask, left where it wrote it,
    is its value: helper-116)."""
    at = at or []
    if isinstance(edited, str):
        return edited == MASK and _get(real, at) != (MASK, True)
    if isinstance(edited, Mapping):
        return any(stray_mask(v, real, [*at, k]) for k, v in edited.items())
    if isinstance(edited, list):
        return any(stray_mask(v, real, [*at, i]) for i, v in enumerate(edited))
    return False


def holds_mask(value: Any) -> bool:
    """Whether the mask shows anywhere in `value` (a value, at any depth)."""
    if isinstance(value, str):
        return value == MASK
    if isinstance(value, Mapping):
        return any(holds_mask(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_mask(v) for v in value)
    return False


def masked(value: Any, paths: Sequence[Sequence[str | int]] | None) -> Any:
    """A copy of `value` with each of `paths` shown as the mask (None, no paths: `value`)."""
    if not paths or not isinstance(value, Mapping | list):
        return value
    result = copy.deepcopy(value)
    for path in paths:
        result = _put(result, list(path), MASK)
    return result


def unmasked(edited: Any, real: Any, paths: Sequence[Sequence[str | int]] | None) -> Any:
    """`edited` with every secret it still shows as the mask given its real value (a reviewer
    who edits other fields keeps the secret they never saw). A secret inside a list's item
    only where that item is left as it was shown, at its place (`_in_place`): an item
    dropped, inserted or moved before it took another item's secret along its position (the
    partner's address got the internal token: helper-116); such a mask is left as it is,
    for the edit to be refused."""
    if not paths or not isinstance(edited, Mapping):
        return edited
    shown = masked(real, paths)  # (what the reviewer saw: long text whole, or withheld)
    cut = withheld(shown)[0]
    # (a copy that shares nothing: one dict given under two arguments took each secret
    # restored in it to the other's place too, the internal key to the partner: helper-117)
    result = _unshared(dict(edited))
    for path in paths:
        mask, found = _get(result, list(path))
        if found and mask == MASK and (_in_place(edited, shown, list(path))
                                       or _in_place(edited, cut, list(path))):
            value, known = _get(real, list(path))
            if known:
                result = _put(result, list(path), copy.deepcopy(value))
    return result


def _unshared(value: Any) -> Any:
    """A copy of `value` in which no dict or list is reached twice (`copy.deepcopy` keeps
    what the original shares)."""
    if isinstance(value, Mapping):
        return {k: _unshared(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_unshared(v) for v in value]
    return copy.deepcopy(value)


def _in_place(edited: Any, shown: Any, path: Path) -> bool:
    """Whether the item each list on `path` is gone through at is the one shown there,
    unchanged (items dropped after it, or added, move none before them). An item shown as
    another one is (a mask alone, two credentials of one host) cannot say which of them it
    is once the list's shown items change (dropping the first kept its secret: helper-119);
    items added after them all change none."""
    for part in path:
        alike = False
        if isinstance(edited, list) or isinstance(shown, list):
            if not (isinstance(edited, list) and isinstance(shown, list)):
                return False
            alike = (isinstance(part, int) and 0 <= part < len(shown)
                     and shown.count(shown[part]) > 1 and edited[:len(shown)] != shown)
        (edited, found), (shown, known) = _step(edited, part), _step(shown, part)
        if not (found and known) or alike or (isinstance(part, int) and edited != shown):
            return False
    return True


WITHHELD_CHARS = 16 * 1024
"""Text at least this long is withheld from the interrupt value (shown by length and start)."""
PREVIEW_CHARS = 200


def placeholder(text: str) -> str:
    """What the interrupt shows of a long text: its length, digest and start."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return (f"[graphkit withheld {len(text)} characters (sha256 {digest}...) from this view; "
            f"the inbox shows them all. They begin: {text[:PREVIEW_CHARS]}]")


def withheld(value: Any) -> tuple[Any, bool]:
    """A copy of `value` with each long text replaced by its `placeholder`, and whether any
    was."""
    if isinstance(value, str):
        return (placeholder(value), True) if len(value) >= WITHHELD_CHARS else (value, False)
    if isinstance(value, Mapping):
        items = {key: withheld(item) for key, item in value.items()}
        return ({key: v for key, (v, _) in items.items()},
                any(w for _, w in items.values()))
    if isinstance(value, list):
        parts = [withheld(item) for item in value]
        return [v for v, _ in parts], any(w for _, w in parts)
    return value, False


def restored(edited: Any, real: Any) -> Any:
    """`edited` with each long text it still shows as withheld given back its real value (a
    reviewer who edits other fields keeps the text they were shown the start of)."""
    if isinstance(edited, str) and isinstance(real, str):
        return real if len(real) >= WITHHELD_CHARS and edited == placeholder(real) else edited
    if isinstance(edited, Mapping) and isinstance(real, Mapping):
        return {key: restored(item, real[key]) if key in real else item
                for key, item in edited.items()}
    if isinstance(edited, list) and isinstance(real, list):
        return [restored(item, real[i]) if i < len(real) else item
                for i, item in enumerate(edited)]
    return edited


PATHS_KEY = "secret_paths"
"""In an approval record's `metadata` (and an edit's decision): where its arguments hold
secrets."""


SALT_KEY = "digest_salt"
"""In an approval record's `metadata`, when its arguments hold secrets: the salt of its
`args_digest`. The digest is shown (cards, webhooks, the interrupt) and binds a decision to
what was reviewed; unsalted, a short secret (a PIN) could be found by hashing guesses. The
salt stays in the ledger's record; every view drops it (`masked_record`)."""


def new_salt() -> str:
    return secrets.token_hex(16)


def salted_digest(args: Mapping[str, Any], salt: str) -> str:
    """The `args_digest` of arguments that hold secrets, under their record's salt."""
    return "sha256s:" + hashlib.sha256((salt + args_digest(args)).encode()).hexdigest()


def record_digest(record: Mapping[str, Any], args: Mapping[str, Any]) -> str:
    """The digest a reviewer sees for `args` as arguments of `record`'s call (salted when its
    arguments hold secrets)."""
    metadata = record.get("metadata")
    salt = metadata.get(SALT_KEY) if isinstance(metadata, Mapping) else None
    return salted_digest(args, salt) if isinstance(salt, str) and salt else args_digest(args)


def record_paths(record: Mapping[str, Any]) -> list[Path] | None:
    """Where an approval record's arguments hold secrets (as planned, and as edited)."""
    metadata = record.get("metadata")
    paths = metadata.get(PATHS_KEY) if isinstance(metadata, Mapping) else None
    return list(paths) if paths else None


def with_secrets(record: Mapping[str, Any], decision: Mapping[str, Any] | None
                 ) -> dict[str, Any]:
    """The record whose masked paths include those of a decision's edited arguments."""
    extra = (decision or {}).get(PATHS_KEY)
    if not extra:
        return dict(record)
    metadata = dict(record.get("metadata") or {})
    known = list(metadata.get(PATHS_KEY) or [])
    metadata[PATHS_KEY] = known + [p for p in extra if p not in known]
    return {**record, "metadata": metadata}


def masked_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """An approval record as a view shows it: its secret arguments masked (and its digest's
    salt left out)."""
    paths = record_paths(record)
    if not paths:
        return dict(record)
    shown = dict(record)
    metadata = record.get("metadata")
    if isinstance(metadata, Mapping) and SALT_KEY in metadata:
        shown["metadata"] = {k: v for k, v in metadata.items() if k != SALT_KEY}
    shown["args"] = masked(record.get("args"), paths)
    if isinstance(record.get("approved_args"), Mapping):
        shown["approved_args"] = masked(record["approved_args"], paths)
    return shown


def _step(value: Any, part: str | int) -> tuple[Any, bool]:
    if isinstance(value, Mapping) and part in value:
        return value[part], True
    if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
        return value[part], True
    return None, False


def masked_message(message: Any) -> Any:
    """An AI message as a view shows it: its calls' secrets masked where its metadata records
    them (`masked_ai`; a conversation written before graphkit masked it holds them), other
    messages as they are."""
    metadata = getattr(message, "response_metadata", None)
    secrets = metadata.get(SECRETS_KEY) if isinstance(metadata, Mapping) else None
    if not isinstance(message, AIMessage) or not isinstance(secrets, Mapping):
        return message
    return masked_ai(message, secrets)


def masked_ai(ai: AIMessage, secrets: Mapping[str, Sequence[Sequence[str | int]]]
              ) -> AIMessage:
    """The model's reply as the conversation keeps it: its calls' secrets (`secrets`, by tool
    call id) masked wherever the message holds the arguments (its tool calls, a provider's
    raw copy of them, tool-use content blocks), and where they were recorded, so that every
    later view masks an edit too. The ledger keeps the real values, which the calls run with;
    every reader of the thread (checkpoints, a LangGraph server's clients, the stream) sees
    the mask."""
    if not secrets:
        return ai
    if isinstance(ai, AIMessageChunk):  # (kept as a chunk, its calls would be read again
        whole = message_chunk_to_message(ai)  # from the chunks' text, the secret and all)
        ai = whole if isinstance(whole, AIMessage) else ai
    calls = [{**c, "args": masked(c.get("args"), secrets.get(str(c.get("id"))))}
             for c in ai.tool_calls]
    extra = dict(ai.additional_kwargs)
    raw = extra.get("tool_calls")
    if isinstance(raw, list):
        extra["tool_calls"] = [_masked_raw(r, secrets) for r in raw]
    content = [_masked_block(b, secrets) for b in ai.content] if isinstance(
        ai.content, list) else ai.content
    # Then every other place a provider keeps a copy (a block of a shape not known here, the
    # raw output in its metadata, a call it could not parse): the values themselves are taken
    # out (helper-51: OpenAI's `function_call`), JSON text read as the data it holds (a short
    # secret is a whole value there; helper-52), and the names of things left as they are.
    values = sorted({v for c in ai.tool_calls if not shows_masked(ai, c)
                     for v in secret_values(c.get("args"), secrets.get(str(c.get("id"))))},
                    key=lambda t: (-len(t), t))
    metadata = {k: v if k == SECRETS_KEY else _copy_scrubbed(v, values)
                for k, v in ai.response_metadata.items()}
    metadata[SECRETS_KEY] = {**(ai.response_metadata.get(SECRETS_KEY) or {}), **secrets}
    return ai.model_copy(update={
        "tool_calls": calls, "additional_kwargs": _copy_scrubbed(extra, values),
        "content": _copy_scrubbed(content, values), "response_metadata": metadata,
        "invalid_tool_calls": _copy_scrubbed(ai.invalid_tool_calls, values),
        "name": _copy_scrubbed(ai.name, values)})


_NAMES = frozenset({"type", "id", "call_id", "tool_call_id", "tool_use_id", "name", "index"})
"""Keys of a provider's structures whose values name things rather than say them: a secret
that is also a word ("text", "function") would otherwise break the block it is in."""
_KEYS = _NAMES | {"text", "function", "arguments", "input", "args", "content", "tool_calls",
                  "output", "summary", "extras", "citations", "annotations", "role", "status"}
"""Keys a provider's structures are made of, kept as they are (any other key that is, or
holds, a secret is masked, as `scrubbed` masks one)."""


def _copy_scrubbed(value: Any, secrets: Sequence[str], depth: int = 0) -> Any:
    """A provider's copy of a reply with `secrets` taken out of its values (never its keys,
    nor the values of `_NAMES`): text that holds JSON is read, scrubbed as data, and written
    back (a secret of any length is a whole value there, however the text escapes it); other
    text as `scrubbed` does."""
    if not secrets or depth > 32:
        return value
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = k if k in _KEYS else _scrub(k, secrets)
            out[_unclaimed(key, out)] = v if k in _NAMES else _copy_scrubbed(
                v, secrets, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_copy_scrubbed(v, secrets, depth + 1) for v in value]
    if isinstance(value, str) and value[:1] in ("{", "[", '"'):
        try:
            data = json.loads(value)
        except ValueError:
            data = None
        if isinstance(data, dict | list | str) and data != value:
            read = _copy_scrubbed(data, secrets, depth + 1)
            return value if read == data else json.dumps(read)
    return _scrub(value, secrets)


def shows_masked(ai: AIMessage, call: Mapping[str, Any]) -> bool:
    """Whether the conversation shows this call of `ai` with its secrets masked (`masked_ai`):
    the real values were in the record of the turn, and running the mask would be wrong."""
    recorded = ai.response_metadata.get(SECRETS_KEY)
    paths = recorded.get(str(call.get("id"))) if isinstance(recorded, Mapping) else None
    return any(_get(call.get("args"), list(p)) == (MASK, True) for p in paths or ())


def scrub_exception(exc: BaseException, secrets: Sequence[str],
                    outer: BaseException | None = None) -> None:
    """Take a call's secret values (`secret_values`) out of the error it raised and the errors
    it came with (its causes, its context, a group's members): their arguments and the
    attributes their message is made of (a failed command's `cmd` and output, a path an
    `OSError` names, notes), as far as they can be set. Text only: a number keeps its type (a
    caller may compare a `returncode`), and an error whose message could be made before and
    no longer can is put back as it was. LangGraph hands the error to the caller and its
    streams, and stores it in the checkpoint; `still_shows` tells whether any of that still
    holds a secret. `outer` is what the caller was handling when the tool began, which
    Python attaches to the tool's error as its context: the caller's, left as it is."""
    if secrets:
        for error in _chain(exc, outer)[0]:
            _scrub_one(error, secrets)


def still_shows(exc: BaseException, secrets: Sequence[str],
                outer: BaseException | None = None) -> bool:
    """Whether the error, or one it came with, shows one of `secrets` after `scrub_exception`
    (where they could not be set): in what a traceback prints of it (its message, notes, a
    `SyntaxError`'s source line) or in what LangGraph's serializer stores of it in the
    checkpoint (its repr; a dataclass's fields). A chain too long to read whole counts as
    showing. The names of the errors' classes and modules are not read (a secret "Error"
    would withhold every error), and a secret number only shows as a whole number (a PIN
    1234 is not port 12345); nor is `outer` (`scrub_exception`). Such an error is not
    raised (`_tools_node`). Never raises."""
    try:
        errors, whole = _chain(exc, outer)
        if not whole:
            return True
        names = {n for e in errors
                 for n in (type(e).__module__, type(e).__qualname__, type(e).__name__)}
        found = [p for p in map(_pattern, secrets) if p is not None]
        for error in errors:
            for text in _readings(error):
                if text in secrets or any(_outside(m.span(), text, names)
                                          for p in found for m in p.finditer(text)):
                    return True
    except BaseException:
        return True
    return False


def _outside(span: tuple[int, int], text: str, names: set[str]) -> bool:
    """Whether a secret found at `span` is more than part of a class's or module's name."""
    start, end = span
    return not any(at <= start and end <= at + len(name) for name in names if name
                   for at in _all(text, name, max(0, end - len(name)), start + 1))


def _all(text: str, part: str, lo: int, hi: int) -> list[int]:
    """Where `part` starts in `text`, at `lo` to `hi` (excluded)."""
    found, at = [], text.find(part, lo)
    while 0 <= at < hi:
        found.append(at)
        at = text.find(part, at + 1)
    return found


@functools.lru_cache(maxsize=256)
def _pattern(secret: str) -> re.Pattern[str] | None:
    """How a secret shows inside text, to `still_shows`: as given (4 characters at least:
    `SHORTEST_IN_TEXT`), a number as a whole one, zero-padded too (`004242`); `_scrub`
    masks a number inside longer ones as well."""
    if len(secret) < SHORTEST_IN_TEXT:
        return None
    if secret.isdigit():
        return re.compile(rf"(?<![0-9])0*{secret}(?![0-9])")
    return re.compile(re.escape(secret))


_SERDE = JsonPlusSerializer()


def _readings(error: BaseException) -> list[str]:
    """What is read of an error: its message, notes and source line as text (a `str`
    subclass's own text, whatever its `__str__` says), and what LangGraph's serializer
    stores of it."""
    found: list[str] = []
    for read in (lambda: str(error), lambda: getattr(error, "text", None),
                 lambda: getattr(error, "__notes__", None)):
        try:
            value = read()
        except BaseException:  # (not readable: nothing shown)
            continue
        for item in value if isinstance(value, list) else [value]:
            with contextlib.suppress(BaseException):  # what a traceback prints of it
                found.append(str(item))
            with contextlib.suppress(BaseException):  # and its text, whatever that says
                found.append(str.__str__(item))
    with contextlib.suppress(BaseException):  # (not serializable: nothing stored)
        # (bytes that are no text, a msgpack header, read as no digit: "\ufffd")
        found.append(_SERDE.dumps_typed(error)[1].decode("utf-8", "replace"))
    return [str.__str__(text) for text in found if isinstance(text, str)]


_ARGS = BaseException.__dict__["args"]
"""The `args` every error's text and repr are made of, which a class's own `args` property
(read-only, say) hides but does not replace."""


def _chain(exc: BaseException, outer: BaseException | None = None
           ) -> tuple[list[BaseException], bool]:
    """The error and those it came with (causes, context, a group's members), 64 at most, up
    to `outer` (the caller's: not one of them); and whether that is all of them."""
    todo: list[tuple[BaseException | None, bool]] = [(exc, False)]
    found: dict[int, BaseException] = {}
    while todo:
        error, implicit = todo.pop()
        if error is None or (implicit and error is outer) or id(error) in found:
            continue  # (the caller's, reached only as the context Python attached)
        if len(found) == 64:
            return list(found.values()), False
        found[id(error)] = error
        try:
            members = list(getattr(error, "exceptions", None) or ())
        except BaseException:  # (an odd `__getattr__`)
            members = []
        todo += [(error.__cause__, False), (error.__context__, True),
                 *((m, False) for m in members if isinstance(m, BaseException))]
    return list(found.values()), True


_NAMED = ("filename", "filename2", "strerror", "code", "msg", "text", "object", "reason",
          "name", "path", "value")
"""Attributes a message is made of that are no instance attributes: the paths an `OSError`
names, a `SystemExit`'s code, a `SyntaxError`'s source line, the text a `UnicodeError`
could not read, an `ImportError`'s name, a `StopIteration`'s value."""


def _attributes(error: BaseException) -> dict[str, Any]:
    """The error's attributes (its own, its slots, `_NAMED`) that can be read."""
    names: list[str] = list(_NAMED)
    with contextlib.suppress(Exception):
        names += list(vars(error))
    for cls in type(error).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    found: dict[str, Any] = {}
    for name in dict.fromkeys(names):
        try:
            found[name] = getattr(error, name)
        except BaseException:  # (an odd property: nothing to scrub there)
            continue
    return found


def _renders(error: BaseException) -> bool:
    try:
        return isinstance(str(error), str)
    except BaseException:
        return False


def _set_args(error: BaseException, args: tuple[Any, ...]) -> None:
    with contextlib.suppress(Exception):  # the class's own `args`, where it has a setter
        error.args = args
    with contextlib.suppress(Exception):
        _ARGS.__set__(error, args)


def _scrub_one(error: BaseException, secrets: Sequence[str]) -> None:
    before = _attributes(error)
    args = _ARGS.__get__(error)
    rendered = _renders(error)
    _set_args(error, tuple(scrubbed(a, secrets, numbers=False) for a in args))
    for name, value in before.items():
        with contextlib.suppress(Exception):
            clean = scrubbed(value, secrets, numbers=False)
            if clean is not value:
                setattr(error, name, clean)
    if rendered and not _renders(error):  # its message is made of what was scrubbed: as it was
        _set_args(error, args)
        for name, value in before.items():
            with contextlib.suppress(Exception):
                setattr(error, name, value)


def secret_values(args: Any, paths: Sequence[Sequence[str | int]] | None) -> list[str]:
    """The secret values a call's arguments hold at `paths`, as text (a `Secret[int]`'s
    number too; each item of a `Secret[list]` or `Secret[dict]`; and as a repr or JSON
    escapes it), longest first (so that a secret inside another is not masked first,
    leaving the rest), to take out of what the call says back (`scrubbed`)."""
    found = [v for p in paths or () for v, ok in [_get(args, list(p))] if ok]
    texts = {v if isinstance(v, str) else str(v) for v in _leaves(found)
             if isinstance(v, str | int | float) and not isinstance(v, bool)}
    # as a repr or JSON shows text with a newline, a quote or a backslash (a PEM key), as
    # bytes show it (their repr), and as a URL carries it (an HTTP client's error)
    texts |= {form for t in texts for form in (
        repr(t)[1:-1], json.dumps(t)[1:-1], repr(t.encode())[2:-1], quote(t),
        quote(t, safe=""), quote_plus(t))}
    return sorted((t for t in texts if t and t != MASK), key=lambda t: (-len(t), t))


_NUMBER_LIKE = re.compile(r"[\d\s.,:/+\-]+")


def _copyable(text: str) -> bool:
    """Whether a secret is one no plain argument may hold: four characters or more, and a
    number-like one eight digits or more (a PIN, a year, a date or an amount is as likely a
    coincidence in another value as a copy; a card or account number is not)."""
    if _NUMBER_LIKE.fullmatch(text):
        return sum(c.isdigit() for c in text) >= 8
    return len(text) >= SHORTEST_IN_TEXT


def copy_secrets(args: Any, paths: Sequence[Sequence[str | int]] | None) -> list[str]:
    """The secrets at `paths` that no other argument of the reply may hold (`holds_secret`),
    as `secret_values` writes them: each secret that is one whole text or number and that
    `_copyable` keeps. The parts of a structured secret (`Secret[dict]`) are not: its region
    or account id would refuse every call that names them, its own call's too (helper-70)."""
    kept: list[str] = []
    for path in paths or ():
        value, found = _get(args, list(path))
        if found and isinstance(value, str | int) and not isinstance(value, bool):
            kept += [str(value)] if _copyable(str(value)) else []
    return secret_values({"secrets": kept}, [["secrets"]])


def holds_secret(args: Any, secrets: Sequence[str], depth: int = 0) -> bool:
    """Whether `args` hold any of `secrets` (`copy_secrets`): in a key or a text value (as
    `scrubbed` finds one: whole, or inside the text), or as a whole number."""
    if depth == 0:
        secrets = [s for s in secrets if len(s) >= SHORTEST_IN_TEXT]
    if not secrets or depth > 32:
        return False
    if isinstance(args, Mapping):
        return any(holds_secret(k, secrets, depth + 1) or holds_secret(v, secrets, depth + 1)
                   for k, v in args.items())
    if isinstance(args, list | tuple):
        return any(holds_secret(v, secrets, depth + 1) for v in args)
    if isinstance(args, int) and not isinstance(args, bool):  # a card number as a number
        return str(args) in secrets
    return isinstance(args, str) and _scrub(args, secrets) is not args


def _leaves(value: Any, depth: int = 0) -> list[Any]:
    if isinstance(value, Mapping) and depth < 32:
        return [leaf for item in value.values() for leaf in _leaves(item, depth + 1)]
    if isinstance(value, list | tuple) and depth < 32:
        return [leaf for item in value for leaf in _leaves(item, depth + 1)]
    return [value]


def scrubbed(value: Any, secrets: Sequence[str], *, numbers: bool = True) -> Any:
    """`value` (text, or lists and mappings of it: content blocks, a suspension's payload, an
    artifact) with each of `secrets` shown as the mask: its keys too (one masked onto a key
    already there is numbered, never dropped), and a number that is one (unless not
    `numbers`). A value with no secret in it is returned as it is (the same object)."""
    if not secrets:
        return value
    if isinstance(value, Mapping):
        items = [(_scrub(k, secrets, numbers), k, scrubbed(v, secrets, numbers=numbers), v)
                 for k, v in value.items()]
        if all(k is old_k and v is old_v for k, old_k, v, old_v in items):
            return value
        out = {key: item for key, old_key, item, _ in items if key is old_key}
        for key, old_key, item, _ in items:
            if key is not old_key:
                out[_unclaimed(key, out)] = item
        return _same_kind(value, out)
    if isinstance(value, list | tuple):
        listed = [scrubbed(v, secrets, numbers=numbers) for v in value]
        if all(a is b for a, b in zip(listed, value, strict=True)):
            return value
        return _same_kind(value, listed)
    return _scrub(value, secrets, numbers)


def _unclaimed(key: Any, taken: Mapping[Any, Any]) -> Any:
    """A masked key where it lands among `taken`: one masked onto a key already there is
    numbered, never dropped."""
    while key in taken:
        key = f"{key} (another)"
    return key


def _same_kind(value: Any, items: Any) -> Any:
    """`items` as the kind of container `value` is, where it can be made again (a named
    tuple, an `OrderedDict`); else as a plain list or dict."""
    if type(value) in (list, dict):
        return items
    try:
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    except Exception:
        return items


SHORTEST_IN_TEXT = 4
"""A secret shorter than this is masked where it is a whole value, never inside longer text
(a PIN of "42" would mask every 42 of a result)."""


def _scrub(value: Any, secrets: Sequence[str], numbers: bool = True) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return MASK if numbers and str(value) in secrets else value
    if isinstance(value, str) and value in secrets:
        return MASK
    if not isinstance(value, str | bytes):  # (bytes: a failed command's output)
        return value
    text = value
    for secret in secrets:
        if len(secret) >= SHORTEST_IN_TEXT:  # (inside longer numbers too: a tool may build
            text = (text.replace(secret, MASK) if isinstance(text, str)  # a phone number
                    else text.replace(secret.encode(), MASK.encode()))   # from a PIN)
    return value if text == value else text


def _masked_raw(raw: Any, secrets: Mapping[str, Sequence[Sequence[str | int]]]) -> Any:
    """A provider's raw tool call (OpenAI's `function.arguments`, a JSON string)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("function"), Mapping):
        return raw
    paths, function = secrets.get(str(raw.get("id"))), raw["function"]
    if not paths:
        return raw
    return {**raw, "function": {**function, "arguments": _masked_json(
        function.get("arguments") or "{}", paths)}}


def _masked_block(block: Any, secrets: Mapping[str, Sequence[Sequence[str | int]]]) -> Any:
    """A content block that carries a call's arguments (Anthropic's `tool_use`, a standard
    `tool_call` block, OpenAI's `function_call`, whose `id` is its own and `call_id` the
    call's, with the arguments as a JSON string)."""
    if not isinstance(block, Mapping):
        return block
    paths = secrets.get(str(block.get("call_id"))) or secrets.get(str(block.get("id")))
    if not paths:
        return block
    return {k: masked(v, paths) if k in ("input", "args") else
            _masked_json(v, paths) if k == "arguments" else v for k, v in block.items()}


def _masked_json(text: Any, paths: Sequence[Sequence[str | int]]) -> Any:
    """Arguments written as a JSON string, masked at `paths` (all of it, if unreadable)."""
    try:
        return json.dumps(masked(json.loads(text), paths))
    except (TypeError, ValueError):
        return json.dumps(MASK)


def _get(value: Any, path: Path) -> tuple[Any, bool]:
    for part in path:
        value, found = _step(value, part)
        if not found:
            return None, False
    return value, True


def _put(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    inner, found = _step(value, head)
    if found:
        value[head] = _put(inner, rest, new)
    return value


@contextlib.contextmanager
def observed(config: RunnableConfig, *, secret: bool) -> Iterator[RunnableConfig]:
    """`config` for a call, without LangChain's callbacks when the call sees a secret (a
    model that may write one, a tool that takes one): a callback gets the call's raw input
    and output, so it carried the secret to `astream_events`, to a LangGraph server's
    `events` stream (any client that may read the thread) and to a tracer (helper-54).
    Tracing is off there too: it would start a trace of its own; and so are the handlers a
    context adds to every call (`collect_runs`, LangChain's configure hooks; helper-55). The
    nodes' own events show the conversation as it is kept, masked."""
    if not secret:
        yield config
        return
    from langchain_core.tracers import context
    from langsmith.run_helpers import tracing_context

    hooks = [context.tracing_v2_callback_var,
             *(hook[0] for hook in getattr(context, "_configure_hooks", ()))]
    tokens = [(var, var.set(None)) for var in hooks]
    try:
        with tracing_context(enabled=False):
            yield {**config, "callbacks": []}  # (None would inherit the node's)
    finally:
        for var, token in reversed(tokens):
            var.reset(token)
