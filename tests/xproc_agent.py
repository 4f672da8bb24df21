"""An agent driven from the command line, for tests that pause in one process and decide in
another. Every real tool execution and predicate call is appended to a log file, so the test
can count them across processes.

    python -m tests.xproc_agent DB LOG start
    python -m tests.xproc_agent DB LOG approve RUN_ID TOOL_CALL_ID
    python -m tests.xproc_agent DB LOG decline RUN_ID TOOL_CALL_ID
    python -m tests.xproc_agent DB LOG wx-start
    python -m tests.xproc_agent DB LOG wx-resume RUN_ID CITY
    python -m tests.xproc_agent DB LOG race-agent RUN_ID TOOL_CALL_ID START_AT
    python -m tests.xproc_agent DB LOG race-inbox APPROVAL_ID START_AT
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from pydantic import BaseModel

from graphkit import Agent, ToolContext, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, turn


def build(db: str, log: str) -> Agent:
    def note(event: str, **data: Any) -> None:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": event, **data}) + "\n")

    def destructive(args: dict[str, Any]) -> bool:
        note("predicate", command=args["command"])
        return args["command"].startswith("rm")

    @create_tool(needs_approval=destructive, approval_prompt="Run {{command}}?")
    def bash(command: str) -> str:
        """Run a shell command."""
        note("ran", command=command)
        return f"ran {command}"

    script = [
        turn(call("bash", {"command": "ls"}, "c1"), call("bash", {"command": "rm -r old"}, "c2"),
             call("bash", {"command": "rm -r tmp"}, "c3")),
        "Finished.",
    ]
    return Agent(name="ops", model=ScriptedChatModel(script), tools=[bash], checkpointer=db)


class City(BaseModel):
    city: str


def build_weather(db: str, log: str) -> Agent:
    @create_tool(resume_schema=City)
    def weather(ctx: ToolContext) -> str:
        """Fetch the weather for a city."""
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": "weather", "resume": str(ctx.resume_data)}) + "\n")
        if ctx.resume_data is None:
            return ctx.suspend({"message": "Which city?"})
        return f"{ctx.resume_data.city}: sunny"

    script = [turn(call("weather", {}, "w1")), "Sunny."]
    return Agent(name="wx", model=ScriptedChatModel(script), tools=[weather], checkpointer=db)


def build_supervisor(db: str, log: str) -> Agent:
    @create_tool(name="find-user", needs_approval=True)
    def find_user(userId: str) -> str:
        """Finds user by ID in the database."""
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": "ran", "command": f"find {userId}"}) + "\n")
        return f"user {userId}: John"

    data_agent = Agent(name="data_agent", description="Handles user lookups", tools=[find_user],
                       model=ScriptedChatModel([turn(call("find-user", {"userId": "7"}, "fu7")),
                                                "Found John."]))
    return Agent(name="supervisor", agents={"data_agent": data_agent}, checkpointer=db,
                 model=ScriptedChatModel([turn(call("data_agent", {"task": "find 7"}, "d1")),
                                          "User 7 is John."]))


def race(agent: Agent, db: str, action: str, rest: list[str]) -> None:
    """Wait for the agreed moment, then decide; print whether this process won."""
    import time

    from graphkit import ApprovalAlreadyResolvedError, Inbox

    start_at = float(rest[-1])
    inbox = Inbox(db) if action == "race-inbox" else None
    time.sleep(max(0.0, start_at - time.time()))
    try:
        if inbox is not None:
            inbox.approve(rest[0], decided_by=f"proc-{os.getpid()}")
        else:
            agent.approve_tool_call_generate(run_id=rest[0], tool_call_id=rest[1],
                                             decided_by=f"proc-{os.getpid()}")
        print(json.dumps({"outcome": "won"}))
    except ApprovalAlreadyResolvedError as exc:
        print(json.dumps({"outcome": "lost", "error": str(exc)}))


def main(argv: list[str]) -> None:
    db, log, action, *rest = argv
    if action.startswith("race-"):
        race(build(db, log), db, action, rest)
        return
    if action.startswith("wx-"):
        agent = build_weather(db, log)
    elif action.startswith("sup-"):
        agent = build_supervisor(db, log)
        action = action.removeprefix("sup-")
    else:
        agent = build(db, log)
    if action == "wx-start":
        result = agent.generate("weather?")
    elif action == "wx-resume":
        result = agent.resume_generate({"city": rest[1]}, run_id=rest[0])
    elif action == "start":
        result = agent.generate("clean up")
    elif action == "approve":
        result = agent.approve_tool_call_generate(run_id=rest[0], tool_call_id=rest[1],
                                                  decided_by="proc")
    elif action == "decline":
        result = agent.decline_tool_call_generate(run_id=rest[0], tool_call_id=rest[1],
                                                  decided_by="proc", comment="no")
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps({
        "run_id": result.run_id,
        "finish_reason": result.finish_reason,
        "pending": [p.tool_call_id for p in result.pending_approvals if p.status == "pending"],
        "text": result.text,
    }))


if __name__ == "__main__":
    main(sys.argv[1:])
