"""The seed's deploy_service: asks "Send build {{version}} to prod?" before every rollout."""

from graphkit.examples import deploy_agent

agent = deploy_agent()
graph = agent.graph
