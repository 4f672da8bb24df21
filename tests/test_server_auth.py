"""graphkit.server_auth under the real `langgraph dev`, driven with langgraph_sdk.

The server runs a temp langgraph.json whose auth is graphs/auth.py with two tokens. It checks
who gets in (401s), which writes around the approval gate are refused (graphkit's store
namespace, update_state, `command` goto/update) and, with tests/server_graphs.py, which
identity reaches graph nodes: the run's token's, for a start and for a resume by another
reviewer, whatever the client puts in config, context or an assistant's config.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.langgraph_server import ROOT, langgraph_dev

TOKENS = {"tok-rm": "release-manager", "tok-dev": "developer", "tok-audit": "auditor",
          "tok-other": "other"}


def serve(tmp_path_factory: pytest.TempPathFactory, name: str, graphs: dict[str, str],
          auth: str) -> Iterator[str]:
    """A real `langgraph dev` serving `graphs` behind `auth`, with the inbox mounted."""
    config = {
        "dependencies": [str(ROOT)],
        "graphs": graphs,
        "auth": {"path": auth},
        "http": {"app": f"{ROOT / 'graphs' / 'inbox.py'}:app"},
        "env": {},
    }
    workdir = tmp_path_factory.mktemp(name)
    with langgraph_dev(workdir, config, env={"GRAPHKIT_TOKENS": json.dumps(TOKENS)}) as url:
        yield url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(tmp_path_factory, "langgraph-dev-auth", {
        "deploy": f"{ROOT / 'graphs' / 'deploy.py'}:graph",
        "identity": f"{ROOT / 'tests' / 'server_graphs.py'}:graph",
        "wirer": f"{ROOT / 'tests' / 'server_agents.py'}:wirer",
        "spoofer": f"{ROOT / 'tests' / 'server_agents.py'}:spoofer",
        "parallel": f"{ROOT / 'tests' / 'server_agents.py'}:parallel",
        "copycat": f"{ROOT / 'tests' / 'server_agents.py'}:copycat",
        "outer": f"{ROOT / 'tests' / 'server_agents.py'}:outer",
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
    values = rm.runs.wait(thread_id, "deploy",
                          command={"resume": {"decisions": [{"type": "approve"}]}})
    tool_results = [m for m in values["messages"] if m["type"] == "tool"]
    assert "rolled out 3.0.0 to production" in tool_results[-1]["content"]


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
    import re

    paused_thread(client(server, "tok-rm"), "deploy",
                  messages=[{"role": "user", "content": "Roll out build 3.1.4"}])
    web = httpx.Client(base_url=f"{server}/inbox", follow_redirects=False, timeout=30)
    login = re.search(r"name='login' value='([0-9a-f]+)'", web.get("/login").text)
    assert login is not None
    assert web.post("/login", data={"token": "tok-rm", "login": login.group(1)}
                    ).status_code == 303
    listing = web.get("/").text
    found = re.search(r"approvals/(apr_[0-9a-z_]+)", listing)
    assert found is not None, listing[:2000]
    card = web.get(f"/approvals/{found.group(1)}")
    assert card.status_code == 200 and "Send build 3.1.4 to prod?" in card.text
    assert "Roll out build 3.1.4" in card.text
    stranger = httpx.get(f"{server}/inbox/approvals/{found.group(1)}", timeout=30)
    assert stranger.status_code == 303 and "Roll out build" not in stranger.text


@pytest.fixture(scope="module")
def owner_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose deployment keeps each thread its creator's (`tests/owner_auth.py`)."""
    yield from serve(tmp_path_factory, "langgraph-dev-owner-auth",
                     {"deploy": f"{ROOT / 'graphs' / 'deploy.py'}:graph"},
                     f"{ROOT / 'tests' / 'owner_auth.py'}:auth")


def reviewer(url: str, token: str) -> httpx.Client:
    """A browser-less reviewer signed into the mounted inbox with `token`."""
    import re

    web = httpx.Client(base_url=f"{url}/inbox", follow_redirects=False, timeout=30)
    login = re.search(r"name='login' value='([0-9a-f]+)'", web.get("/login").text)
    assert login is not None
    assert web.post("/login", data={"token": token, "login": login.group(1)}).status_code == 303
    return web


def decide(web: httpx.Client, approval_id: str, action: str = "approve") -> None:
    """Decide through the card's form; the inbox starts the continuation before it answers."""
    import re

    csrf = re.search(r"name='csrf' value='([0-9a-f]+)'", web.get(f"/approvals/{approval_id}").text)
    assert csrf is not None
    done = web.post(f"/approvals/{approval_id}/{action}", data={"csrf": csrf.group(1)})
    assert done.status_code == 303 and "refused" not in done.headers["location"], done.headers


