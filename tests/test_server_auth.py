"""graphkit.server_auth under the real `langgraph dev`, driven with langgraph_sdk.

The server runs a temp langgraph.json whose auth is graphs/auth.py with two tokens. It checks
who gets in (401s), which writes around the approval gate are refused (graphkit's store
namespace, update_state, `command` goto/update) and, with tests/server_graphs.py, which
identity reaches graph nodes: the run's token's, for a start and for a resume by another
reviewer, whatever the client puts in config, context or an assistant's config.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.langgraph_server import (
    ROOT,
    continuations,
    decide,
    interrupts,
    langgraph_dev,
    reviewer,
    settled,
)

TOKENS = {"tok-rm": "release-manager", "tok-dev": "developer", "tok-audit": "auditor",
          "tok-other": "other"}


DATABASES: dict[str, str] = {}
"""The ledger's database of each server started `serve(..., database=True)`, by its url."""


def serve(tmp_path_factory: pytest.TempPathFactory, name: str, graphs: dict[str, str],
          auth: str, *, database: bool = False,
          extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """A real `langgraph dev` serving `graphs` behind `auth`, with the inbox mounted (and
    with `database`, the served agents' ledger in `graphkit.db` of its workdir, where
    another door, `Inbox` or the CLI, decides too)."""
    config = {
        "dependencies": [str(ROOT)],
        "graphs": graphs,
        "auth": {"path": auth},
        "http": {"app": f"{ROOT / 'graphs' / 'inbox.py'}:app"},
        "env": {},
    }
    workdir = tmp_path_factory.mktemp(name)
    env = {"GRAPHKIT_TOKENS": json.dumps(TOKENS), **(extra_env or {})}
    if database:
        env["GRAPHKIT_DB"] = f"sqlite:///{workdir / 'graphkit.db'}"
    with langgraph_dev(workdir, config, env=env) as url:
        if database:
            DATABASES[url] = env["GRAPHKIT_DB"]
        yield url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(tmp_path_factory, "langgraph-dev-auth", {
        "deploy": f"{ROOT / 'graphs' / 'deploy.py'}:graph",
        "identity": f"{ROOT / 'tests' / 'server_graphs.py'}:graph",
    }, f"{ROOT / 'graphs' / 'auth.py'}:auth")


def client(url: str, token: str | None = None, **headers: str) -> Any:
    from langgraph_sdk import get_sync_client

    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return get_sync_client(url=url, headers=headers)


def refusal(call: Callable[[], object]) -> httpx.Response:
    """The response a client call failed with (the SDK raises httpx.HTTPStatusError)."""
    with pytest.raises(httpx.HTTPStatusError) as failure:
        call()
    return failure.value.response


def status_of(call: Callable[[], object]) -> int:
    return refusal(call).status_code


def seen(values: dict[str, Any], node: str) -> dict[str, Any]:
    (record,) = [r for r in values["seen"] if r["node"] == node]
    return record


def paused_thread(c: Any, graph: str, **input: Any) -> str:
    """A new thread with a run of `graph` paused at its approval interrupt."""
    thread_id: str = c.threads.create()["thread_id"]
    c.runs.wait(thread_id, graph, input=input)
    assert c.threads.get_state(thread_id)["next"] == ["approval_gate"]
    return thread_id


def test_tokens_decide_who_gets_in(server: str) -> None:
    assert httpx.get(f"{server}/ok").status_code == 200
    assert status_of(lambda: client(server).threads.create()) == 401
    assert status_of(lambda: client(server).assistants.search()) == 401
    assert status_of(lambda: client(server, "tok-nope").threads.create()) == 401
    assert status_of(lambda: client(server, Authorization="Bearer").threads.create()) == 401
    basic = client(server, Authorization="Basic dG9rLXJtOg==")
    assert status_of(lambda: basic.threads.create()) == 401
    padded = client(server, Authorization="Bearer tok-rm tok-rm")
    assert status_of(lambda: padded.store.put_item(("other",), "k", {})) == 401
    # `langgraph dev` admits `x-auth-scheme: langsmith` as its Studio user without calling
    # authenticate; with tokens configured graphkit's handlers refuse that user.
    studio = client(server, **{"x-auth-scheme": "langsmith"})
    refused = refusal(lambda: studio.threads.create())
    assert refused.status_code == 401 and "Studio access is disabled" in refused.text
    assert status_of(lambda: studio.store.put_item(("other",), "k", {})) == 401

    assert client(server, "tok-rm").threads.create()["thread_id"]
    assert client(server, "tok-dev").assistants.search(limit=5)


def test_graphkit_store_namespace_is_closed_to_clients(server: str) -> None:
    rm = client(server, "tok-rm")
    refused = refusal(lambda: rm.store.put_item(("graphkit", "grants", "t"), "k",
                                                {"decision": "approve"}))
    assert refused.status_code == 403 and "read-only to clients" in refused.text
    assert status_of(lambda: rm.store.get_item(("graphkit", "grants", "t"), "k")) == 403
    assert status_of(lambda: rm.store.delete_item(("graphkit", "grants", "t"), "k")) == 403
    assert status_of(lambda: rm.store.search_items(("graphkit",))) == 403
    assert status_of(lambda: rm.store.list_namespaces(prefix=["graphkit"])) == 403
    # Unscoped searches and listings would cover ("graphkit", ...) too.
    assert status_of(lambda: rm.store.search_items(())) == 403
    assert status_of(lambda: rm.store.list_namespaces()) == 403

    rm.store.put_item(("other",), "k", {"v": 1})
    assert rm.store.get_item(("other",), "k")["value"] == {"v": 1}
    assert [i["key"] for i in rm.store.search_items(("other",))["items"]] == ["k"]
    assert ["other"] in rm.store.list_namespaces(prefix=["other"])["namespaces"]
    rm.store.delete_item(("other",), "k")


def test_thread_state_writes_are_refused(server: str) -> None:
    dev = client(server, "tok-dev")
    thread_id = paused_thread(dev, "identity")
    refused = refusal(lambda: dev.threads.update_state(
        thread_id, {"decision": {"type": "approve"}}, as_node="approval_gate"))
    assert refused.status_code == 403 and "state writes are disabled" in refused.text
    assert status_of(lambda: dev.threads.update_state(thread_id, {"tools_ran": True})) == 403
    assert dev.threads.get_state(thread_id)["next"] == ["approval_gate"]

    # Seeding a new thread's state goes through the same hook; the server then answers 201
    # with the refusal as detail and the thread has no state.
    response = httpx.post(f"{server}/threads", headers={"Authorization": "Bearer tok-dev"},
                          json={"metadata": {"graph_id": "identity"}, "supersteps": [
                              {"updates": [{"values": {"tools_ran": True},
                                            "as_node": "approval_gate"}]}]})
    assert "state writes are disabled" in response.json()["detail"]

    # Metadata patches share the server's hook ("threads", "update") and stay allowed.
    patched = dev.threads.update(thread_id, metadata={"ticket": "OPS-1"})
    assert patched["metadata"]["ticket"] == "OPS-1"


def test_goto_and_update_commands_are_refused_resume_is_not(server: str) -> None:
    dev, rm = client(server, "tok-dev"), client(server, "tok-rm")
    thread_id = dev.threads.create()["thread_id"]
    dev.runs.wait(thread_id, "deploy",
                  input={"messages": [{"role": "user", "content": "Roll out build 3.0.0"}]})
    goto = {"goto": {"node": "tools", "input": {"messages": []}}}
    for command in (goto, {"goto": "tools"}, {"update": {"messages": []}},
                    {"resume": {"decisions": [{"type": "approve"}]}, "update": {"x": 1}}):
        refused = refusal(lambda c=command: rm.runs.wait(thread_id, "deploy", command=c))
        assert refused.status_code == 403 and "only resume is allowed" in refused.text
        assert status_of(lambda c=command: rm.runs.create(thread_id, "deploy", command=c)) == 403
    # a message beside a resume: LangGraph would drop it (helper-115)
    both = refusal(lambda: rm.runs.wait(
        thread_id, "deploy", command={"resume": {"decisions": [{"type": "approve"}]}},
        input={"messages": [{"role": "user", "content": "no wait, never mind"}]}))
    assert both.status_code == 403 and "not both" in both.text
    # an empty input beside it is no message: Agent Chat UI resumes so (helper-118)
    values = rm.runs.wait(thread_id, "deploy", input={},
                          command={"resume": {"decisions": [{"type": "approve"}]}})
    tool_results = [m for m in values["messages"] if m["type"] == "tool"]
    assert "rolled out 3.0.0 to production" in tool_results[-1]["content"]


def test_run_input_cannot_set_graphkits_run_options(server: str) -> None:
    """On a thread only the server ran, no request recorded its options: a run's input that
    set `require_tool_approval` false after another's set it true turned it off for the
    calls that came next (helper-123). Run input may not set them: the agent's settings
    apply; input that names none still runs."""
    dev = client(server, "tok-dev")
    thread_id = dev.threads.create()["thread_id"]
    loose = {"require_tool_approval": False, "max_steps": 1000}
    for given in ({"messages": [{"role": "user", "content": "Roll out build 3.0.1"}],
                   "options": loose}, {"options": loose}):
        refused = refusal(lambda g=given: dev.runs.wait(thread_id, "deploy", input=g))
        assert refused.status_code == 403 and "run options" in refused.text
    values = dev.runs.wait(thread_id, "deploy", input={
        "messages": [{"role": "user", "content": "Roll out build 3.0.1"}], "options": None})
    assert any(m["type"] == "ai" for m in values["messages"])


def test_nodes_see_the_identity_of_the_token_that_sent_the_run(server: str) -> None:
    dev, rm = client(server, "tok-dev"), client(server, "tok-rm")
    thread_id = paused_thread(dev, "identity")
    started = dev.threads.get_state(thread_id)["values"]
    assert seen(started, "model") == {
        "node": "model", "type": "ProxyUser", "identity": "developer",
        "has_identity_attr": True, "is_dict": False, "user_id": "developer"}

    values = rm.runs.wait(thread_id, "identity", command={"resume": {"type": "approve"}})
    assert values["decision"] == {"type": "approve"}
    assert seen(values, "model")["identity"] == "developer"
    assert seen(values, "approval_gate")["identity"] == "release-manager"
    assert seen(values, "tools")["identity"] == "release-manager"


def test_clients_cannot_choose_the_identity_nodes_see(server: str) -> None:
    rm = client(server, "tok-rm")
    forged = {"identity": "mallory", "display_name": "mallory", "permissions": ["admin"]}
    spoofs: list[dict[str, Any]] = [
        {"config": {"configurable": {"langgraph_auth_user": forged,
                                     "langgraph_auth_user_id": "mallory"}}},
        {"context": {"langgraph_auth_user": forged, "langgraph_auth_user_id": "mallory"}},
        {"checkpoint": {"langgraph_auth_user": forged}},
    ]
    for spoof in spoofs:
        thread_id = rm.threads.create()["thread_id"]
        rm.runs.wait(thread_id, "identity", input={}, **spoof)
        values = rm.runs.wait(thread_id, "identity", command={"resume": "ok"}, **spoof)
        for node in ("model", "approval_gate"):
            assert seen(values, node)["identity"] == "release-manager", (spoof, values)
            assert seen(values, node)["user_id"] == "release-manager", (spoof, values)

    assistant = rm.assistants.create(
        "identity", config={"configurable": {"langgraph_auth_user": forged}})
    thread_id = rm.threads.create()["thread_id"]
    rm.runs.wait(thread_id, assistant["assistant_id"], input={})
    values = client(server, "tok-dev").runs.wait(thread_id, assistant["assistant_id"],
                                                 command={"resume": "ok"})
    assert seen(values, "model")["identity"] == "release-manager"
    assert seen(values, "approval_gate")["identity"] == "developer"


def authenticate(auth: Any, authorization: str | None) -> dict[str, Any]:
    import asyncio

    user: dict[str, Any] = asyncio.run(auth._authenticate_handler(authorization=authorization))
    return user


def test_token_map_forms_and_anonymous_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph_sdk import Auth

    from graphkit.server_auth import make_auth, parse_tokens

    assert parse_tokens('{"tok-rm": "release-manager"}') == {"tok-rm": "release-manager"}
    assert parse_tokens(" a=alice, b = bob ,") == {"a": "alice", "b": "bob"}
    assert parse_tokens("  ") == {}
    for bad in ('["a"]', '{"a": ""}', '{"a": 1}', "a", "=alice"):
        with pytest.raises(ValueError):
            parse_tokens(bad)

    monkeypatch.setenv("GRAPHKIT_TOKENS", "tok-rm=release-manager")
    from_env = make_auth()
    assert authenticate(from_env, "Bearer tok-rm")["identity"] == "release-manager"
    assert authenticate(from_env, "bearer tok-rm")["identity"] == "release-manager"
    for header in (None, "", "Bearer tok-r", "Bearer tok-rmx", "tok-rm", "Basic tok-rm"):
        with pytest.raises(Auth.exceptions.HTTPException) as failure:
            authenticate(from_env, header)
        assert failure.value.status_code == 401

    monkeypatch.delenv("GRAPHKIT_TOKENS")
    open_door = make_auth()  # no tokens at all: local Studio keeps working
    assert authenticate(open_door, None)["identity"] == "anonymous"
    with pytest.raises(Auth.exceptions.HTTPException):
        authenticate(open_door, "Bearer anything")
    mixed = make_auth({"t": "ann"}, allow_anonymous=True)
    assert authenticate(mixed, None)["identity"] == "anonymous"
    assert authenticate(mixed, "Bearer t")["identity"] == "ann"
    with pytest.raises(Auth.exceptions.HTTPException):
        authenticate(make_auth({}, allow_anonymous=False), None)


def test_the_mounted_inbox_shows_a_threads_messages_to_its_reviewers_only(server: str
                                                                          ) -> None:
    """The web inbox mounted in a server with its own auth reads a card's messages in process
    (LangGraph's loopback client, which the server trusts as it trusts its own code): a
    signed-in reviewer sees them; without the inbox's sign-in there is no card at all."""
    paused_thread(client(server, "tok-rm"), "deploy",
                  messages=[{"role": "user", "content": "Roll out build 3.1.4"}])
    web = reviewer(server, "tok-rm")
    listing = web.get("/").text
    found = re.search(r"approvals/(apr_[0-9a-z_]+)", listing)
    assert found is not None, listing[:2000]
    card = web.get(f"/approvals/{found.group(1)}")
    assert card.status_code == 200 and "Send build 3.1.4 to prod?" in card.text
    assert "Roll out build 3.1.4" in card.text
    stranger = httpx.get(f"{server}/inbox/approvals/{found.group(1)}", timeout=30)
    assert stranger.status_code == 303 and "Roll out build" not in stranger.text


@pytest.fixture(scope="module")
def private_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """graphs/auth.py as users deploy it, with $GRAPHKIT_REVIEWERS: private threads."""
    yield from serve(tmp_path_factory, "langgraph-dev-private",
                     {"deploy": f"{ROOT / 'graphs' / 'deploy.py'}:graph"},
                     f"{ROOT / 'graphs' / 'auth.py'}:auth", database=True,
                     extra_env={"GRAPHKIT_REVIEWERS": "release-manager"})


def test_private_threads_are_their_creators_and_the_reviewers_alone(private_server: str
                                                                   ) -> None:
    """Every token holder could read every thread and send it input (helper-54; documented,
    with LangGraph's owner filter left to the deployment's own auth). With reviewers named,
    `make_auth` keeps each thread its creator's: another caller can neither read, find,
    run, resume nor retag it, while a reviewer reads it and decides in the inbox, and the
    continuation (the reviewer's run) leaves the thread its creator's."""
    developer, other = client(private_server, "tok-dev"), client(private_server, "tok-other")
    thread_id = paused_thread(developer, "deploy",
                              messages=[{"role": "user", "content": "Roll out build 7.0.1"}])
    said = {"messages": [{"role": "user", "content": "never mind, roll back"}]}
    for attempt in (lambda: other.threads.get(thread_id),
                    lambda: other.threads.get_state(thread_id),
                    lambda: other.runs.create(thread_id, "deploy", input=said),
                    lambda: other.runs.create(thread_id, "deploy", command={"resume": {}}),
                    lambda: other.threads.update(thread_id, metadata={"topic": "mine"}),
                    lambda: other.runs.list(thread_id)):
        assert status_of(attempt) == 404
    assert thread_id not in [t["thread_id"] for t in other.threads.search(limit=100)]
    assert status_of(lambda: other.threads.update(thread_id, metadata={"owner": "other"})) == 403
    made = other.threads.create()["thread_id"]  # what other creates is theirs to read
    assert other.threads.get(made)["metadata"]["owner"] == "other"
    assert [t["thread_id"] for t in other.threads.search(metadata={"owner": "other"})] == [made]
    # ... and not theirs to give away, nor to hide (helper-61)
    assert status_of(lambda: other.threads.update(made, metadata={"owner": "developer"})) == 403
    assert status_of(lambda: other.threads.update(made, metadata={"owner": None})) == 403
    assert other.threads.update(made, metadata={"topic": "mine"})["metadata"]["owner"] == "other"
    # the graphs' own assistants are every caller's: not one's to change or delete
    (assistant,) = other.assistants.search(graph_id="deploy")
    assert status_of(lambda: other.assistants.update(assistant["assistant_id"],
                                                     config={"recursion_limit": 1})) == 403
    assert status_of(lambda: other.assistants.delete(assistant["assistant_id"])) == 403
    fresh = str(uuid.uuid4())  # a thread a run creates too
    other.runs.wait(fresh, "deploy", input=said, if_not_exists="create")
    assert other.threads.get(fresh)["metadata"]["owner"] == "other"
    assert status_of(lambda: developer.threads.get(fresh)) == 404
    (gate,) = interrupts(developer, thread_id)
    approval_id = gate["value"]["approvals"][0]["id"]
    # nor in the mounted inbox, at any of its doors (helper-61: it showed the thread's
    # messages to any token holder, who could edit the call's arguments there)
    nosy = reviewer(private_server, "tok-other")
    assert approval_id not in nosy.get("/").text
    assert nosy.get(f"/approvals/{approval_id}").status_code == 404
    assert "7.0.1" not in nosy.get(f"/threads/{thread_id}/audit").text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', nosy.get("/").text)
    assert csrf is not None
    forged = nosy.post(f"/approvals/{approval_id}/approve",
                       data={"csrf": csrf.group(1), "digest": "x"})
    assert "ApprovalNotFoundError" in forged.headers["location"], forged.headers
    assert approval_id in reviewer(private_server, "tok-dev").get("/").text  # the creator's
    # what is left of a deleted thread is a reviewer's to read, not anyone's (helper-62)
    gone = paused_thread(other, "deploy",
                         messages=[{"role": "user", "content": "Roll out build 7.0.9"}])
    (asked,) = interrupts(other, gone)
    other.threads.delete(gone)
    left = asked["value"]["approvals"][0]["id"]
    assert reviewer(private_server, "tok-dev").get(f"/approvals/{left}").status_code == 404
    assert reviewer(private_server, "tok-rm").get(f"/approvals/{left}").status_code == 200
    rm = client(private_server, "tok-rm")
    assert rm.threads.get(thread_id)["thread_id"] == thread_id
    decide(reviewer(private_server, "tok-rm"), approval_id)
    run = settled(rm, thread_id)
    assert run["status"] == "success", run
    values = developer.threads.get_state(thread_id)["values"]
    assert any("rolled out 7.0.1" in str(m["content"]) for m in values["messages"])
    assert developer.threads.get(thread_id)["metadata"]["owner"] == "developer"


@pytest.fixture(scope="module")
def owner_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose deployment keeps each thread its creator's (`tests/owner_auth.py`)."""
    yield from serve(tmp_path_factory, "langgraph-dev-owner-auth",
                     {"deploy": f"{ROOT / 'graphs' / 'deploy.py'}:graph"},
                     f"{ROOT / 'tests' / 'owner_auth.py'}:auth", database=True)


def test_a_reviewer_the_deployment_lets_run_continues_what_they_decide(owner_server: str
                                                                      ) -> None:
    """Under the deployment's owner filter, the release manager (whom it lets run any
    thread) decides on the developer's thread in the inbox, and the server continues it."""
    developer = client(owner_server, "tok-dev")
    thread_id = paused_thread(developer, "deploy",
                              messages=[{"role": "user", "content": "Roll out build 6.0.1"}])
    assert status_of(lambda: client(owner_server, "tok-other").threads.get(thread_id)) == 404
    (gate,) = interrupts(developer, thread_id)
    web = reviewer(owner_server, "tok-rm")
    decide(web, gate["value"]["approvals"][0]["id"])
    run = settled(client(owner_server, "tok-rm"), thread_id)  # theirs: the developer's filter
    assert run["status"] == "success", run                    # hides it from the developer
    values = developer.threads.get_state(thread_id)["values"]
    assert any("rolled out 6.0.1" in str(m["content"]) for m in values["messages"])
    audit = web.get(f"/threads/{thread_id}/audit").text  # the continuation, under its approval
    assert "continued" in audit and run["run_id"] in audit, audit
    from graphkit import Inbox

    (continued,) = [e for e in Inbox(DATABASES[owner_server]).audit(thread_id=thread_id)
                    if e["event"] == "continued"]  # with its call's id, as every row
    assert continued["tool_call_id"] == gate["value"]["approvals"][0]["tool_call_id"]


def test_the_mounted_inbox_shows_nothing_of_a_thread_the_deployment_hides(owner_server: str
                                                                         ) -> None:
    """The deployment's owner filter hides the developer's thread from "other": the mounted
    inbox asks the server as them, and neither lists, shows nor lets them decide its
    approval (helper-61: it did all three, and the decision stood)."""
    developer = client(owner_server, "tok-dev")
    thread_id = paused_thread(developer, "deploy",
                              messages=[{"role": "user", "content": "Roll out build 6.0.4"}])
    (gate,) = interrupts(developer, thread_id)
    approval_id = gate["value"]["approvals"][0]["id"]
    web = reviewer(owner_server, "tok-other")
    assert approval_id not in web.get("/").text
    assert web.get(f"/approvals/{approval_id}").status_code == 404
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', web.get("/").text)
    assert csrf is not None
    refused = web.post(f"/approvals/{approval_id}/decline", data={"csrf": csrf.group(1)})
    assert "ApprovalNotFoundError" in refused.headers["location"], refused.headers
    (still,) = interrupts(developer, thread_id)
    assert still["value"]["approvals"][0]["id"] == approval_id


def test_a_continuation_never_goes_around_the_deployments_auth(owner_server: str) -> None:
    """The deployment lets the auditor read every thread but start no run (its handler's
    403). A decision the auditor makes in the inbox is kept, but its continuation is created
    as them or not at all: never as the server around that auth (a first version of this fix
    did, and a deploy ran during a freeze). It stays queued, and the decision applies when
    the owner resumes."""
    import time

    token = "tok-audit"
    developer = client(owner_server, "tok-dev")
    thread_id = paused_thread(developer, "deploy",
                              messages=[{"role": "user", "content": "Roll out build 6.0.2"}])
    (gate,) = interrupts(developer, thread_id)
    approval_id = gate["value"]["approvals"][0]["id"]
    web = reviewer(owner_server, token)
    decide(web, approval_id)
    deadline = time.monotonic() + 5  # the inbox tries again after 1 s, 2 s, ...
    while time.monotonic() < deadline:
        assert continuations(developer, thread_id) == []
        time.sleep(0.5)
    card = html.unescape(web.get(f"/approvals/{approval_id}").text)  # the card says why
    assert "did not start: the deployment's auth refuses auditor" in card, card
    values = developer.threads.get_state(thread_id)["values"]
    assert not [m for m in values["messages"] if "rolled out" in str(m["content"])]
    out = developer.runs.wait(thread_id, "deploy", command={"resume": {}})  # the owner goes on
    assert any("rolled out 6.0.2" in str(m["content"]) for m in out["messages"]
               if m["type"] == "tool"), out["messages"]


def test_a_decision_of_another_door_is_never_continued_as_the_name_it_gives(
        owner_server: str) -> None:
    """`Inbox` and the CLI take `decided_by` as their caller writes it: no authentication
    stands behind it. A decision made there on the developer's thread, "by" the release
    manager (whom the deployment lets run any thread), is kept, but the mounted inbox never
    creates a run as that name (it did, retrying the queued run as the thread's last
    decider): the decision applies when someone the deployment lets run resumes the thread,
    or as the inbox continues a decision its own sign-in vouches for."""
    import time

    from graphkit import Inbox

    developer, rm = client(owner_server, "tok-dev"), client(owner_server, "tok-rm")
    thread_id = paused_thread(developer, "deploy",
                              messages=[{"role": "user", "content": "Roll out build 6.0.3"}])
    (gate,) = interrupts(developer, thread_id)
    reviewer(owner_server, "tok-dev").close()  # the inbox's retries run from its first request
    inbox = Inbox(DATABASES[owner_server])
    approval_id = gate["value"]["approvals"][0]["id"]
    inbox.approve(approval_id, decided_by="release-manager")
    deadline = time.monotonic() + 6  # the inbox looks every 2 s
    while time.monotonic() < deadline:
        assert continuations(rm, thread_id) == []
        time.sleep(0.5)
    card = html.unescape(reviewer(owner_server, "tok-rm").get(f"/approvals/{approval_id}").text)
    assert "its last decision was taken outside it" in card, card
    out = developer.runs.wait(thread_id, "deploy", command={"resume": {}})  # the owner goes on
    assert any("rolled out 6.0.3" in str(m["content"]) for m in out["messages"]
               if m["type"] == "tool"), out["messages"]


def test_why_a_continuation_did_not_start_is_told_on_its_own_approvals_card_only(
        tmp_path: Path) -> None:
    """Why a queued continuation did not start names the reviewer it runs as. A thread's
    approvals share its queued run, but each has its own viewers: a viewer of another
    approval of the thread is told it is queued, not who decided what (helper-5 read "the
    deployment's auth refuses auditor" on the card of an approval it alone could see)."""
    import asyncio

    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

    from graphkit import Agent, Inbox, create_tool
    from graphkit.testing import ScriptedChatModel
    from graphkit.web._server import ServerRuns, _queue_key

    @create_tool(needs_approval=True)
    def wire(amount: int) -> str:
        """Wire money."""
        return "wired"

    @create_tool(needs_approval=True)
    def notify(text: str) -> str:
        """Notify the team."""
        return "sent"

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("done")
        return AIMessage("", tool_calls=[{"name": "wire", "args": {"amount": 5}, "id": "w"},
                                         {"name": "notify", "args": {"text": "hi"}, "id": "n"}])

    agent = Agent(name="pay", model=ScriptedChatModel(reply), tools=[wire, notify],
                  checkpointer=f"sqlite:///{tmp_path / 'graphkit.db'}")
    agent.graph.invoke({"messages": [("user", "pay")]}, {"configurable": {"thread_id": "t"}})
    inbox = Inbox(agent._storage)  # (driven raw, as the server drives it: a served thread)
    items = {i.tool_name: i for i in inbox.pending()}
    inbox.approve(items["notify"].id, decided_by="developer")
    inbox.approve(items["wire"].id, decided_by="auditor")  # last: the run is ready
    ledger = agent._storage.ledger
    key = _queue_key(items["wire"])
    assert ledger.take_ready(key, "inbox-1", continue_as="auditor",
                             continue_for=items["wire"].id) is not None
    ledger.retry_ready(key, "inbox-1", why="the deployment's auth refuses auditor")
    runs = ServerRuns(ledger)
    wire_card, notify_card = (asyncio.run(runs.continuation(inbox.get(items[name].id)))
                              for name in ("wire", "notify"))
    assert wire_card is not None and notify_card is not None
    assert (wire_card.status, wire_card.why) == ("queued",
                                                 "the deployment's auth refuses auditor")
    assert (notify_card.status, notify_card.why) == ("queued", None)


def test_what_input_beside_a_resume_command_says_something() -> None:
    """The create_run handler lets a resume through beside input that says nothing (Agent
    Chat UI's `{}`: helper-118), and refuses one beside a message; input nested past any
    message's depth is refused, where it raised RecursionError, a 500 (helper-119)."""
    from graphkit.server_auth import _says_something

    assert not any(map(_says_something, (None, {}, [], "", {"messages": []},
                                         {"messages": [{}]}, {"options": None})))
    assert _says_something({"messages": [{"role": "user", "content": "never mind"}]})
    assert _says_something(0) and _says_something(False)
    deep: Any = []
    for _ in range(700):
        deep = [deep]
    assert _says_something({"messages": deep})
