"""supervisor -> data_agent -> find-user, and supervisor -> ops_team -> audit_agent."""

from graphkit.examples import supervisor_agent

agent = supervisor_agent()
graph = agent.graph
