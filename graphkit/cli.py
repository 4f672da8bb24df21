"""The `graphkit` command line.

Errors print one line and exit non-zero; no tracebacks for bad input. Every text that comes
from a model, a tool, a reviewer or a client is printed through `printable`, so escape
sequences, carriage returns and bidi overrides show as escapes instead of acting on the
terminal; `--json` output is ASCII (`json.dumps` escapes everything else).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

from graphkit._text import printable
from graphkit.errors import GraphkitError
from graphkit.types import GenerateResult, PendingApproval

if TYPE_CHECKING:
    from graphkit.inbox import Inbox

__all__ = ["main"]

DEMO_DB = "sqlite:///graphkit-demo.db"
DEMO_REQUEST = "Roll out build 1.4.2 of the payments service to production."
_AUDIT_FIELDS = ("at", "event", "approval_id", "tool_name", "decided_by", "comment", "detail")


def review_card(pending: PendingApproval) -> str:
    """The review card a person sees: tool, arguments, prompt, defaults (if any), the digest
    that `approve --digest` takes; long values wrap inside the box."""
    width = 88  # the digest (71 characters) fits on one line, whole, to copy
    inner = width - 4
    fields = [
        ("tool", pending.tool_name),
        ("prompt", str(pending.metadata.get("prompt") or "")),
        ("args", _json(pending.args)),
        *([("defaults", _json(pending.metadata["defaults"]))]
          if pending.metadata.get("defaults") else []),
        ("agent", " > ".join(pending.agent_path)),
        ("call id", pending.tool_call_id),
        ("id", pending.id),
        ("digest", pending.args_digest),
        ("may", ", ".join(pending.allowed_decisions) if pending.kind == "approval"
         else "resume, decline"),
    ]
    lines = ["+" + "-" * (width - 2) + "+", f"| {'APPROVAL NEEDED':<{inner}} |"]
    for label, text in fields:
        head = f"{label + ':':<10}"
        body = printable(str(text))
        room = inner - len(head)
        chunks = [body[i:i + room] for i in range(0, len(body), room)] or [""]
        for index, chunk in enumerate(chunks):
            lines.append(f"| {(head if index == 0 else ' ' * len(head)) + chunk:<{inner}} |")
    lines.append("+" + "-" * (width - 2) + "+")
    return "\n".join(lines)


def _json(value: Any, indent: int | None = None) -> str:
    """JSON for a terminal: `ensure_ascii` escapes controls, DEL, C1 and bidi characters."""
    return json.dumps(value, indent=indent, ensure_ascii=True)


def _guarded(out: Callable[[str], None]) -> Callable[[str], None]:
    """`out`, escaping whatever a caller forgot to: each printed line goes through
    `printable` (already escaped text passes unchanged)."""

    def write(text: str) -> None:
        out("\n".join(printable(line) for line in text.split("\n")))

    return write


def _ask(prompt: str, read: Callable[[str], str]) -> str:
    try:
        return read(prompt).strip()
    except EOFError:
        return ""


ANSWERS = {"y": "approve", "yes": "approve", "a": "approve", "approve": "approve",
           "e": "edit", "edit": "edit",
           "n": "reject", "no": "reject", "r": "reject", "reject": "reject"}
"""What the demo takes at its prompt; anything else is asked again."""


def _choose(read: Callable[[str], str], out: Callable[[str], None]) -> str:
    """Approve, edit or reject: asked until the answer is one of those (end of input
    rejects: nothing runs that nobody approved)."""
    while True:
        try:
            answer = read("approve? [y]es, [n]o, [e]dit: ").strip().lower()
        except EOFError:
            return "reject"
        if answer in ANSWERS:
            return ANSWERS[answer]
        out(f"please answer y (approve), n (reject) or e (edit), not {printable(answer)!r}")


def run_demo(
    *,
    yes: bool,
    db: str,
    out: Callable[[str], None] = print,
    read: Callable[[str], str] = input,
) -> GenerateResult:
    """The seed's deploy flow: pause for approval, show the card, decide, finish."""
    from graphkit.examples import deploy_agent

    out = _guarded(out)
    agent = deploy_agent(checkpointer=db)
    out(f"user> {DEMO_REQUEST}")
    result = agent.generate(DEMO_REQUEST)
    while result.finish_reason == "suspended":
        out(f"\nrun {printable(result.run_id)} is paused; it is saved in {printable(db)} "
            "and can be decided later.")
        for pending in result.pending_approvals:
            out(review_card(pending))
            choice = "approve" if yes else _choose(read, out)
            args: dict[str, Any] | None = None
            if choice == "edit":
                raw = _ask(f"new arguments as JSON {printable(_json(pending.args))}: ", read)
                try:
                    args = json.loads(raw) if raw else dict(pending.args)
                except json.JSONDecodeError as exc:
                    out(f"not JSON ({printable(str(exc))}); rejecting instead")
                    choice = "reject"
            if choice in ("approve", "edit"):
                result = agent.approve_tool_call_generate(
                    run_id=result.run_id,
                    tool_call_id=pending.tool_call_id,
                    decided_by="demo-operator",
                    comment="edited in the demo" if choice == "edit" else "approved in the demo",
                    args=args if choice == "edit" else None,
                )
                out(f"{'edited' if choice == 'edit' else 'approved'} "
                    f"{printable(pending.tool_call_id)}")
            else:
                result = agent.decline_tool_call_generate(
                    run_id=result.run_id,
                    tool_call_id=pending.tool_call_id,
                    decided_by="demo-operator",
                    comment="rejected in the demo",
                )
                out(f"rejected {printable(pending.tool_call_id)}")
            break  # the result now holds whatever is pending next
    for message in result.messages:
        name = getattr(message, "name", None) or message.type
        if message.type == "tool":
            out(f"  tool {printable(str(name))}> {printable(str(message.content))}")
    out(f"agent> {printable(result.text)}")
    out(f"finish_reason: {result.finish_reason}")
    return result


