"""Review round 9: attacks on the ledger's run registry, secret tool arguments, and lease
renewals over a second connection for a PostgresSaver on one connection.

Each test fails on the code it was written against when the problem it names is real."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, Field, Secret, SecretBytes, SecretStr

import graphkit._ledger as ledger_module
from graphkit import Agent, Inbox, create_tool
from graphkit.errors import GraphkitError, InvalidApprovedArgsError, SnapshotNotFoundError
from graphkit.testing import ScriptedChatModel
from tests.helpers import agent_with, call, turn

# ---------------------------------------------------------------------------- helpers


@pytest.fixture
def short_leases(monkeypatch: pytest.MonkeyPatch) -> float:
    """Leases of one second, renewed by a fresh keeper every third of it; a run that finds
    its thread held waits half a second, not two minutes."""
    import graphkit._ledger._keeper as keeper_module
    import graphkit._ledger._schema as schema_module
    import graphkit.agent as agent_module

    monkeypatch.setattr(schema_module, "LEASE_SECONDS", 1.0)
    monkeypatch.setattr(keeper_module, "KEEPER", keeper_module.LeaseKeeper())
    monkeypatch.setattr(agent_module, "WAIT_SECONDS", 0.5)
    return 1.0


def _single_connection_saver(url: str, *, setup: tuple[str, ...] = ()) -> Any:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    conn = Connection.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    for statement in setup:
        conn.execute(statement)  # type: ignore[arg-type]
    saver = PostgresSaver(conn)
    saver.setup()
    return saver


def _lease_expiry(ledger: Any, thread_id: str) -> float:
    return float(ledger._sql.query(
        "SELECT expires_at FROM graphkit_leases WHERE thread_id = ?", (thread_id,))[0][0])


def _renew_as_the_keeper_does(ledger: Any, thread_id: str, owner: str) -> None:
    with contextlib.suppress(Exception):  # the keeper swallows failures: "retried next round"
        ledger._renew(thread_id, owner)


# ---------------------------------------------------------------------------- 3. apart


def test_a_connection_limited_single_connection_saver_runs_an_approved_call_twice(
        postgres_url: str, short_leases: float) -> None:
    """Promise: an approved call runs exactly once. A PostgresSaver over one connection is
    what a deployment with a connection budget uses (a role with CONNECTION LIMIT 1). Lease
    renewals now need a second connection; it is refused, the keeper swallows the error, and
    the call's execution claim (and the thread's lease) lapse while the tool still runs: a
    resume from another process then claims the call again and runs it a second time. Before,
    renewals went over the saver's own connection."""
    import psycopg

    role = f"solo_{uuid.uuid4().hex[:8]}"
    database = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")  # type: ignore[arg-type]
        admin.execute(f'ALTER DATABASE "{database}" OWNER TO {role}')  # type: ignore[arg-type]
    saver = _single_connection_saver(postgres_url.replace("postgres@", f"{role}@"))
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    @create_tool(needs_approval=True)
    def deploy(service: str) -> str:
        """Deploy a service."""
        runs.append(service)
        if len(runs) == 1:
            started.set()
            release.wait(8)
        return f"deployed {service}"

    here = Agent(name="ops", tools=[deploy], checkpointer=saver, model=ScriptedChatModel(
        [turn(call("deploy", {"service": "api"}, "c1")), "done"]))
    elsewhere = Agent(name="ops", tools=[deploy], checkpointer=postgres_url,
                      model=ScriptedChatModel(["done"]))
    try:
        first = here.generate("deploy the api")
        assert first.finish_reason == "suspended"
        outcome: list[Any] = []
        approving = threading.Thread(target=lambda: outcome.append(
            here.approve_tool_call_generate(run_id=first.run_id)), daemon=True)
        approving.start()
        assert started.wait(5)
        time.sleep(short_leases * 2.5)  # several renewal rounds of the keeper
        with contextlib.suppress(Exception):  # busy (RunBusyError) is the right answer
            elsewhere.resume(run_id=first.run_id)
        release.set()
        approving.join(10)
        assert runs == ["api"], f"the approved call ran {len(runs)} times"
    finally:
        release.set()
        saver.conn.close()
        elsewhere._storage.ledger._sql.pool.close()


