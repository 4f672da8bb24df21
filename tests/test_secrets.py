"""Secret arguments are masked in every view and channel, while the tool receives the real
value and the digest covers it (`graphkit._secrets`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import SecretStr
from starlette.testclient import TestClient

from graphkit import Agent, Inbox, Webhook, _html, create_tool
from graphkit.cli import main
from graphkit.testing import ScriptedChatModel
from graphkit.types import args_digest
from graphkit.web import create_app
from tests.helpers import call, turn

KEY = "sk-live-51HxQ"
MASK = "**********"


def _agent(url: str, used: list[str]) -> Agent:
    @create_tool(needs_approval=True, approval_prompt="Charge {{amount}}?")
    def charge(amount: int, api_key: SecretStr) -> str:
        """Charge a card with the payment provider's key."""
        used.append(api_key.get_secret_value())
        return f"charged {amount}"

    return Agent(name="billing", tools=[charge], checkpointer=url,
                 notify=[Webhook("http://127.0.0.1:9/hooks", secret="s")],
                 model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                     call("charge", {"amount": 25, "api_key": KEY}, f"c{len(m)}"))))


def test_a_secret_argument_is_masked_everywhere_and_reaches_the_tool(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    used: list[str] = []
    agent = _agent(url, used)
    first = agent.generate("charge it")
    (pending,) = first.pending_approvals
    seen: dict[str, str] = {}
    # the API's pending approval, and the interrupt value every LangGraph client reads
    assert pending.args == {"amount": 25, "api_key": MASK}
    assert pending.args_digest == args_digest({"amount": 25, "api_key": KEY})  # covers it
    cfg = {"configurable": {"thread_id": first.thread_id}}
    seen["interrupt"] = json.dumps([i.value for i in agent.graph.get_state(cfg).interrupts])
    # the inbox, the CLI, the notebook's card, the web card
    seen["inbox"] = json.dumps([p.to_dict() for p in Inbox(url).pending()])
    printed: list[str] = []
    main(["show", pending.id, "--db", url], out=printed.append)
    main(["inbox", "--db", url, "--json"], out=printed.append)
    seen["cli"] = "\n".join(printed)
    seen["notebook"] = _html.card(pending)
    client = TestClient(create_app(url, authenticate={"t": "cfo"}, agents=[agent]))
    nonce = re.search(r"name='login' value='([0-9a-f]+)'", client.get("/login").text)
    assert nonce is not None
    client.post("/login", data={"token": "t", "login": nonce.group(1)})
    seen["web"] = client.get(f"/approvals/{pending.id}").text
    # decided and run; then a stream's chunks; the audit, the webhooks' outbox
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    second = agent.stream("and again", thread_id=first.thread_id)
    seen["stream"] = json.dumps([c.payload for c in second], default=str)
    seen["audit"] = json.dumps(Inbox(url).audit(thread_id=first.thread_id))
    rows = agent._storage.ledger._sql.query("SELECT payload FROM graphkit_outbox")
    seen["webhooks"] = "\n".join(str(r[0]) for r in rows)
    assert rows
    for where, text in seen.items():
        assert KEY not in text, f"the secret is shown in {where}"
    assert MASK in seen["interrupt"] and MASK in seen["web"]
    assert used == [KEY]  # the tool got the real value
