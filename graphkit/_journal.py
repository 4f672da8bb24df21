"""What the approval gate tells the ledger after each pass: which approvals and suspensions
its run now waits on (the inbox lists these), and its tools' schemas.

The marks live in the ledger (`graphkit._ledger._waiting`), beside the approvals themselves,
where a LangGraph server's clients cannot write: there is no second copy for a door to trust.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from graphkit._approvals import waiting_records
from graphkit._ledger import Clearance, Ledger
from graphkit._state import TurnPlan

__all__ = ["GateJournal"]

_SCHEMAS_WRITTEN: weakref.WeakKeyDictionary[Ledger, set[tuple[str, ...]]] = (
    weakref.WeakKeyDictionary())


class GateJournal:
    """The approval gate's marks in the ledger during one pass: what its run waits on."""

    def __init__(self, ledger: Ledger, *, thread_id: str, schemas: dict[str, dict[str, Any]],
                 scope: str = "", agent_path: Sequence[str] = ()) -> None:
        self.ledger = ledger
        self.agent_path = list(agent_path)
        self.thread_id = thread_id
        self.schemas = schemas
        self.scope = scope
        """The graph's checkpoint namespace: one agent's plans in one thread (a subagent's
        delegation has its own)."""
        self._run: list[tuple[str | None, dict[str, Any] | None]] = []

    @property
    def run_id(self) -> str | None:
        """The run this pass files what it records under: the thread's current run, the last
        its (top) agent started on it, as the ledger recorded (None: it recorded none, as for
        a LangGraph server's threads). Never the state's word: a client who can write the
        state would file a later run's calls under an earlier run, whose decisions may take
        them. Read once a pass (with the turn, `known_run`, where the pass reads that first)."""
        return self._current()[0]

    @property
    def run_options(self) -> dict[str, Any] | None:
        """The options the request of the thread's current run recorded with it (None: it
        recorded none, or there is no run: a LangGraph server's)."""
        return self._current()[1]

    def _current(self) -> tuple[str | None, dict[str, Any] | None]:
        if not self._run:
            agent = self.agent_path[0] if self.agent_path else ""
            self._run.append(self.ledger.current_run_and_options(self.thread_id, agent))
        return self._run[0]

    @property
    def run_known(self) -> bool:
        return bool(self._run)

    def known_run(self, runs: Sequence[tuple[str, dict[str, Any] | None]]) -> None:
        """The thread's current run as a read of this pass found it (`turn_and_queue`)."""
        self._run[:] = [runs[0] if runs else (None, None)]

    def sync(self, old: TurnPlan | None, new: TurnPlan, answered: set[str], *,
             save: bool = False, cleared: Mapping[str, Clearance] | None = None) -> None:
        """Mark what the run waits on after this pass, and unmark what it no longer does;
        with `save`, the plan `new` is recorded too, and with `cleared` the approvals the pass
        lets run, in the same write (`Ledger.record_pass`)."""
        waiting = {r["id"] for r in waiting_records(new, answered) if r["status"] == "pending"}
        marks: dict[str, int] = {}
        done: set[str] = set()
        for index, call in enumerate(new["calls"]):
            for record in (call["approval"], call["suspension"]):
                if record is not None:
                    self._schema(record["tool_name"])
                    if record["id"] in waiting:
                        marks[record["id"]] = index
                    else:
                        done.add(record["id"])
        if old is not None and old["ai_message_id"] == new["ai_message_id"]:
            done |= {c["suspension"]["id"] for c in old["calls"]
                     if c["suspension"] is not None and c["suspension"]["id"] not in marks}
        new_turn = old is None or old["ai_message_id"] != new["ai_message_id"]
        strays = new_turn and bool(self.agent_path)
        if save or cleared:
            self.ledger.record_pass(self.thread_id, self.agent_path, run_id=self.run_id,
                                    scope=self.scope, waiting=marks, done=done, strays=strays,
                                    turn=new if save else None, cleared=cleared)
        else:
            self.ledger.mark_waiting(self.thread_id, self.agent_path, run_id=self.run_id,
                                     scope=self.scope, waiting=marks, done=done, strays=strays)

    def _schema(self, tool_name: str) -> None:
        """Keep the tool's schemas once per agent and tool, written once per process."""
        key = (*self.agent_path, tool_name)
        written = _SCHEMAS_WRITTEN.setdefault(self.ledger, set())
        if key not in written:
            self.ledger.save_tool_schema(self.agent_path, tool_name,
                                         self.schemas.get(tool_name) or {})
            written.add(key)
