"""The CLI never prints a control or format character it was handed by a model, a tool, a
reviewer or a client: escape sequences, carriage returns and bidi overrides show as escapes.
Nor do the pages (the web inbox's, a notebook's cards), which keep line breaks only."""

from __future__ import annotations

import json
import unicodedata

import pytest
from langchain_core.messages import AIMessage

from graphkit import Agent, Inbox, create_tool
from graphkit._text import printable
from graphkit.cli import main, run_demo
from graphkit.testing import ScriptedChatModel

EVIL = "\x1b[2J\x1b]0;pwned\x07\r\u202e\x9b\x7f\u2066\u2028\u200b\n| approved: yes |"
SHOWN = r"\x1b[2J\x1b]0;pwned\x07\r\u202e\x9b\x7f\u2066\u2028\u200b\n| approved: yes |"
"""How `printable` shows EVIL."""


def raw_controls(text: str) -> list[str]:
    """Control, format, surrogate, unassigned and line-separator characters, except newlines."""
    return [
        ch for ch in text
        if ch != "\n" and (unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in
                           ("Zl", "Zp"))
    ]


def cli(*argv: str) -> tuple[int, str]:
    lines: list[str] = []
    code = main(list(argv), out=lines.append)
    return code, "\n".join(lines)


def evil_agent(url: str, name: str = "billing") -> Agent:
    """An agent whose tool, model, prompt and defaults all carry EVIL."""

    def pay(amount: int, note: str) -> str:
        """Send a payment."""
        return f"paid {amount} for {note}"

    tool = create_tool(pay, name="pay" + EVIL, needs_approval=True,
                       approval_prompt="Pay {{amount}} for {{note}}?",
                       approval_defaults={"channel": EVIL})
    model = ScriptedChatModel([
        AIMessage("", tool_calls=[{"name": "pay" + EVIL, "args": {"amount": 1, "note": EVIL},
                                   "id": "c1" + EVIL}]),
        "done " + EVIL,
    ])
    return Agent(model=model, tools=[tool], name=name, checkpointer=url)  # names are checked


@pytest.fixture
def paused(sqlite_url: str) -> str:
    """The id of a pending approval whose every field holds EVIL."""
    result = evil_agent(sqlite_url).generate("pay" + EVIL)
    assert result.finish_reason == "suspended"
    return result.pending_approvals[0].id


def test_printable() -> None:
    assert printable(EVIL) == SHOWN
    assert printable("plain ASCII, é, 日本語, \U0001f600, a\u00a0b, \\x1b") == (
        "plain ASCII, é, 日本語, \U0001f600, a\u00a0b, \\x1b")
    assert printable("\x00\t\x85\ufeff\U000e0001\ud800\U0010ffff") == (
        r"\x00\t\x85\ufeff\U000e0001\ud800\U0010ffff")
    assert printable(SHOWN) == SHOWN  # escaping twice changes nothing
    for code in [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066,
                                                                                   0x206A)]:
        assert not raw_controls(printable(chr(code)))


def test_review_card_shows_every_field_escaped(sqlite_url: str, paused: str) -> None:
    code, card = cli("show", paused, "--db", sqlite_url)
    assert code == 0
    assert not raw_controls(card)
    lines = card.split("\n")
    # no injected lines: every line is the box's, however long values wrap inside it
    assert all(line[0] in "+|" and line[-1] in "+|" and len(line) == len(lines[0])
               for line in lines)
    field = {line[2:12].strip(): line for line in lines[2:-1] if line[2:12].strip()}
    tool, args, prompt, defaults, agent, call_id = (
        field[k] for k in ("tool:", "args:", "prompt:", "defaults:", "agent:", "call id:"))
    assert field["digest:"].startswith("| digest:   sha256:")
    assert tool.startswith(f"| tool:     pay{SHOWN}"[:60])
    assert args.startswith(r'| args:     {"amount": 1, "note": "\u001b[2J')
    assert prompt.startswith(f"| prompt:   Pay 1 for {SHOWN}?"[:60])
    assert defaults.startswith(r'| defaults: {"channel": "\u001b[2J')
    assert agent.startswith("| agent:    billing ")  # agent names are checked on creation
    assert call_id.startswith(f"| call id:  c1{SHOWN}"[:60])


