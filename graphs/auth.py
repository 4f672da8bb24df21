"""The server's auth for a graphkit deployment: bearer tokens -> reviewer identities.

Name it in langgraph.json (the repo's own langgraph.json leaves it out so Studio works locally):

    "auth": {"path": "./graphs/auth.py:auth", "disable_studio_auth": true}

and give the tokens in the environment, e.g.
`GRAPHKIT_TOKENS='{"tok-rm": "release-manager", "tok-dev": "developer"}'`, and for private
threads (each its creator's and the reviewers') `GRAPHKIT_REVIEWERS=release-manager`. With
tokens set, requests without one get 401; `disable_studio_auth` also closes `langgraph dev`'s Studio
shortcut (`x-auth-scheme: langsmith`) at the door instead of in the handlers.
"""

from graphkit.server_auth import make_auth

auth = make_auth()