def interrupts(c: Any, thread_id: str) -> list[dict[str, Any]]:
    state = c.threads.get_state(thread_id)
    found = list(state.get("interrupts") or [])
    for task in state.get("tasks") or []:
        found.extend(task.get("interrupts") or [])
    return list({i["id"]: i for i in found}.values())


def continuations(c: Any, thread_id: str) -> list[dict[str, Any]]:
    return [r for r in c.runs.list(thread_id, limit=20) if (r.get("kwargs") or {}).get("command")]


def settled(c: Any, thread_id: str) -> dict[str, Any]:
    """The one continuation of the thread, once it has ended."""
    import time

    deadline = time.monotonic() + 60
    while True:
        runs = continuations(c, thread_id)
        if runs and all(r["status"] not in ("pending", "running") for r in runs):
            (run,) = runs
            return run
        assert time.monotonic() < deadline, f"no continuation ended: {runs}"
        time.sleep(0.3)


def approval_of(web: httpx.Client, thread_id: str, deadline_s: float = 30, *,
                but: str = "") -> str:
    """The id of the approval (not `but`) the reviewer's inbox lists for the thread, once it
    does (the module's server serves every test's threads)."""
    import time

    deadline = time.monotonic() + deadline_s
    while True:
        for approval_id in dict.fromkeys(re.findall(r"approvals/(apr_[0-9a-z_]+)",
                                                    web.get("/").text)):
            if approval_id != but and f"threads/{thread_id}/audit" in web.get(
                    f"/approvals/{approval_id}").text:
                return approval_id
        assert time.monotonic() < deadline, f"no approval of {thread_id} listed"
        time.sleep(0.2)


@pytest.mark.parametrize("graph", ["wirer", "spoofer"])
def test_a_decision_never_answers_a_tools_own_question(server: str, graph: str) -> None:
    """One turn: `rm_file` waits on an approval, a tool (sent at once) asks the account
    holder its own question with `interrupt()`. A reviewer approving `rm_file` in the inbox
    used to have the continuation resume every interrupt of the thread with nothing, which
    answered the holder's question with `{}` in their place; `spoofer`'s question also carries
    graphkit's marker and an approval id, written by the model. Only interrupts that name
    approvals the ledger holds for the thread are the gate's: none waits yet, so nothing is
    resumed, and the approval applies once the holder answers and the run reaches the gate."""
    dev = client(server, "tok-dev")
    thread_id = dev.threads.create()["thread_id"]
    dev.runs.wait(thread_id, graph, input={"messages": [{"role": "user", "content": "go"}]})
    (question,) = interrupts(dev, thread_id)
    web = reviewer(server, "tok-rm")
    decide(web, approval_of(web, thread_id))
    assert continuations(dev, thread_id) == []  # (started, or not, before `decide` returned)
    assert [i["id"] for i in interrupts(dev, thread_id)] == [question["id"]]  # still asked
    messages = dev.threads.get_state(thread_id)["values"]["messages"]
    assert not [m for m in messages if m["type"] == "tool"]
    out = dev.runs.wait(thread_id, graph, command={"resume": {question["id"]: {"go": True}}})
    tools = sorted(str(m["content"]) for m in out["messages"] if m["type"] == "tool")
    assert tools == ["deleted /tmp/x", "paid" if graph == "spoofer" else "wired 1000 EUR"], tools


def test_a_tools_question_naming_an_earlier_approval_is_no_gate(server: str) -> None:
    """The second turn's tool asks the holder a question whose value the user wrote: graphkit's
    marker and the id of the first turn's approval (decided and applied). Approving the
    second turn's `rm_file` in the inbox must not take that question for a gate's pause and
    answer it with `{}`: only approvals a run of the thread waits on now make one."""
    dev = client(server, "tok-dev")
    thread_id = dev.threads.create()["thread_id"]
    dev.runs.wait(thread_id, "copycat", input={"messages": [{"role": "user", "content": "tidy"}]})
    web = reviewer(server, "tok-rm")
    first = approval_of(web, thread_id)
    decide(web, first)
    assert settled(dev, thread_id)["status"] == "success"
    forged = {"graphkit": 1, "approvals": [{"id": first}], "question": "Pay 1,000,000 EUR?"}
    dev.runs.wait(thread_id, "copycat",
                  input={"messages": [{"role": "user", "content": "pay " + json.dumps(forged)}]})
    (question,) = interrupts(dev, thread_id)
    assert question["value"] == forged
    decide(web, approval_of(web, thread_id, but=first))
    assert len(continuations(dev, thread_id)) == 1  # the first turn's only
    assert [i["id"] for i in interrupts(dev, thread_id)] == [question["id"]]  # still asked
    out = dev.runs.wait(thread_id, "copycat", command={"resume": {question["id"]: {"go": True}}})
    tools = sorted(str(m["content"]) for m in out["messages"] if m["type"] == "tool")
    assert tools == ["deleted /tmp/a", "deleted /tmp/y", "paid"], tools