def test_lease_renewals_use_the_savers_session_schema(postgres_url: str) -> None:
    """Promise: a run holds its thread while it advances it. A single connection set up with
    `SET search_path` (one schema per tenant) has graphkit's tables created in that schema;
    the renewal connection is opened from the conninfo alone, so it looks for
    `graphkit_leases` elsewhere: renewals fail silently and every lease of the process lapses
    after 30 s, letting another process advance the same thread."""
    schema = f"tenant_{uuid.uuid4().hex[:8]}"
    saver = _single_connection_saver(postgres_url, setup=(
        f"CREATE SCHEMA {schema}", f"SET search_path TO {schema}"))
    try:
        agent, _ = agent_with(["ok"], checkpointer=saver, name="billing")
        ledger = agent._storage.ledger
        with ledger.lease("t1") as owner:
            before = _lease_expiry(ledger, "t1")
            time.sleep(0.05)
            _renew_as_the_keeper_does(ledger, "t1", owner)
            assert _lease_expiry(ledger, "t1") > before, "the lease was not renewed"
    finally:
        saver.conn.close()


def test_closing_a_single_connection_saver_closes_graphkits_second_connection(
        postgres_url: str) -> None:
    """A PostgresSaver over one connection is closed by closing that connection (that is what
    `PostgresSaver.from_conn_string` does on exit). The renewal connection graphkit opened
    beside it is never closed: one server connection leaks per such agent (per request, when
    an application opens a saver per request), until max_connections refuses everyone."""
    import psycopg

    database = postgres_url.rsplit("/", 1)[1]
    saver = _single_connection_saver(postgres_url)
    agent, _ = agent_with(["ok"], checkpointer=saver, name="billing")
    ledger = agent._storage.ledger
    with ledger.lease("t1") as owner:
        _renew_as_the_keeper_does(ledger, "t1", owner)  # what the keeper does every 10 s
    saver.conn.close()
    with psycopg.connect(postgres_url, autocommit=True) as probe:
        others = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid()", (database,)).fetchone()
    assert others is not None
    assert others[0] == 0, f"{others[0]} connection(s) left open after the saver closed"


# ---------------------------------------------------------------------------- 2. secrets


class _Card(BaseModel):
    number: str
    currency: str = Field("USD", alias="cur")


