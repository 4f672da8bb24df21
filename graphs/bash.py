"""A shell tool that asks only before rm, shutdown and mkfs (a per-call predicate)."""

from graphkit.examples import bash_agent

agent = bash_agent()
graph = agent.graph
