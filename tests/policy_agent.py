"""An agent with an approvers policy, for the CLI's `--agent tests.policy_agent:billing`.

The same agent the tests build (`agent_with(pay_then_done, approvers=cfo_only)`), loaded by
the CLI so that its tools and policy judge a decision where it is made.
"""

from __future__ import annotations

from graphkit import Agent
from tests.helpers import agent_with, cfo_only, pay_then_done


def billing(url: str) -> Agent:
    agent, _ran = agent_with(pay_then_done, checkpointer=url, approvers=cfo_only,
                             name="billing")
    return agent


def anyone(url: str) -> Agent:
    """`billing` under a policy that trusts every name (only a decision without one fails)."""
    agent, _ran = agent_with(pay_then_done, checkpointer=url,
                             approvers=lambda decided_by, pending: True, name="billing")
    return agent