@pytest.mark.parametrize("text", ["a" * 36 + "\u202e tail", "a" * 38 + "\x1b[2J",
                                  "\u202e" * 20])
def test_a_cut_prompt_never_ends_inside_an_escape(text: str) -> None:
    """The inbox's PROMPT column was cut after escaping, inside an escape, which then read
    as another character (helper-66). It is cut between characters, each shown whole."""
    from graphkit._text import printable
    from graphkit.cli import _clip_printable

    shown = _clip_printable(text, 40)
    assert len(shown) <= 40 and shown.endswith("…")
    assert printable(text).startswith(shown[:-1])
    cut = len(shown) - 1  # the escapes of whole characters, nothing of the next one's
    assert any(len(printable(text[:n])) == cut for n in range(len(text) + 1))


def test_inbox_table_escapes_and_keeps_one_line_per_approval(sqlite_url: str,
                                                             paused: str) -> None:
    code, table = cli("inbox", "--db", sqlite_url)
    assert code == 0 and not raw_controls(table)
    head, row = table.split("\n")
    assert head.startswith("ID")
    assert paused in row and "billing" in row and f"pay{SHOWN}" in row
    assert r"\x1b" in row and "amount=1" in row  # escaped, whole key=value pairs only


def test_json_output_is_ascii_and_round_trips(sqlite_url: str, paused: str) -> None:
    for argv in (["inbox", "--json"], ["show", paused, "--json"], ["audit", "--json"]):
        code, text = cli(*argv, "--db", sqlite_url)
        assert code == 0 and text.isascii() and not raw_controls(text)
    rows = json.loads(cli("inbox", "--json", "--db", sqlite_url)[1])
    assert rows[0]["tool_name"] == "pay" + EVIL and rows[0]["args"]["note"] == EVIL


def test_decisions_and_audit_lines_escape_reviewer_text(sqlite_url: str, paused: str) -> None:
    code, said = cli("approve", paused, "--db", sqlite_url, "--by", "alice" + EVIL,
                     "--comment", "fine" + EVIL)
    # two lines, the decision and what happens next: no newline of the tool's name got through
    assert code == 0 and not raw_controls(said) and len(said.split("\n")) == 2
    decided, then = said.split("\n")
    assert decided == f"approved {paused} (pay{SHOWN})"
    assert then.startswith("nothing is left to decide")
    assert Inbox(sqlite_url).get(paused).comment == "fine" + EVIL  # stored as sent

    code, log = cli("audit", "--db", sqlite_url, "--id", paused)
    assert code == 0 and not raw_controls(log)
    approved = [line for line in log.split("\n") if " approved " in line]
    assert len(approved) == 1
    assert f"by=alice{SHOWN} fine{SHOWN}" in approved[0]


def test_decline_output_is_escaped(sqlite_url: str, paused: str) -> None:
    code, said = cli("decline", paused, "--db", sqlite_url, "--by", "bob" + EVIL)
    assert code == 0 and not raw_controls(said) and f"(pay{SHOWN})" in said


def test_error_lines_are_escaped_and_stay_one_line(sqlite_url: str, paused: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("approve", paused, "--db", sqlite_url, "--by", "alice" + EVIL,
               "--comment", "fine" + EVIL)[0] == 0
    # the refusal quotes the tool name, the decider and their comment as stored
    code, _ = cli("decline", paused, "--db", sqlite_url, "--by", "mallory")
    err = capsys.readouterr().err
    assert code == 1 and not raw_controls(err)
    assert err.startswith("graphkit: error: ") and len(err.strip().split("\n")) == 1
    assert f"(pay{SHOWN}) was already approved by alice{SHOWN} (fine{SHOWN})" in err

    # ... and so does the audit entry of the refused attempt
    code, log = cli("audit", "--db", sqlite_url, "--id", paused)
    refused = [line for line in log.split("\n") if " refused " in line]
    assert code == 0 and len(refused) == 1 and not raw_controls(log)
    assert "by=mallory  ApprovalAlreadyResolvedError: " in refused[0]
    assert f"(pay{SHOWN}) was already approved by alice{SHOWN}" in refused[0]

    code, _ = cli("show", "apr_" + EVIL, "--db", sqlite_url)
    err = capsys.readouterr().err
    assert code == 1 and not raw_controls(err) and f"apr_{SHOWN}" in err

    code, _ = cli("inbox", "--db", "bogus" + EVIL + "://x")  # not a GraphkitError
    err = capsys.readouterr().err
    assert code == 1 and not raw_controls(err) and len(err.strip().split("\n")) == 1


def test_argparse_usage_errors_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["inbox", "--db", "sqlite://", "stray" + EVIL])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and not raw_controls(err)
    assert f"graphkit: error: unrecognized arguments: stray{SHOWN}" in err
    assert len(err.strip().splitlines()) == 1  # (one line, as every other mistake)
    with pytest.raises(SystemExit) as exited:
        main(["approve", "apr_x", "--db", "sqlite://"])  # no --by
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.strip().splitlines() == [
        "graphkit approve: error: the following arguments are required: --by "
        "(see graphkit approve --help)"]