def _table(rows: list[PendingApproval]) -> str:
    if not rows:
        return "no pending approvals"
    head = ("ID", "KIND", "AGENT", "TOOL", "PROMPT", "ARGS", "CREATED", "RUN")
    body = [
        tuple(
            printable(str(cell))
            for cell in (
                p.id,
                p.kind,
                "/".join(p.agent_path),
                p.tool_name,
                _clip_printable(p.prompt or "", 40),
                _args_preview(p.args, 48),
                p.created_at,
                p.run_id or "",
            )
        )
        for p in rows
    ]
    widths = [max(len(str(r[i])) for r in (head, *body)) for i in range(len(head))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in (head, *body)
    )


def _args_preview(args: dict[str, Any], width: int) -> str:
    """The arguments as `key=value` pairs, whole pairs only, then `…(+N)` for what did not
    fit: a value is never cut in the middle, where it could read as another value."""
    pairs = [printable(f"{k}={json.dumps(v, ensure_ascii=False)}") for k, v in args.items()]
    shown: list[str] = []
    for pair in pairs:
        if len(", ".join([*shown, pair])) > width and shown:
            break
        shown.append(pair if len(pair) <= width else pair[: width - 1] + "…")
    rest = len(pairs) - len(shown)
    return ", ".join(shown) + (f" …(+{rest})" if rest else "")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _clip_printable(text: str, width: int) -> str:
    """`printable(text)` in `width` characters, cut between characters, never inside one's
    escape (a cut escape reads as another character)."""
    whole = printable(text)
    if len(whole) <= width:
        return whole
    shown = ""
    for escaped in map(printable, text):
        if len(shown) + len(escaped) > width - 1:
            break
        shown += escaped
    return shown + "…"