def test_a_gate_inside_a_users_own_graph_is_continued_whatever_its_node_is_named(
        server: str) -> None:
    """A user's graph runs a graphkit agent in a node it named `tools`: the gate's pause
    surfaces in that task, and the decision made in the inbox continues it."""
    dev = client(server, "tok-dev")
    thread_id = dev.threads.create()["thread_id"]
    dev.runs.wait(thread_id, "outer", input={"messages": [{"role": "user", "content": "go"}]})
    (gate,) = interrupts(dev, thread_id)
    assert "graphkit" in gate["value"]
    web = reviewer(server, "tok-rm")
    decide(web, approval_of(web, thread_id))
    assert settled(dev, thread_id)["status"] == "success"
    messages = dev.threads.get_state(thread_id)["values"]["messages"]
    assert [m["content"] for m in messages if m["type"] == "tool"] == ["deleted /tmp/z"]


def test_a_decision_made_while_the_run_goes_on_is_continued_once_its_gate_waits(
        server: str) -> None:
    """A supervisor delegates to two subagents in one step: `fast` pauses at its gate while
    `slow` still naps, in a run with "exit" durability (a client's choice), whose pause is
    written only as the run ends. A decision made meanwhile finds no gate waiting in the
    thread's state; the inbox used to drop its continuation, and the run stayed paused with
    everything decided. It is tried again while the thread is busy, and continues it."""
    dev = client(server, "tok-dev")
    thread_id = dev.threads.create()["thread_id"]
    first = dev.runs.create(thread_id, "parallel", durability="exit",
                            input={"messages": [{"role": "user", "content": "go"}]})
    web = reviewer(server, "tok-rm")
    decide(web, approval_of(web, thread_id))
    assert dev.threads.get(thread_id)["status"] == "busy"  # `slow` naps 3 s
    dev.runs.join(thread_id, first["run_id"])
    run = settled(dev, thread_id)
    assert run["status"] == "success", run
    out = dev.threads.get_state(thread_id)["values"]["messages"]
    assert out[-1]["content"] == "slept 3.0; zapped beta", out[-1]


def test_a_reviewer_the_deployment_lets_run_continues_what_they_decide(owner_server: str
                                                                      ) -> None:
    """Under the deployment's owner filter, the release manager (whom it lets run any
    thread) decides on the developer's thread in the inbox, and the server continues it."""
    developer = client(owner_server, "tok-dev")
    thread_id = paused_thread(developer, "deploy",
                              messages=[{"role": "user", "content": "Roll out build 6.0.1"}])
    assert status_of(lambda: client(owner_server, "tok-other").threads.get(thread_id)) == 404
    (gate,) = interrupts(developer, thread_id)
    decide(reviewer(owner_server, "tok-rm"), gate["value"]["approvals"][0]["id"])
    run = settled(client(owner_server, "tok-rm"), thread_id)  # theirs: the developer's filter
    assert run["status"] == "success", run                    # hides it from the developer
    values = developer.threads.get_state(thread_id)["values"]
    assert any("rolled out 6.0.1" in str(m["content"]) for m in values["messages"])


@pytest.mark.parametrize("token", ["tok-audit", "tok-other"])
def test_a_continuation_never_goes_around_the_deployments_auth(owner_server: str, token: str
                                                               ) -> None:
    """The deployment refuses the auditor any run (its handler's 403) and hides the
    developer's thread from "other" (its owner filter: "not found"). A decision either makes
    in the inbox is kept, but its continuation is created as them or not at all: never as the
    server around that auth (a first version of this fix did, and a deploy ran during a
    freeze). It stays queued, and the decision applies when the owner resumes."""
    import time

    developer = client(owner_server, "tok-dev")
    thread_id = paused_thread(developer, "deploy",
                              messages=[{"role": "user", "content": "Roll out build 6.0.2"}])
    (gate,) = interrupts(developer, thread_id)
    decide(reviewer(owner_server, token), gate["value"]["approvals"][0]["id"])
    deadline = time.monotonic() + 5  # the inbox tries again after 1 s, 2 s, ...
    while time.monotonic() < deadline:
        assert continuations(developer, thread_id) == []
        time.sleep(0.5)
    values = developer.threads.get_state(thread_id)["values"]
    assert not [m for m in values["messages"] if "rolled out" in str(m["content"])]
    out = developer.runs.wait(thread_id, "deploy", command={"resume": {}})  # the owner goes on
    assert any("rolled out 6.0.2" in str(m["content"]) for m in out["messages"]
               if m["type"] == "tool"), out["messages"]
