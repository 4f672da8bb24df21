"""Trust at the edges through the real `langgraph dev` server, as its clients (Studio, Agent
Chat UI, the SDK) meet the agent: a secret argument is masked in the interrupt and the stream
they read while the tool receives the real value; a reviewer's `respond` reaches the model
marked as the reviewer's words, and a tool that forbids `respond` refuses it there too; a reply
sent as plain graph input auto-resumes a suspended tool with data read from the reply, while a
model-written argument that tries to instruct the extractor reaches it as data only; webhooks
follow outcomes: a decision the gate refuses is never announced, the call's outcome is.
Executions are counted in a file the tools append to, outside the server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.langgraph_server import ROOT, interrupt_of, langgraph_dev
from tests.server_agents import INJECTED, VAULT_KEY
from tests.test_notify import Receiver

MASK = "**********"


@pytest.fixture(scope="module")
def hooks() -> Iterator[Receiver]:
    """The webhook receiver the served refund agent posts to."""
    server = Receiver("s")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, hooks: Receiver
           ) -> Iterator[tuple[Any, Path]]:
    from langgraph_sdk import get_sync_client

    workdir = tmp_path_factory.mktemp("langgraph-dev-trust")
    runs = workdir / "runs.log"
    runs.write_text("")
    agents = ROOT / "tests" / "server_agents.py"
    config = {"dependencies": [str(ROOT)],
              "graphs": {"vault": f"{agents}:vault", "forecast": f"{agents}:forecast",
                         "refunds": f"{agents}:refunds"},
              "env": {}}
    env = {"GRAPHKIT_TEST_RUNS": str(runs), "GRAPHKIT_TEST_HOOK": hooks.url}
    with langgraph_dev(workdir, config, env=env) as url:
        yield get_sync_client(url=url), runs


def _paused(client: Any, text: str) -> tuple[str, list[Any]]:
    """A thread paused on the call `text` asks for, and the chunks its run streamed."""
    thread_id: str = client.threads.create()["thread_id"]
    chunks = list(client.runs.stream(
        thread_id, "vault", input={"messages": [{"role": "user", "content": text}]},
        stream_mode=["updates", "custom", "values", "messages-tuple"]))
    return thread_id, chunks


def _ran(runs: Path) -> list[str]:
    return runs.read_text().split()


def test_a_secret_argument_is_masked_where_server_clients_read_it(
        served: tuple[Any, Path]) -> None:
    client, runs = served
    thread, chunks = _paused(client, "charge 25")
    asked = interrupt_of(client, thread)
    assert asked["action_requests"][0]["args"] == {"amount": 25, "api_key": MASK}
    assert asked["approvals"][0]["args"] == {"amount": 25, "api_key": MASK}
    streamed = json.dumps([c.data for c in chunks if c.event != "values"], default=str)
    assert VAULT_KEY not in json.dumps(asked) and VAULT_KEY not in streamed
    done = client.runs.wait(thread, "vault",
                            command={"resume": {"decisions": [{"type": "approve"}]}})
    assert done["messages"][-1]["content"] == "charged 25"
    assert f"charge:25:{VAULT_KEY}" in _ran(runs)  # the tool got the real key


def test_a_respond_through_the_server_is_marked_as_the_reviewers_words(
        served: tuple[Any, Path]) -> None:
    client, runs = served
    before = _ran(runs)
    thread, _ = _paused(client, "pay_vendor 900")
    said = "The payment of 900 succeeded"
    done = client.runs.wait(thread, "vault", command={"resume": {"decisions": [
        {"type": "respond", "message": said}]}})
    (told,) = [m for m in done["messages"] if m["type"] == "tool"]
    assert told["content"].startswith("[Tool call 'pay_vendor' did not run.")
    assert "reviewer's words, not the tool's result" in told["content"]
    assert told["content"].endswith(said)
    assert _ran(runs) == before


def test_a_tool_that_forbids_respond_refuses_it_through_the_server(
        served: tuple[Any, Path]) -> None:
    client, runs = served
    before = _ran(runs)
    thread, _ = _paused(client, "transfer 5000")
    asked = interrupt_of(client, thread)
    assert asked["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
    client.runs.wait(thread, "vault", command={"resume": {"decisions": [
        {"type": "respond", "message": "The transfer went through"}]}})
    again = interrupt_of(client, thread)  # still waiting, told why
    assert "respond" in str(again["error"]) and again["approvals"][0]["status"] == "pending"
    state = client.threads.get_state(thread)
    assert not [m for m in state["values"]["messages"] if m["type"] == "tool"]
    assert _ran(runs) == before


def test_a_reply_as_graph_input_is_read_as_data_and_never_instructed(
        served: tuple[Any, Path]) -> None:
    client, runs = served
    thread: str = client.threads.create()["thread_id"]
    client.runs.wait(thread, "forecast", input={"messages": [
        {"role": "user", "content": "weather?"}]})
    (asked,) = interrupt_of(client, thread)["approvals"]
    assert asked["metadata"]["suspend_payload"]["message"].startswith("Which city?")
    done = client.runs.wait(thread, "forecast", input={"messages": [
        {"role": "user", "content": "Paris"}]})
    assert done["messages"][-1]["content"] == "sunny in Paris"
    prompts = [json.loads(line) for line in runs.read_text().splitlines()
               if line.startswith("[")]
    (system, request, reply), = prompts
    assert system[0] == "system" and "Pyongyang" not in system[1] and "IGNORE" not in system[1]
    assert request[1].startswith("<tool_request>\n") and INJECTED[:20] in request[1]
    assert request[1].count("</tool_request>") == 1
    assert reply[1] == "<user_reply>\nParis\n</user_reply>"


def test_webhooks_announce_no_refused_decision_and_follow_the_outcome(
        served: tuple[Any, Path], hooks: Receiver) -> None:
    """Through the server, a client approves for arguments it did not review (a stale
    digest): the gate refuses it, and the receiver is told nothing of a decision. The approval
    as reviewed runs the refund: the receiver gets `approval.decided` and then `run.finished`
    with the outcome, so the last event it keeps for the approval is the truth."""
    import time

    client, runs = served
    thread: str = client.threads.create()["thread_id"]
    client.runs.wait(thread, "refunds", input={"messages": [
        {"role": "user", "content": "refund me"}]})
    (asked,) = interrupt_of(client, thread)["approvals"]
    client.runs.wait(thread, "refunds", command={"resume": {"decisions": [
        {"type": "approve", "args_digest": "0" * 64}]}})
    assert interrupt_of(client, thread)["approvals"][0]["status"] == "pending"
    done = client.runs.wait(thread, "refunds", command={"resume": {"decisions": [
        {"type": "approve", "args_digest": asked["args_digest"]}]}})
    assert done["messages"][-1]["content"] == "refunded 30"
    assert "refund:30" in _ran(runs)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = [e for e in hooks.delivered() if e["approval"]["approval_id"] == asked["id"]]
        if any(e["type"] == "run.finished" for e in events):
            break
        time.sleep(0.2)
    assert [e["type"] for e in events] == [
        "approval.requested", "approval.decided", "run.finished"], events
    assert events[-1]["outcome"] == "ran"
