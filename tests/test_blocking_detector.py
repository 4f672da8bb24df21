import asyncio

import pytest
from blockbuster import BlockingError

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, turn


def test_detector_catches_a_graphkit_blocking_call():
    from graphkit._ledger import Ledger
    led = Ledger.sqlite()
    async def main():
        led.run("x")
    with pytest.raises(BlockingError):
        asyncio.run(main())

@pytest.mark.parametrize("url", ["memory", "sqlite"])
def test_async_roundtrip(url, tmp_path):
    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"
    cp = "memory" if url == "memory" else f"sqlite:///{tmp_path}/x.db"
    agent = Agent(name="billing", tools=[pay], checkpointer=cp,
                  model=ScriptedChatModel([turn(call("pay", {"amount": 40}, "c1")), "done"]))
    async def main():
        first = await agent.agenerate("pay")
        done = await agent.aapprove_tool_call_generate(run_id=first.run_id, decided_by="cfo")
        return done.text
    assert asyncio.run(main()) == "done"
