"""A tool that suspends to ask for the city; the next message resumes it."""

from graphkit.examples import weather_agent

agent = weather_agent()
graph = agent.graph
