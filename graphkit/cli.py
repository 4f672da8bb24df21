"""The `graphkit` command line.

Errors print one line and exit non-zero; no tracebacks for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from graphkit.errors import GraphkitError
from graphkit.types import GenerateResult, PendingApproval

__all__ = ["main"]

DEMO_DB = "sqlite:///graphkit-demo.db"
DEMO_REQUEST = "Roll out build 1.4.2 of the payments service to production."

def review_card(pending: PendingApproval) -> str:
    """The review card a person sees: tool, arguments, prompt and defaults."""
    width = 64
    lines = [
        "+" + "-" * (width - 2) + "+",
        f"| {'APPROVAL NEEDED':<{width - 4}} |",
        f"| {'tool:     ' + pending.tool_name:<{width - 4}} |",
        f"| {'args:     ' + json.dumps(pending.args):<{width - 4}} |",
        f"| {'prompt:   ' + str(pending.metadata.get('prompt')):<{width - 4}} |",
        f"| {'defaults: ' + json.dumps(pending.metadata.get('defaults')):<{width - 4}} |",
        f"| {'agent:    ' + ' > '.join(pending.agent_path):<{width - 4}} |",
        f"| {'call id:  ' + pending.tool_call_id:<{width - 4}} |",
        "+" + "-" * (width - 2) + "+",
    ]
    return "\n".join(lines)

def _ask(prompt: str, read: Callable[[str], str]) -> str:
    try:
        return read(prompt).strip()
    except EOFError:
        return ""

def run_demo(
    *, yes: bool, db: str, out: Callable[[str], None] = print,
    read: Callable[[str], str] = input,
) -> GenerateResult:
    """The seed's deploy flow: pause for approval, show the card, decide, finish."""
    from graphkit.demo import deploy_agent

    agent = deploy_agent(checkpointer=db)
    out(f"user> {DEMO_REQUEST}")
    result = agent.generate(DEMO_REQUEST)
    while result.finish_reason == "suspended":
        out(f"\nrun {result.run_id} is paused; it is saved in {db} and can be decided later.")
        for pending in result.pending_approvals:
            out(review_card(pending))
            choice = "a" if yes else _ask("[a]pprove, [e]dit, [r]eject? ", read).lower()[:1]
            if choice == "e":
                raw = _ask(f"new arguments as JSON {json.dumps(pending.args)}: ", read)
                try:
                    args = json.loads(raw) if raw else pending.args
                except json.JSONDecodeError as exc:
                    out(f"not JSON ({exc}); rejecting instead")
                    args, choice = None, "r"
            if choice in ("a", "e"):
                result = agent.approve_tool_call_generate(
                    run_id=result.run_id, tool_call_id=pending.tool_call_id,
                    decided_by="demo-operator", comment="approved in the demo",
                    args=args if choice == "e" else None,
                )
                out(f"approved {pending.tool_call_id}")
            else:
                result = agent.decline_tool_call_generate(
                    run_id=result.run_id, tool_call_id=pending.tool_call_id,
                    decided_by="demo-operator", comment="rejected in the demo",
                )
                out(f"rejected {pending.tool_call_id}")
            break  # the result now holds whatever is pending next
    for message in result.messages:
        name = getattr(message, "name", None) or message.type
        if message.type == "tool":
            out(f"  tool {name}> {message.content}")
    out(f"agent> {result.text}")
    out(f"finish_reason: {result.finish_reason}")
    return result

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the offline deploy-approval demo on SQLite")
    demo.add_argument("--yes", action="store_true", help="approve without asking")
    demo.add_argument("--db", default=DEMO_DB, help=f"storage URL (default {DEMO_DB})")
    return parser

def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            run_demo(yes=args.yes, db=args.db)
            return 0
    except GraphkitError as exc:
        print(f"graphkit: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # one line, no traceback: the CLI's contract
        print(f"graphkit: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("graphkit: interrupted; the paused run stays in storage", file=sys.stderr)
        return 130
    return 2

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
