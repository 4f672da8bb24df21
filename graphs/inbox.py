"""The reviewers' web inbox, mounted in the LangGraph server by langgraph.json under /inbox.

It reads what the served graphs wait on (the server's store, the ledger the served agents
share) and checks edits with their tools' own models. Reviewers sign in with a token from
GRAPHKIT_TOKENS (`'{"tok-1": "release-manager"}'`).
"""

from graphkit.web import server_app
from graphs.bash import agent as bash
from graphs.deploy import agent as deploy
from graphs.supervisor import agent as supervisor
from graphs.weather import agent as weather

app = server_app(agents=[deploy, bash, weather, supervisor])
