"""User messages queued for after a turn's answers, and signed-out web sessions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage

from graphkit._ledger._base import LedgerBase
from graphkit._ledger._sql import Tx, dumps, loads

__all__ = ["Messages", "Queued", "queued", "queued_id", "same_queued"]

ENDED_KEPT_SECONDS = 86_400.0
"""How long past its cookie's expiry a signed-out session is remembered: more than any web
process's clock may lag the database's."""


class Queued(NamedTuple):
    """A user message queued for after a turn's answers."""

    ai_message_id: str
    message: dict[str, Any]
    """Serialised (`messages_to_dict`), with its id."""
    delivered_at: str | None
    """The checkpoint whose step appended it to the conversation (None: not yet). It stays
    queued until a checkpoint holding it is written: a crash before then replays that step,
    from that checkpoint, which appends it again; any other step leaves it out."""


def queued(rows: Iterable[Sequence[Any]]) -> list[Queued]:
    """Queue rows (AI message id, stored message, delivered at) as the ledger hands them."""
    return [Queued(str(r[0]), loads(r[1]) or {}, None if r[2] is None else str(r[2]))
            for r in rows]


def queued_id(entry: Any) -> str | None:
    """The id of the message a queue entry (a serialised message) holds, read without parsing
    it; None for an entry not of that shape."""
    data = entry.get("data") if isinstance(entry, Mapping) else None
    found = data.get("id") if isinstance(data, Mapping) else None
    return found if isinstance(found, str) else None


def same_queued(entry: Mapping[str, Any] | None, message: BaseMessage) -> bool:
    """Whether a queue entry (None: there is none) is `message` as queued: a message sent
    again (a client's retry) is the same one, queued once; another under its id is not."""
    if entry is None:
        return True
    data = entry.get("data")
    return (isinstance(data, Mapping) and entry.get("type") == message.type
            and data.get("content") == message.content)


class Messages(LedgerBase):
    """User messages queued for after a turn's answers, and signed-out web sessions."""

    def enqueue(self, thread_id: str, agent: str, ai_message_id: str,
                messages: Sequence[Mapping[str, Any]]) -> None:
        """Keep user messages (serialised, with ids) queued for after the turn of
        `ai_message_id`; a message already queued is not queued twice."""
        if any(queued_id(m) for m in messages):
            with self._sql.transaction() as tx:
                self._queue(tx, thread_id, agent, ai_message_id, messages)

    def _queue(self, tx: Tx, thread_id: str, agent: str, ai_message_id: str,
               messages: Sequence[Mapping[str, Any]], *, vouched: bool = False) -> None:
        """Queue the messages; `vouched`: the Agent API's own (`take_message`), which may
        answer a suspended tool as the process once (`take_vouched`). A message queued
        before under its id keeps its row: a client's never becomes the API's."""
        for m in messages:
            if message_id := queued_id(m):
                tx.execute("INSERT INTO graphkit_queue (thread_id, agent, ai_message_id, "
                           "message_id, message, vouched) VALUES (?, ?, ?, ?, ?, ?) ON "
                           "CONFLICT (thread_id, agent, message_id) DO NOTHING",
                           (thread_id, agent, ai_message_id, message_id, dumps(dict(m)),
                            "api" if vouched else None))

    def take_vouched(self, thread_id: str, agent: str, message_ids: Sequence[str]) -> bool:
        """Whether these messages are each the Agent API's own, queued by it (`_queue`), and
        none was taken so yet; taken now. A gate answers a suspended tool as the process only
        with these: a client's raw resume in the API's shape got its own message queued by
        a first pass, then passed as the API's (helper-126), and the API's answer to one
        question answered the tool's next one (it stayed queued)."""
        ids = list(dict.fromkeys(message_ids))
        if not ids or "" in ids:
            return False
        vouched = (f"thread_id = ? AND agent = ? AND vouched IS NOT NULL AND message_id IN "
                   f"({', '.join('?' for _ in ids)})")
        params = (thread_id, agent, *ids)
        # (all or none: each of them is taken only where every one of them is vouched for)
        return self._sql.execute(
            f"UPDATE graphkit_queue SET vouched = NULL WHERE {vouched} AND (SELECT COUNT(*) "
            f"FROM graphkit_queue WHERE {vouched}) = ?", (*params, *params, len(ids))
        ) == len(ids)

    def queue_of(self, thread_id: str, agent: str) -> list[tuple[str, dict[str, Any]]]:
        """(turn's AI message id, serialised message) of what waits in the queue, in order
        (not yet delivered)."""
        return [(q.ai_message_id, q.message) for q in self.queue_rows(thread_id, agent)
                if q.delivered_at is None]

    def queue_rows(self, thread_id: str, agent: str) -> list[Queued]:
        """Every message of the agent's queue, delivered or not, in order."""
        rows = self._sql.query("SELECT ai_message_id, message, delivered_at FROM "
                               "graphkit_queue WHERE thread_id = ? AND agent = ? ORDER BY seq",
                               (thread_id, agent))
        return queued(rows)

    def deliver(self, thread_id: str, agent: str, message_ids: Iterable[str], step: str
                ) -> None:
        """Note that the step run from checkpoint `step` appended these queued messages."""
        ids = list(dict.fromkeys(message_ids))
        if ids:
            marks = ", ".join("?" for _ in ids)
            self._sql.execute(f"UPDATE graphkit_queue SET delivered_at = ? WHERE thread_id = ? "
                              f"AND agent = ? AND message_id IN ({marks})",
                              (step, thread_id, agent, *ids))

    def dequeue(self, thread_id: str, agent: str, message_ids: Iterable[str]) -> None:
        """Forget queued messages that reached the conversation (in a written checkpoint)."""
        ids = list(dict.fromkeys(message_ids))
        if ids:
            marks = ", ".join("?" for _ in ids)
            self._sql.execute(f"DELETE FROM graphkit_queue WHERE thread_id = ? AND agent = ? "
                              f"AND message_id IN ({marks})", (thread_id, agent, *ids))

    def end_session(self, nonce: str, expires_at: float) -> None:
        """Remember a signed-out session until it would have expired anyway, by any web
        process's clock: its cookie's expiry is judged by the clock of the process reading it,
        so a row forgotten by the database's clock once that expiry passed let a process whose
        clock lagged take the cookie back (helper-58). Rows stay a day past it."""
        self._sql.execute("INSERT INTO graphkit_ended_sessions (nonce, expires_at) "
                          "VALUES (?, ?) ON CONFLICT (nonce) DO NOTHING", (nonce, expires_at))
        self._sql.execute(f"DELETE FROM graphkit_ended_sessions WHERE expires_at < "
                          f"{self._sql.now} - ?", (ENDED_KEPT_SECONDS,))

    def session_ended(self, nonce: str) -> bool:
        return bool(self._sql.query(
            "SELECT 1 FROM graphkit_ended_sessions WHERE nonce = ?", (nonce,)))
