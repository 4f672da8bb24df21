"""A process that records approval events while its webhook receiver is down, then dies
(SIGKILL, nothing cleaned up): for the test that a later process delivers them.

    python -m tests.notify_agent DB WEBHOOK_URL SECRET

Pauses one run, tries once to deliver (the receiver is down), stops its dispatcher, pauses a
second run (recorded with no dispatcher running), prints the runs' approval ids as JSON and
kills itself.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from graphkit import Webhook
from tests.helpers import agent_with, call, turn


def main(db: str, url: str, secret: str) -> None:
    script = [turn(call("pay", {"amount": 1, "payee": {"name": "A"}}, "p1")), "done",
              turn(call("pay", {"amount": 2, "payee": {"name": "B"}}, "p2")), "done"]
    agent, _ = agent_with(script, checkpointer=db, name="billing",
                          notify=[Webhook(url, secret=secret, backoff=0.2)])
    assert agent.dispatcher is not None
    first = agent.generate("pay A")
    assert agent.dispatcher.flush(timeout=0) is False  # refused: retried later
    agent.dispatcher.stop()
    second = agent.generate("pay B")
    print(json.dumps([first.pending_approvals[0].id, second.pending_approvals[0].id]),
          flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(*sys.argv[1:4])