def _url(args: argparse.Namespace) -> str:
    """The storage URL of a verb: `--db`, else `$GRAPHKIT_DB`. A SQLite file must exist: a
    typo must not create an empty database that reports "no pending approvals"."""
    from graphkit._storage import sqlite_file

    url: str | None = args.db or os.environ.get("GRAPHKIT_DB")
    if not url:
        msg = "no storage given: pass --db URL or set GRAPHKIT_DB (e.g. sqlite:///runs.db)"
        raise GraphkitError(msg)
    path = sqlite_file(url)
    if url == "memory" or (url.startswith("sqlite://") and path is None):
        msg = (f"{url!r} is storage in one process's memory, which no other process sees; "
               "pass the database your agents use (e.g. sqlite:///runs.db)")
        raise GraphkitError(msg)
    if path is not None and path.startswith("file:"):  # (SQLite would open another file)
        msg = (f"{url!r} names a SQLite URI; write the database file's path "
               f"(sqlite:///./{path} for a file of that name)")
        raise GraphkitError(msg)
    if path is not None and not os.path.isfile(path):
        msg = (f"no database at {path!r} (from {url!r}); check the path, or run the agent "
               "first: it creates the file")
        raise GraphkitError(msg)
    if path is not None and not _graphkits(path):
        msg = (f"{path!r} holds no graphkit records (from {url!r}); check the path, or run "
               "the agent first: it sets the database up")
        raise GraphkitError(msg)
    return url


def _graphkits(path: str) -> bool:
    """Whether a SQLite file holds graphkit's tables, read without writing a byte (a verb
    pointed at another application's file set graphkit up in it, and reported nothing)."""
    import sqlite3

    # (an absolute path as `file:///...`: `file://x/...` would name a host)
    where = "//" + quote("/" + path.lstrip("/")) if path.startswith("/") else quote(path)
    try:
        with contextlib.closing(sqlite3.connect(f"file:{where}?mode=ro", uri=True)) as db:
            return bool(db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                   "name = 'graphkit_meta'").fetchall())
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):  # another kind of file: no records of graphkit
            return False
        msg = f"cannot read {path!r}: {exc}"
        raise GraphkitError(msg) from exc


def _inbox(args: argparse.Namespace) -> Inbox:
    from graphkit.inbox import Inbox

    url = _url(args)
    agents = [_load_agent(spec, url) for spec in getattr(args, "agents", None) or ()]
    return Inbox(url, agents=agents)