def test_demo_output_and_prompts_are_escaped(sqlite_url: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import graphkit.examples

    monkeypatch.setattr(graphkit.examples, "deploy_agent",
                        lambda checkpointer: evil_agent(checkpointer, name="release"))
    lines: list[str] = []
    asked: list[str] = []
    answers = iter(["e", "{not json" + EVIL])

    def read(prompt: str) -> str:
        asked.append(prompt)
        return next(answers)

    result = run_demo(yes=False, db=sqlite_url, out=lines.append, read=read)
    assert result.finish_reason == "stop"
    shown = "\n".join(lines)
    assert not raw_controls(shown) and not raw_controls("".join(asked))
    assert f"| tool:     pay{SHOWN}"[:60] in shown  # the box wraps a long value
    assert f"rejected c1{SHOWN}" in shown
    assert f"agent> done {SHOWN}" in shown


def test_demo_approved_tool_output_is_escaped(sqlite_url: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import graphkit.examples

    monkeypatch.setattr(graphkit.examples, "deploy_agent",
                        lambda checkpointer: evil_agent(checkpointer, name="release"))
    lines: list[str] = []
    run_demo(yes=True, db=sqlite_url, out=lines.append)
    shown = "\n".join(lines)
    assert not raw_controls(shown)
    assert f"  tool pay{SHOWN}> paid 1 for {SHOWN}" in shown


def test_pages_show_what_is_stored_and_forms_send_back_what_was_given(
        sqlite_url: str, paused: str) -> None:
    """The web inbox's list and card, and a notebook's card, showed a prompt of "Pay 50 to
    \\u202eproc-live" with the override in place: the page read as another payee than the
    tool gets (helper-120). Every text a page shows is `printable` (line breaks kept, as a
    page shows them harmlessly), a form's fields too (filled raw, a payee input read as
    another IBAN: helper-144); a field left as it was sends back what is stored."""
    import html
    import re

    from graphkit import _html

    agent = evil_agent(sqlite_url)
    inbox = Inbox(sqlite_url, agents=[agent])
    item = inbox.get(paused)
    messages = [{"type": m.type, "content": m.content or json.dumps(
        [c["args"] for c in getattr(m, "tool_calls", [])], ensure_ascii=False)}
                for m in inbox.messages(paused)]
    pages = [_html.card(item, messages=messages), _html.pending_rows([item]),
             _html.card_markdown(item)]  # (a notebook's Markdown view: helper-123)
    inbox.approve(paused, decided_by="alice" + EVIL, comment="fine" + EVIL)
    decided = inbox.get(paused)
    pages += [_html.card(decided), _html.audit_table(inbox.audit(id=paused))]
    for page in pages:
        shown = html.unescape(re.sub(r"<[^>]*>", "", page))
        assert not raw_controls(shown), page
    assert "Pay 1 for " + printable(EVIL, lines=True) in html.unescape(pages[0])
    assert SHOWN.replace("\\n", "\n") == printable(EVIL, lines=True)

    schema = {"type": "object", "properties": {"note": {"type": "string"}}}
    form = _html.fields(schema, {"note": "a\u202eb"}, "arg")
    (sent,) = re.findall(r"value='([^']*)'", form)
    assert html.unescape(sent) == "a\\u202eb"  # (the field shows it as the card does)
    assert _html.parse_fields(schema, {"arg.note": html.unescape(sent)}, "arg",
                              shown={"note": "a\u202eb"}) == {"note": "a\u202eb"}
