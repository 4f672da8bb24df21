"""The operator CLI: inbox, show, approve, decline, audit, expire; one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from graphkit import Inbox
from graphkit.cli import main
from tests.helpers import agent_with, call, turn
from tests.test_storage import ROOT

PAY = {"amount": 40, "payee": {"name": "ACME"}}


def cli(*argv: str) -> tuple[int, str]:
    lines: list[str] = []
    code = main(list(argv), out=lines.append)
    return code, "\n".join(lines)


def test_operator_flow_pause_decide_from_cli_resume_elsewhere(sqlite_url: str) -> None:
    script = [turn(call("pay", PAY, "c1"), call("pay", {**PAY, "amount": 5}, "c2")), "done"]
    agent, ledger = agent_with(script, checkpointer=sqlite_url, name="billing")
    result = agent.generate("pay")

    code, table = cli("inbox", "--db", sqlite_url)
    assert code == 0 and "billing" in table and "pay" in table and result.run_id in table
    code, listing = cli("inbox", "--db", sqlite_url, "--json")
    rows = json.loads(listing)
    assert [r["tool_call_id"] for r in rows] == ["c1", "c2"]  # in the order the model asked
    first = next(r for r in rows if r["tool_call_id"] == "c1")
    second = next(r for r in rows if r["tool_call_id"] == "c2")

    code, card = cli("show", first["id"], "--db", sqlite_url)
    assert code == 0 and "Pay 40 to ACME?" in card and '"channel": "finance"' in card

    code, said = cli("approve", first["id"], "--db", sqlite_url, "--by", "alice",
                     "--comment", "ok", "--args", json.dumps({**PAY, "amount": 39}))
    assert code == 0 and said.startswith("edited ")
    assert "the run waits for 1 more decision(s)" in said
    code, said = cli("decline", second["id"], "--db", sqlite_url, "--by", "alice")
    assert code == 0 and said.startswith("rejected ")  # the decision word, as the audit says
    assert "nothing is left to decide" in said
    assert f"graphkit resume {result.run_id} --agent module:attr" in said
    assert ledger.ran == []

    final = agent_with(script, checkpointer=sqlite_url, ledger=ledger, name="billing")[0].resume(
        run_id=result.run_id)
    assert final.text == "done" and ledger.ran == [("pay", {**PAY, "amount": 39})]

    code, log = cli("audit", "--db", sqlite_url, "--json")
    events = [e["event"] for e in json.loads(log)]
    assert "edited" in events and "rejected" in events
    code, text = cli("audit", "--db", sqlite_url, "--id", first["id"])
    assert code == 0 and "edited" in text and "alice" in text
    code, text = cli("expire", "--db", sqlite_url)
    assert code == 0 and "expired 0" in text


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["approve", "apr_nope", "--by", "x"], "no approval with id 'apr_nope'"),
        (["show", "apr_nope"], "no approval with id"),
        (["approve", "apr_nope", "--by", "x", "--args", "{not json"], "not valid JSON"),
        (["approve", "apr_nope", "--by", "x", "--args", "[1]"], "must be a JSON object"),
    ],
)
def test_cli_errors_are_one_line(sqlite_url: str, argv: list[str], fragment: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit import Inbox

    Inbox(sqlite_url)  # the database exists
    code, _ = cli(*argv, "--db", sqlite_url)
    err = capsys.readouterr().err
    assert code == 1 and fragment in err and len(err.strip().splitlines()) == 1


def test_cli_needs_storage_and_reads_graphkit_db(sqlite_url: str,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GRAPHKIT_DB", raising=False)
    assert cli("inbox")[0] == 1
    assert "GRAPHKIT_DB" in capsys.readouterr().err
    monkeypatch.setenv("GRAPHKIT_DB", sqlite_url)
    from graphkit import Inbox

    Inbox(sqlite_url)  # the database exists (an agent or the inbox made it)
    assert cli("inbox") == (0, "no pending approvals")


def test_console_script_in_a_subprocess(sqlite_url: str) -> None:
    agent, _ = agent_with([turn(call("pay", PAY, "c1")), "ok"], checkpointer=sqlite_url)
    agent.generate("pay")
    env = {**os.environ, "GRAPHKIT_DB": sqlite_url}
    done = subprocess.run([sys.executable, "-m", "graphkit.cli", "inbox", "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["tool_name"] == "pay"
    bad = subprocess.run([sys.executable, "-m", "graphkit.cli", "decline", "nope", "--by", "x"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                         check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr


def test_a_database_that_cannot_be_reached_is_one_line_at_once() -> None:
    """A PostgreSQL URL nobody answers: psycopg's own error, said in one line. Before, the
    connection pool retried for 30 s, logging every failure (23 lines), and then said only
    that it timed out (helper-49)."""
    done = subprocess.run([sys.executable, "-m", "graphkit.cli", "inbox", "--db",
                           "postgresql://nobody@127.0.0.1:1/nodb"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "Connection refused" in line and "PoolTimeout" not in line


@pytest.mark.parametrize("url", ["postgresql://alice:S3cr3tPW@[::1/db",
                                 "postgresql://alice:S3cr3t%ZZPW@127.0.0.1:1/db",
                                 "postgresql://alice:p@S3cr3tPW@127.0.0.1:1/db",
                                 "postgresql://alice@127.0.0.1:1/db?password=S3cr3t%ZZ"])
def test_a_database_url_libpq_cannot_read_is_never_repeated_with_its_password(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """libpq quotes a URL it cannot parse in its error, password and all (or the part of it
    after a raw "@", as a host); the error graphkit raises shows the mask in its place, and
    keeps no context that shows it (helper-51, helper-52)."""
    assert cli("inbox", "--db", url)[0] == 1
    err = capsys.readouterr().err
    assert "S3cr3t" not in err and "**********" in err and len(err.strip().splitlines()) == 1


def test_every_message_that_names_a_database_shows_its_password_masked(
        postgres_url: str, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """One way to say a storage URL (`shown_url`, `masked_url`) in every error and banner:
    an agent kept elsewhere echoed `--db` whole, and a `password=` parameter showed in the
    storage's description, so in "no approval", "snapshot not found" and the worker's and
    inbox server's banners (helper-53)."""
    secret_url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}password=S3cr3tPW"
    (tmp_path / "elsewhere.py").write_text(
        "from tests.helpers import agent_with\n"
        f"agent, _ = agent_with(['hi'], checkpointer={sqlite_url!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    said = []
    for argv in (["show", "apr_nope"], ["revoke", "grt_nope", "--by", "a"],
                 ["worker", "--agent", "elsewhere:agent"],
                 ["approve", "apr_x", "--by", "a", "--agent", "elsewhere:agent"]):
        code, out = cli(*argv, "--db", secret_url)
        said.append(out + capsys.readouterr().err)
        assert code == 1, said[-1]
    assert all("S3cr3tPW" not in text and "**********" in text for text in said), said
    assert "in postgresql " in said[0] and "not in 'postgresql://" in said[2]
    from graphkit._storage import shown_url
    assert shown_url("postgresql://u:S3cr3tPW@db:5432/x?password=S3cr3tPW") == (
        "db:5432/x?password=**********")


@pytest.mark.parametrize("verb", [["inbox"], ["show", "apr_x"], ["approve", "apr_x", "--by", "a"],
                                  ["audit"], ["grants"], ["expire"],
                                  ["resume", "run_x", "--agent", "m:a"],
                                  ["worker", "--agent", "m:a"]])
def test_a_sqlite_url_naming_no_file_is_an_error_and_creates_nothing(
        tmp_path: Path, verb: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "typo.db"
    code, out = cli(*verb, "--db", f"sqlite:///{typo}")
    err = capsys.readouterr().err
    assert code == 1 and "no database at" in err and not out
    assert not typo.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("verb", [["inbox"], ["show", "apr_x"], ["approve", "apr_x", "--by", "a"],
                                  ["audit"], ["grants"], ["expire"]])
@pytest.mark.parametrize("kind", ["another app's", "empty", "memory", "in-memory sqlite",
                                  "a URI"])
def test_a_database_graphkit_never_set_up_is_an_error_and_is_left_as_it_was(
        tmp_path: Path, verb: list[str], kind: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A verb pointed at another application's SQLite file (or an empty one) set graphkit's
    tables up in it, switched it to WAL, and said "no pending approvals"; in-memory storage
    always said so, as no other process's memory is seen (helper-66)."""
    import sqlite3

    path = tmp_path / "app.db"
    if kind == "another app's":
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE users (id INTEGER)")
    elif kind == "empty":
        path.write_bytes(b"")
    before = path.read_bytes() if path.exists() else None
    url = {"memory": "memory", "in-memory sqlite": "sqlite:///:memory:",
           # (a file named `file:app.db` checked, and `app.db` opened: helper-68)
           "a URI": "sqlite:///file:app.db"}.get(kind, f"sqlite:///{path}")
    monkeypatch.chdir(tmp_path)
    code, out = cli(*verb, "--db", url)
    err = capsys.readouterr().err
    assert code == 1 and not out and err.count("\n") == 1, err
    assert ("no graphkit records" if before is not None else "one process's memory"
            if kind != "a URI" else "names a SQLite URI") in err
    assert (path.read_bytes() if path.exists() else None) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == (["app.db"] if before is not None
                                                          else [])


@pytest.mark.parametrize("spelling", ["sqlite:///{abs}", "sqlite:////{abs}", "sqlite:///{rel}"])
def test_a_graphkit_database_is_read_however_its_path_is_spelled(
        tmp_path: Path, spelling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path written with a second leading slash was read as `file://tmp/...`, a URI with a
    host, and a real graphkit database was said to hold no records (helper-67)."""
    db = tmp_path / "odd dir #1" / "runs.db"
    agent, _ = agent_with([turn(call("pay", PAY, "c1")), "done"],
                          checkpointer=f"sqlite:///{db}")
    agent.generate("pay")
    monkeypatch.chdir(tmp_path)
    url = spelling.format(abs=db, rel=db.relative_to(tmp_path))
    code, table = cli("inbox", "--db", url)
    assert code == 0 and "pay" in table


def test_an_audit_with_no_entry_says_so(sqlite_url: str) -> None:
    """It printed nothing at all, as `grants` says "no grants" (helper-66)."""
    agent, _ = agent_with([turn(call("pay", PAY, "c1")), "done"], checkpointer=sqlite_url)
    agent.generate("pay")
    assert cli("audit", "--db", sqlite_url, "--thread", "no-such-thread") == (
        0, "no audit entries")
    assert cli("audit", "--db", sqlite_url, "--thread", "no-such-thread", "--json") == (0, "[]")


@pytest.mark.parametrize("argv", [["approve", "apr_x", "--by", ""],
                                  ["decline", "apr_x", "--by", "   "],
                                  ["respond", "apr_x", "--by", "", "--message", "m"],
                                  ["revoke", "grt_x", "--by", " "],
                                  ["inbox", "--limit", "-1"], ["inbox", "--limit", "0"]])
def test_a_blank_name_or_a_limit_below_one_is_a_usage_error(
        sqlite_url: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--by ""` recorded an approval by nobody; `--limit -1` hid the newest approval and
    `--limit 0` said no approval was pending (helper-66)."""
    agent, _ = agent_with([turn(call("pay", PAY, "c1")), "done"], checkpointer=sqlite_url)
    agent.generate("pay")
    with pytest.raises(SystemExit) as exited:
        cli(*argv, "--db", sqlite_url)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert [p.status for p in Inbox(sqlite_url).pending()] == ["pending"]
    assert [e["event"] for e in Inbox(sqlite_url).audit()] == ["requested"]


def test_resume_continues_a_decided_run_from_an_agent_in_the_working_directory(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`graphkit resume RUN --agent module:attr`, the module in the working directory (as
    uvicorn-style loaders find it), in a subprocess as a user runs it."""
    (tmp_path / "ops_agent.py").write_text(
        "import os\n"
        "from tests.helpers import agent_with, call, turn\n"
        f"PAY = {PAY!r}\n"
        "agent, ledger = agent_with([turn(call('pay', PAY, 'c1')), 'all paid'],\n"
        "                           checkpointer=os.environ['GRAPHKIT_DB'], name='billing')\n")
    monkeypatch.setenv("GRAPHKIT_DB", sqlite_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    import ops_agent  # type: ignore[import-not-found]

    first = ops_agent.agent.generate("pay")
    code, said = cli("approve", first.pending_approvals[0].id, "--db", sqlite_url, "--by", "al")
    assert code == 0 and f"graphkit resume {first.run_id}" in said
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "graphkit.cli", "resume", first.run_id,
                           "--agent", "ops_agent:agent", "--db", sqlite_url], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "tool pay> paid 40 to ACME" in done.stdout and "agent> all paid" in done.stdout
    assert "finish_reason: stop" in done.stdout


def test_an_edit_the_cli_records_is_the_edit_that_runs(sqlite_url: str,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """`approve --args '{"amount": 1150}'` for a float field: the CLI (which cannot load the
    tool) reads it as the tool's model does, so "approved" means it runs; an edit of a tool
    that validates in code of its own is refused at once instead of withdrawn later."""
    from pydantic import BaseModel, field_validator

    from graphkit import Agent, create_tool
    from graphkit.testing import ScriptedChatModel

    paid: list[Any] = []

    @create_tool(needs_approval=True)
    def pay(amount: float, to: str) -> str:
        """Pay."""
        paid.append(amount)
        return f"paid {amount}"

    class Account(BaseModel):
        amount: int

        @field_validator("amount")
        @classmethod
        def whole_dollars(cls, v: int) -> int:
            return round(v, -2) if v > 1000 else v  # the model's rule: idempotent, but code

    @create_tool(needs_approval=True, args_schema=Account)
    def charge(amount: int) -> str:
        """Charge."""
        paid.append(("charge", amount))
        return "charged"

    script = [turn(call("pay", {"amount": 1000.5, "to": "acme"}, "p1"),
                   call("charge", {"amount": 5}, "c1")), "done"]
    agent = Agent(name="billing", tools=[pay, charge], checkpointer=sqlite_url,
                  model=ScriptedChatModel(script))
    first = agent.generate("pay")
    ids = {p.tool_name: p.id for p in first.pending_approvals}
    code, said = cli("approve", ids["pay"], "--db", sqlite_url, "--by", "cfo", "--args",
                     json.dumps({"amount": 1150, "to": "acme"}))
    assert code == 0 and said.startswith("edited")
    code, _ = cli("approve", ids["charge"], "--db", sqlite_url, "--by", "cfo", "--args",
                  json.dumps({"amount": 7}))
    err = capsys.readouterr().err
    assert code == 1 and "checks its arguments with code of its own" in err
    assert cli("decline", ids["charge"], "--db", sqlite_url, "--by", "cfo")[0] == 0
    done = agent.resume(run_id=first.run_id)
    assert done.text == "done" and paid == [1150.0]
    events = [e["event"] for e in agent._storage.ledger.read_audit(thread_id=first.thread_id)]
    assert "edited" in events and "refused" in events
    assert not any("withdrawn" in str(e.get("detail")) for e in
                   agent._storage.ledger.read_audit(thread_id=first.thread_id))


def test_cli_views_show_the_prompt_whole_values_the_digest_and_approval_ids(
        sqlite_url: str) -> None:
    long_payee = {"name": "ACME " + "x" * 200}
    agent, _ = agent_with([turn(call("pay", {"amount": 40, "payee": long_payee}, "c1")),
                           "done"], checkpointer=sqlite_url, name="billing")
    first = agent.generate("pay")
    (pending,) = first.pending_approvals
    code, table = cli("inbox", "--db", sqlite_url)
    head, row = table.split("\n")
    assert "PROMPT" in head and "Pay 40 to ACME" in row
    assert "amount=40" in row and "…(+1)" in row  # the long payee is left out whole
    code, card = cli("show", pending.id, "--db", sqlite_url)
    lines = card.split("\n")
    assert all(len(line) == len(lines[0]) for line in lines)  # long values wrap in the box
    assert f"| digest:   {pending.args_digest}" in card and "null" not in card
    assert "x" * 40 in card
    code, said = cli("reject", pending.id, "--db", sqlite_url, "--by", "ops")  # an alias
    assert code == 0 and said.startswith("rejected ")
    code, log = cli("audit", "--db", sqlite_url)
    assert pending.id in log and "rejected" in log
