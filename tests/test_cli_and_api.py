"""The demo CLI, the scripted model, and the pinned public API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

import graphkit
from graphkit.cli import main, run_demo
from graphkit.testing import ScriptedChatModel, ScriptExhaustedError

ROOT = Path(__file__).resolve().parent.parent


def test_public_api_is_pinned() -> None:
    assert graphkit.__all__ == sorted(graphkit.__all__)
    assert set(graphkit.__all__) == {
        "Agent", "AgentStream", "AmbiguousApprovalError", "ApprovalAlreadyResolvedError",
        "ApprovalNotFoundError", "ApprovalsPendingError", "ApproverNotAllowedError",
        "AsyncAgentStream", "DecisionNotAllowedError", "GenerateResult", "GraphkitError",
        "GraphkitTool",
        "Inbox", "InvalidApprovedArgsError", "PendingApproval", "ResumeDataError", "RunState",
        "SnapshotNotFoundError", "StreamChunk", "SuspendPayloadError", "ToolContext",
        "Webhook", "create_tool", "verify_signature",
    }


def test_demo_unattended_runs_end_to_end_in_a_subprocess(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "graphkit.cli", "demo", "--yes", "--db",
         f"sqlite:///{tmp_path / 'demo.db'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "APPROVAL NEEDED" in done.stdout and "Send build 1.4.2 to prod?" in done.stdout
    assert '"channel": "ops"' in done.stdout
    assert "rolled out 1.4.2 to production" in done.stdout
    assert "finish_reason: stop" in done.stdout


@pytest.mark.parametrize(
    ("answers", "expected"),
    [(["e", '{"version": "1.4.3"}'], "edited call_deploy"),
     (["edit", '{"version": "1.4.3"}'], "rolled out 1.4.3"),
     (["r"], "was rejected"), (["n"], "was rejected"), (["no"], "rejected call_deploy"),
     (["y"], "rolled out 1.4.2"), (["YES"], "approved call_deploy"),
     (["maybe", "", "y"], "rolled out 1.4.2"), (["sure", "n"], "was rejected")],
)
def test_demo_edit_and_reject(tmp_path: Path, answers: list[str], expected: str) -> None:
    lines: list[str] = []
    replies = iter(answers)
    result = run_demo(yes=False, db=f"sqlite:///{tmp_path / 'd.db'}", out=lines.append,
                      read=lambda prompt: next(replies))
    assert result.finish_reason == "stop"
    assert any(expected in line for line in lines), lines
    asked_again = [line for line in lines if line.startswith("please answer")]
    assert len(asked_again) == len(answers) - 1 - answers[0].startswith("e")


def test_cli_errors_are_one_line_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--yes", "--db", "bogus://x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("graphkit: error:") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_scripted_model_answers_by_conversation_turn() -> None:
    model = ScriptedChatModel([AIMessage("one"), "two"])
    assert model.invoke([HumanMessage("hi")]).text == "one"
    assert model.invoke([HumanMessage("hi"), AIMessage("one"), HumanMessage("again")]).text == "two"
    with pytest.raises(ScriptExhaustedError, match="2 scripted replies"):
        model.invoke([AIMessage("a"), AIMessage("b")])
    assert len(model.calls) == 3  # the failed call is recorded too
    streamed = "".join(c.text for c in ScriptedChatModel(["a b c"]).stream("x"))
    assert streamed == "a b c"


def test_scripted_model_refuses_what_a_chat_provider_refuses() -> None:
    """A result away from its call, a second result, a call without one: OpenAI's API
    answers each with a 400, so the scripted model does too (`strict`), or a test would pass
    a conversation no real model can be given (helper-99)."""
    from langchain_core.messages import ToolMessage

    from graphkit.testing import MalformedConversationError

    def asks(*ids: str) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": i} for i in ids])

    def result(i: str) -> ToolMessage:
        return ToolMessage("r", tool_call_id=i)

    model = ScriptedChatModel(["ok"] * 9)
    for bad, why in [
        ([asks("a"), result("a"), AIMessage("done"), result("a")], "'a' does not follow it"),
        ([asks("a"), result("a"), result("a")], "'a' has more than one result"),
        ([asks("a", "b"), result("a"), HumanMessage("x")], r"\['b'\] have no result before"),
        ([asks("a")], r"\['a'\] have no result"),
        ([HumanMessage("x"), result("a")], "'a' does not follow it"),
    ]:
        with pytest.raises(MalformedConversationError, match=why):
            model.invoke([HumanMessage("hi"), *bad])
    fine = [asks("a", "a", "b"), result("b"), result("a"), result("a"), AIMessage("done")]
    assert model.invoke([HumanMessage("hi"), *fine]).text == "ok"
    loose = ScriptedChatModel(["ok"], strict=False)
    assert loose.invoke([HumanMessage("hi"), result("a")]).text == "ok"


def test_scripted_model_function_and_structured_output() -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        city: str

    model = ScriptedChatModel(lambda messages: f"{len(messages)} messages",
                              structured=[{"city": "Paris"}])
    assert model.invoke("hi").text == "1 messages"
    assert model.with_structured_output(City).invoke("I'm in Paris") == City(city="Paris")