def _secret_value(value: Any) -> Any:
    if isinstance(value, SecretStr | SecretBytes | Secret):
        return _secret_value(value.get_secret_value())
    if isinstance(value, dict):
        return {k: _secret_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return sorted(_secret_value(v) for v in value)
    if isinstance(value, BaseModel):
        return value.model_dump()
    return value


@pytest.mark.parametrize(("annotation", "sent", "expected"), [
    pytest.param(Secret[str], "hunter2", "hunter2", id="Secret[str]"),
    pytest.param(Secret[int], 1234, 1234, id="Secret[int]"),
    pytest.param(Secret[_Card], {"number": "4111", "cur": "EUR"},
                 {"number": "4111", "currency": "EUR"}, id="Secret[Model]"),
    pytest.param(dict[int, SecretStr], {"1": "pw-one"}, {1: "pw-one"}, id="dict[int,SecretStr]"),
    pytest.param(set[SecretStr], ["a", "b"], ["a", "b"], id="set[SecretStr]"),
])
def test_every_secret_shape_reaches_the_tool_as_sent(annotation: Any, sent: Any,
                                                      expected: Any) -> None:
    """Today's fix promises that secret arguments (SecretStr, SecretBytes, Secret) reach the
    tool as sent. `_holds_secrets` finds no `cls` in the core schema of pydantic's generic
    `Secret[T]`, and `_revealed` misses secrets under non-string dict keys and in sets: the
    JSON dump's mask '**********' stays, and every such call is answered with an error
    ("changes its arguments each time they are validated", or not valid at all): the tool
    can never run, approved or not."""
    got: list[Any] = []

    def use(value: Any) -> str:
        """Use a secret."""
        got.append(_secret_value(value))
        return "used"

    use.__annotations__ = {"value": annotation, "return": str}
    tool = create_tool(use, name="use", description="Use a secret.", needs_approval=True)
    agent = Agent(name="secrets", tools=[tool], model=ScriptedChatModel(
        [turn(call("use", {"value": sent}, "c1")), "done"]))
    first = agent.generate("use it")
    assert first.finish_reason == "suspended", agent.snapshot(
        run_id=first.run_id)["messages"][-2]["data"]["content"]
    assert agent.approve_tool_call_generate(run_id=first.run_id).text == "done"
    assert got == [expected]


class _Login(BaseModel):
    user: str
    token: SecretBytes


@create_tool(needs_approval=True, args_schema=_Login)
def _login(user: str, token: SecretBytes) -> str:
    """Log in."""
    return "in"


@pytest.mark.parametrize("door", ["agent", "inbox"])
def test_an_edit_with_undecodable_secret_bytes_gets_a_typed_error(sqlite_url: str,
                                                                  door: str) -> None:
    """Promise: bad input gets a typed error (graphkit.errors) and changes nothing. An edit
    whose SecretBytes value is not UTF-8 makes `_revealed` call `to_jsonable_python` on the
    raw bytes, and UnicodeDecodeError escapes `approve_tool_call` and `Inbox.approve` (before
    today the same edit got InvalidApprovedArgsError)."""
    args = {"user": "ann", "token": "t0k"}
    agent = Agent(name="secrets", tools=[_login], checkpointer=sqlite_url,
                  model=ScriptedChatModel([turn(call("_login", args, "c1")), "done"]))
    first = agent.generate("log in")
    assert first.finish_reason == "suspended"
    edited = {"user": "ann", "token": b"\xff\xfe"}
    with pytest.raises(InvalidApprovedArgsError):
        if door == "agent":
            agent.approve_tool_call_generate(run_id=first.run_id, args=edited)
        else:
            Inbox(sqlite_url, agents=[agent]).approve(first.pending_approvals[0].id,
                                                      decided_by="rev", args=edited)
    assert [p.status for p in agent.pending_approvals(run_id=first.run_id)] == ["pending"]


# ---------------------------------------------------------------------------- 1. run registry


def test_a_start_refused_as_bad_input_leaves_no_run_behind(sqlite_url: str) -> None:
    """Promise: bad input gets a typed error and changes nothing. A start with nothing to run
    (no message, a thread that does not exist) is refused only after the lease's transaction
    recorded the run: its id then names the thread for `snapshot`, `resume` and every deciding
    method, although no such run ever happened."""
    agent, _ = agent_with(["ok"], checkpointer=sqlite_url)
    stream = agent.stream(None, thread_id="no-such-thread")
    with pytest.raises(GraphkitError, match="nothing to run"):
        stream.result()
    assert agent._storage.ledger.run(stream.run_id) is None
    with pytest.raises(SnapshotNotFoundError):
        agent.snapshot(run_id=stream.run_id)


def test_a_run_known_only_to_the_store_cannot_be_redirected_by_a_store_writer(
        sqlite_url: str) -> None:
    """The registry left the store so that whoever can write the store (a LangGraph server's
    clients) cannot point a run id at another thread. Runs recorded by earlier versions are
    still looked up in the store, and only there: never copied into the ledger, never checked
    against the thread's checkpoints (which name their run). A store writer who rewrites such
    an entry makes `approve_tool_call(run_id=...)` decide, and run, another thread's call."""
    runs_namespace = ("graphkit", "runs")  # where earlier versions recorded run ids
    def pay(amount: int, id: str) -> Any:
        return turn(call("pay", {"amount": amount, "payee": {"name": "x"}}, id))

    agent, ran = agent_with([pay(10, "small"), "done"], checkpointer=sqlite_url, name="ops")
    big_agent, _ = agent_with([pay(999_999, "big"), "done"], ran, checkpointer=sqlite_url,
                              name="ops")
    small = agent.generate("pay 10")
    big = big_agent.generate("pay a lot")
    assert small.finish_reason == big.finish_reason == "suspended"
    # `small` as an earlier graphkit recorded it: in the store, not in the ledger.
    ledger = agent._storage.ledger
    ledger._sql.execute("DELETE FROM graphkit_runs WHERE run_id = ?", (small.run_id,))
    store = agent._storage.store
    store.put(runs_namespace, small.run_id, {"thread_id": small.thread_id, "agent": "ops"})
    assert agent.pending_approvals(run_id=small.run_id)[0].args["amount"] == 10
    # A store writer points it at the other thread.
    store.put(runs_namespace, small.run_id, {"thread_id": big.thread_id, "agent": "ops"})
    with contextlib.suppress(GraphkitError):
        agent.approve_tool_call_generate(run_id=small.run_id)
    assert ("pay", {"amount": 999_999, "payee": {"name": "x"}}) not in ran.ran


class _Proxy:
    """A TCP proxy to PostgreSQL that, once `stall()`ed, accepts new connections and never
    answers them (a pooler with a full pool, a half-open network path); connections made
    before keep working."""

    def __init__(self, port: int) -> None:
        import socket

        self.target = port
        self.stalled = False
        self.sockets: list[Any] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self.stalled = True

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(client)
            if self.stalled:
                continue  # held open, never read, never answered
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: Any, sink: Any) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
def stalling_proxy(postgres_url: str) -> Iterator[tuple[_Proxy, str]]:
    port = int(postgres_url.rsplit(":", 1)[1].split("/", 1)[0])
    proxy = _Proxy(port)
    try:
        yield proxy, postgres_url.replace(f":{port}/", f":{proxy.port}/")
    finally:
        proxy.close()


