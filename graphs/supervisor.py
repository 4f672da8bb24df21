"""supervisor -> data_agent -> find-user, and supervisor -> ops_team -> audit_agent."""

from graphkit.examples import supervisor_agent

graph = supervisor_agent().graph