def _json_args(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = f"--args is not valid JSON (or is nested too deeply): {type(exc).__name__}"
        raise GraphkitError(msg) from exc
    if not isinstance(value, dict):
        msg = f"--args must be a JSON object, got {type(value).__name__}"
        raise GraphkitError(msg)
    return value


def _load_agent(spec: str, url: str) -> Any:
    """`module:attr`, an Agent or a callable that takes the storage URL and returns one."""
    from graphkit._storage import masked_url
    from graphkit.agent import Agent

    os.environ.setdefault("GRAPHKIT_DB", url)
    target = _load(spec)
    agent = target if isinstance(target, Agent) else target(url) if callable(target) else None
    if not isinstance(agent, Agent):
        msg = f"--agent {spec!r} is neither an Agent nor a callable returning one"
        raise GraphkitError(msg)
    if agent._storage.url != url:
        shown = masked_url(url)
        msg = (f"--agent {spec!r} keeps its runs in {agent._storage.description}, not in "
               f"{shown!r}; give it checkpointer={shown!r} (or make it read $GRAPHKIT_DB)")
        raise GraphkitError(msg)
    return agent


WORKER_WAIT_MAX = 30.0
"""The longest pause between a starting worker's tries to reach a database server that is away."""


_SERVER_BUSY = ("the database system is", "too many clients", "remaining connection slots")
"""What a server that answered says when it will take connections later (starting up, shutting
down, in recovery; full)."""


def _server_away(exc: BaseException) -> bool:
    """Whether `exc` says a database server cannot be reached now (down, restarting, not up
    yet, full): psycopg's `OperationalError`, anywhere in the chain of causes, unless a server
    answered it with anything else (its "FATAL:" or SQLSTATE): a database or role that does
    not exist, a wrong password, is no wait's to mend (retried for ever, it hid the mistake
    from the worker's supervisor: helper-131)."""
    psycopg = sys.modules.get("psycopg")
    away = False
    seen: BaseException | None = exc
    while psycopg is not None and seen is not None:
        if isinstance(seen, psycopg.Error):
            state, text = getattr(seen, "sqlstate", None), str(seen)
            answered = (state is not None and not state.startswith(("57P", "53"))) or (
                "FATAL:" in text and not any(word in text for word in _SERVER_BUSY))
            if answered:
                return False
            away = away or isinstance(seen, psycopg.OperationalError)
        seen = seen.__cause__ or seen.__context__
    return away


def _agent_once_reachable(spec: str, url: str, out: Callable[[str], None]) -> Any:
    """The worker's agent, its storage open: a PostgreSQL server away as the worker starts is
    waited for (each try said), never given up on: a worker started while its database
    restarted (a deploy of both) exited, and nobody resumed anything (helper-130)."""
    from graphkit._storage import shown_url

    pause = 1.0
    while True:
        try:
            return _load_agent(spec, url)
        except Exception as exc:
            if not _server_away(exc):
                raise
            out(printable(f"worker: {shown_url(url)} cannot be reached ({type(exc).__name__}: "
                          f"{exc}); trying again in {pause:g} s"))
            sys.stdout.flush()
            time.sleep(pause)
            pause = min(pause * 2, WORKER_WAIT_MAX)


def _work(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    from graphkit._storage import shown_url
    from graphkit._worker import Worker

    url = _url(args)
    worker = Worker(_agent_once_reachable(args.agent, url, out), concurrency=args.concurrency)
    out(printable(f"worker: resuming ready runs of {worker.agent.name!r} from {shown_url(url)}"
                  f" with {args.concurrency} thread(s); Ctrl-C stops"))
    sys.stdout.flush()  # a supervisor's log (a pipe: buffered) shows it now, not at exit
    if threading.current_thread() is threading.main_thread():
        # one door for both: a Ctrl-C then a SIGTERM is two stops (helper-89)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: worker.stop_from_signal())
    try:
        worker.run()
    except KeyboardInterrupt:
        worker.stop()
    out(f"worker: stopped after resuming {worker.resumed} run(s)")
    if worker.left_runs and threading.current_thread() is threading.main_thread():
        # "at once": the runs left may have tools running in LangGraph's pool threads, which
        # an interpreter's exit waits for (a worker with two calls running hung after a
        # second SIGTERM: helper-89); they are left as a killed worker leaves them
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _resume(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    """Continue a run whose calls are decided, here, and print how it ended."""
    url = _url(args)
    result: GenerateResult = _load_agent(args.agent, url).resume(run_id=args.run_id)
    for message in result.messages:
        if message.type == "tool":
            name = getattr(message, "name", None) or "tool"
            out(f"  tool {printable(str(name))}> {printable(str(message.content))}")
    if result.text:
        out(f"agent> {printable(result.text)}")
    out(f"finish_reason: {result.finish_reason}")
    for pending in result.pending_approvals:
        out(printable(f"waiting: {pending.id} ({pending.tool_name}), decide it with "
                      f"`graphkit approve {pending.id} --by NAME`"))
    return 0


def _serve(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    try:
        import uvicorn

        from graphkit.web import create_app
    except ImportError as exc:
        msg = f"graphkit serve needs the web extra: pip install 'graphkit-hitl[web]' ({exc})"
        raise GraphkitError(msg) from exc
    from graphkit._storage import shown_url

    url = _url(args)
    authenticate = _load(args.auth) if args.auth else None
    agents = [_load_agent(spec, url) for spec in args.agent or ()]
    app = create_app(url, authenticate=authenticate, agents=agents)
    out(printable(f"graphkit inbox on http://{args.host}:{args.port}/ for "
                  f"{shown_url(url)}; Ctrl-C stops"))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _load(spec: str) -> Any:
    """The object `module:attr` names."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        msg = f"expected module:attr, got {spec!r}"
        raise GraphkitError(msg)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as uvicorn's loader: modules of the working directory
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        msg = f"cannot load {spec!r}: {exc}"
        raise GraphkitError(msg) from exc


def _operate(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    inbox = _inbox(args)
    if args.command == "inbox":
        rows = inbox.pending(agent=args.agent, tool_name=args.tool, limit=args.limit)
        out(_json([r.to_dict() for r in rows], indent=2) if args.json else _table(rows))
    elif args.command == "show":
        pending = inbox.get(args.id)
        out(_json(pending.to_dict(), indent=2) if args.json else review_card(pending))
    elif args.command == "approve":
        decided = inbox.approve(
            args.id,
            decided_by=args.by,
            comment=args.comment,
            args=_json_args(args.args),
            args_digest=args.digest,
        )
        out(f"{'edited' if args.args is not None else 'approved'} {_ids(decided)}")
        out(printable(_next(inbox, decided)))
    elif args.command in ("decline", "reject"):
        decided = inbox.decline(args.id, decided_by=args.by, comment=args.comment)
        out(f"rejected {_ids(decided)}")  # the decision word, as the audit and API say
        out(printable(_next(inbox, decided)))
    elif args.command == "respond":
        decided = inbox.respond(args.id, decided_by=args.by, message=args.message)
        out(f"responded to {_ids(decided)}")
        out(printable(_next(inbox, decided)))
    elif args.command == "expire":
        expired = inbox.expire()
        out(
            _json([e.to_dict() for e in expired], indent=2)
            if args.json
            else f"expired {len(expired)} approval(s)"
        )
    elif args.command == "audit":
        entries = inbox.audit(thread_id=args.thread, id=args.id)
        if args.json:
            out(_json(entries, indent=2))
        elif not entries:
            out("no audit entries")
        for e in [] if args.json else entries:
            at, event, approval, tool, by, comment, detail = (
                printable(str(e.get(k) or "")) for k in _AUDIT_FIELDS
            )
            out(f"{at}  {event:<13} {approval or '-':<28} {tool:<16} by={by or '-'} {comment} "
                f"{detail}".rstrip())
    elif args.command == "grants":
        grants = inbox.grants(thread_id=args.thread)
        if args.json:
            out(_json(grants, indent=2))
        for g in [] if args.json else grants:
            state = g["state"]
            out(printable(f"{g['id']}  {state:<8} {'/'.join(g['agent_path'])}:{g['tool_name']} "
                          f"thread={g['thread_id']} grantor={g['grantor'] or '-'}"))
        if not grants and not args.json:
            out("no grants")
    elif args.command == "revoke":
        revoked = inbox.revoke(args.id, decided_by=args.by)
        out(printable(f"revoked {revoked['id']} ({revoked['tool_name']}); later calls ask again"))
    return 0


def _ids(decided: PendingApproval) -> str:
    return printable(f"{decided.id} ({decided.tool_name})")


def _next(inbox: Inbox, decided: PendingApproval) -> str:
    """What happens to the run after this decision, and what to do about it."""
    left = [p for p in inbox.pending() if p.thread_id == decided.thread_id
            and p.run_id == decided.run_id and p.status == "pending"]
    if left:
        return (f"the run waits for {len(left)} more decision(s): "
                + ", ".join(p.id for p in left))
    if decided.run_id is None:  # a run the LangGraph server started
        return ("nothing is left to decide; the LangGraph server continues the thread "
                f"{decided.thread_id} when a client resumes it (command={{'resume': {{}}}}), "
                "or at once when decided in the inbox mounted in the server")
    agent = decided.agent_path[0] if decided.agent_path else "?"
    return (f"nothing is left to decide: a `graphkit worker` for agent {agent!r} on this "
            f"database continues run {decided.run_id} if one runs; else continue it with "
            f"`graphkit resume {decided.run_id} --agent module:attr`")


def _agent_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--agent", action="append", dest="agents", metavar="MODULE:ATTR",
                     help="an Agent (or a factory taking the storage URL) whose tools and "
                          "approvers policy judge the decision here; required to decide for "
                          "an agent that has a policy")


class _Parser(argparse.ArgumentParser):
    """argparse, its usage errors in one line as every other mistake (`--help` shows the
    usage), with the operator's own arguments escaped."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {printable(message)} (see {self.prog} --help)\n")


def _name(text: str) -> str:
    """`--by`: a blank name (as `named` reads one) would record a decision by nobody."""
    from graphkit._review import named

    if named(text) is None:
        raise argparse.ArgumentTypeError("--by needs a name: who decides is audited")
    return text


def _positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return number


def _fail(text: str) -> None:
    print(f"graphkit: error: {printable(text)}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="graphkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the offline deploy-approval demo on SQLite")
    demo.add_argument("--yes", action="store_true", help="approve without asking")
    demo.add_argument("--db", default=DEMO_DB, help=f"storage URL (default {DEMO_DB})")

    def verb(name: str, text: str, *, listing: bool = False,
             aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=text, aliases=list(aliases))
        cmd.add_argument("--db", help="storage URL (default: $GRAPHKIT_DB)")
        if listing:
            cmd.add_argument("--json", action="store_true", help="machine-readable output")
        return cmd

    inbox = verb("inbox", "list pending approvals and suspensions", listing=True)
    inbox.add_argument("--agent")
    inbox.add_argument("--tool")
    inbox.add_argument("--limit", type=_positive, help="show at most N (the oldest first)")
    show = verb("show", "show one approval as a review card", listing=True)
    show.add_argument("id")
    for name, text in (("approve", "approve a pending call"), ("decline", "decline it")):
        cmd = verb(name, text, aliases=["reject"] if name == "decline" else [])  # LangChain's
        cmd.add_argument("id")
        cmd.add_argument("--by", required=True, type=_name,
                         help="who decides (recorded in the audit log)")
        cmd.add_argument("--comment")
        _agent_option(cmd)
        if name == "approve":
            cmd.add_argument("--args", help="edited arguments as a JSON object")
            cmd.add_argument("--digest", help="the args_digest you reviewed")
    respond = verb("respond", "answer a pending call instead of running it (tools that allow "
                   "'respond')")
    respond.add_argument("id")
    respond.add_argument("--by", required=True, type=_name,
                         help="who decides (recorded in the audit log)")
    _agent_option(respond)
    respond.add_argument("--message", required=True, help="what the model reads as the result")
    audit = verb("audit", "show the audit log", listing=True)
    audit.add_argument("--thread")
    audit.add_argument("--id")
    verb("expire", "decline approvals past their approval_ttl", listing=True)
    grants = verb("grants", "list remembered grants (remember='thread')", listing=True)
    grants.add_argument("--thread")
    serve = verb("serve", "the reviewers' web inbox")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--auth", help="module:attr of an authenticator: a token->identity "
                       "mapping or a callable(request) -> identity (default: $GRAPHKIT_TOKENS)")
    serve.add_argument("--agent", action="append", help="module:attr of an Agent whose runs "
                       "these are (repeatable): cards show their conversation, and edits are "
                       "checked by the tools' own models")
    work = verb("worker", "resume runs whose calls were decided elsewhere, until Ctrl-C")
    work.add_argument("--agent", required=True, help="module:attr of the Agent (or a factory "
                      "taking the storage URL)")
    work.add_argument("--concurrency", type=int, default=1, help="runs resumed at once")
    resume = verb("resume", "continue a run whose calls are decided, and print its outcome")
    resume.add_argument("run_id")
    resume.add_argument("--agent", required=True, help="module:attr of the Agent (or a factory "
                        "taking the storage URL), loaded from the working directory too")
    revoke = verb("revoke", "revoke a grant: later calls of its tool ask again")
    revoke.add_argument("id")
    revoke.add_argument("--by", required=True, type=_name,
                        help="who revokes (recorded in the audit log)")
    _agent_option(revoke)
    return parser


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    """Run the CLI; returns the exit code (argparse's usage errors exit with 2)."""
    args = _parser().parse_args(argv)
    out = _guarded(out)
    try:
        if args.command == "demo":
            run_demo(yes=args.yes, db=args.db, out=out)
            return 0
        if args.command == "worker":
            return _work(args, out)
        if args.command == "serve":
            return _serve(args, out)
        if args.command == "resume":
            return _resume(args, out)
        return _operate(args, out)
    except GraphkitError as exc:
        _fail(str(exc))
        return 1
    except KeyboardInterrupt:
        print("graphkit: interrupted; a paused run stays in storage", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, no traceback: the CLI's contract
        _fail(f"{type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