def test_a_renewal_connection_that_never_opens_does_not_stall_every_lease_of_the_process(
        stalling_proxy: tuple[_Proxy, str], short_leases: float, tmp_path: Any) -> None:
    """Promise: a run holds its thread (and a running call its claim) while it advances. One
    daemon thread renews every lease of the process. Its first renewal for a PostgresSaver on
    one connection now opens a new connection, with no connect timeout: when new connections
    hang (a session pooler whose pool is full, a half-open network path) while the saver's
    own connection works, the keeper hangs there and no lease of the process is renewed, a
    SQLite agent's included: each lapses, and another process may take the thread or run a
    long call again."""
    proxy, url = stalling_proxy
    saver = _single_connection_saver(url)
    try:
        agent, _ = agent_with(["ok"], checkpointer=saver, name="billing")
        elsewhere = ledger_module.Ledger.sqlite(str(tmp_path / "other.db"))
        proxy.stall()
        with agent._storage.ledger.lease("pg-thread"), elsewhere.lease("sqlite-thread"):
            time.sleep(short_leases * 2.5)
            assert _lease_expiry(elsewhere, "sqlite-thread") > time.time(), (
                "the SQLite lease lapsed while its holder still ran")
    finally:
        proxy.close()
        saver.conn.close()


def test_a_renewal_past_a_held_lock_gives_up_in_bounded_time_when_no_connection_opens(
        stalling_proxy: tuple[_Proxy, str]) -> None:
    """The saver's lock is held (a checkpoint list read lazily) and new connections hang: a
    renewal gives up after its lock wait and its connect timeout (the keeper tries again on
    its next round) instead of blocking the keeper, which renews every lease of the process."""
    from graphkit import _storage

    proxy, url = stalling_proxy
    saver = _single_connection_saver(url)
    try:
        agent, _ = agent_with(["ok"], checkpointer=saver, name="billing")
        ledger = agent._storage.ledger
        with ledger.lease("t1") as owner:
            proxy.stall()
            held, release = threading.Event(), threading.Event()

            def hold() -> None:
                with saver.lock:
                    held.set()
                    release.wait(20)

            threading.Thread(target=hold, daemon=True).start()
            assert held.wait(5)
            started = time.monotonic()
            renewer = threading.Thread(target=_renew_as_the_keeper_does,
                                       args=(ledger, "t1", owner), daemon=True)
            renewer.start()
            renewer.join(_storage.APART_WAIT + _storage.APART_CONNECT + 5)
            release.set()
            assert not renewer.is_alive(), "the renewal blocked the lease keeper"
            assert time.monotonic() - started >= _storage.APART_WAIT
    finally:
        proxy.close()
        saver.conn.close()
