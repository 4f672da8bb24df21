"""Delivery of the outbox's notifications to webhooks: cursors, claims, retries, pruning."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from graphkit._ledger._base import LedgerBase
from graphkit._ledger._rows import (
    OutboxEvent,
)
from graphkit._ledger._sql import dumps, loads
from graphkit._ledger._values import unstowed

__all__ = ["Notifications"]


class Notifications(LedgerBase):
    """Delivery of the outbox's notifications to webhooks: cursors, claims, retries, pruning."""

    def enable_notify(self, targets: Iterable[str], *, review_url: str | None = None) -> None:
        """Turn the outbox on for every process that shares this database (each sees it within
        `NOTIFY_RECHECK` seconds; this process at once), and register webhook targets: a
        target is sent the events recorded from its first registration on."""
        since = self.now()
        with self._sql.transaction() as tx:
            value = dumps({"review_url": review_url})
            tx.execute("INSERT INTO graphkit_meta (key, value) VALUES ('notify', ?) "
                       + ("ON CONFLICT (key) DO UPDATE SET value = excluded.value" if review_url
                          else "ON CONFLICT (key) DO NOTHING"), (value,))
            for target in targets:
                for key in (f"notify.cursor.{target}", f"notify.since.{target}"):
                    tx.execute("INSERT INTO graphkit_meta (key, value) VALUES (?, ?) "
                               "ON CONFLICT (key) DO NOTHING", (key, dumps({"since": since})))
        LedgerBase._notify_epoch += 1

    def notify_cursor(self, target: str) -> float | None:
        """Events recorded before this moment have their delivery to `target` opened."""
        return self._moment(f"notify.cursor.{target}")

    def notify_since(self, target: str) -> float | None:
        """When `target` was first registered: it is sent the events recorded from then on
        (None for a target registered before this was kept: its cursor stands in)."""
        return self._moment(f"notify.since.{target}")

    def _moment(self, key: str) -> float | None:
        rows = self._sql.query("SELECT value FROM graphkit_meta WHERE key = ?", (key,))
        value = loads(rows[0][0]) if rows else None
        return float(value["since"]) if isinstance(value, dict) and "since" in value else None

    def save_notify_cursor(self, target: str, since: float) -> None:
        self._sql.execute("UPDATE graphkit_meta SET value = ? WHERE key = ?",
                          (dumps({"since": since}), f"notify.cursor.{target}"))

    def open_deliveries(self, target: str, since: float) -> float:
        """Open a delivery to `target` for each event recorded since `since` that has none;
        returns the database's clock when it looked."""
        new = ("FROM graphkit_outbox o WHERE o.created_at >= ? AND NOT EXISTS (SELECT 1 FROM "
               "graphkit_deliveries d WHERE d.event_id = o.event_id AND d.target = ?)")
        # Read first: an idle round takes no write lock.
        moment, found = self._sql.query(
            f"SELECT {self._sql.now}, EXISTS (SELECT 1 {new})", (since, target))[0]
        if found:
            self._sql.execute(
                "INSERT INTO graphkit_deliveries (event_id, target, attempts, next_at) "
                f"SELECT o.event_id, ?, 0, o.created_at {new} "
                "ON CONFLICT (event_id, target) DO NOTHING", (target, since, target))
        return float(moment)

    def claim_deliveries(self, target: str, owner: str, *, max_attempts: int, lease: float,
                         limit: int) -> list[OutboxEvent]:
        """Claim due, undelivered deliveries to `target` (oldest first), counting the attempt:
        the claim is a lease (`next_at` moves past it), so a claimer that dies is retried."""
        now = self._sql.now
        due = ("FROM graphkit_deliveries WHERE target = ? AND delivered_at IS NULL "
               f"AND next_at IS NOT NULL AND next_at <= {now} AND attempts < ?")
        if not self._sql.query(f"SELECT 1 {due} LIMIT 1", (target, max_attempts)):
            return []  # an idle round takes no write lock
        rows = self._sql.query(
            f"UPDATE graphkit_deliveries SET attempts = attempts + 1, next_at = {now} + ?, "
            "claimed_by = ? WHERE target = ? AND event_id IN (SELECT event_id "
            f"{due} ORDER BY next_at LIMIT ?{self._sql.skip_locked}) "
            "RETURNING event_id, attempts",
            (lease, owner, target, target, max_attempts, limit))
        if not rows:
            return []
        attempts = {str(r[0]): int(r[1]) for r in rows}
        marks = ", ".join("?" for _ in attempts)
        events = self._sql.query(
            "SELECT event_id, type, created_at, payload FROM graphkit_outbox "
            f"WHERE event_id IN ({marks}) ORDER BY created_at", tuple(attempts))
        return [OutboxEvent(event_id=str(r[0]), type=str(r[1]), created_at=float(r[2]),
                            payload=unstowed(self._sql.query, r[3]) or {},
                            attempts=attempts[str(r[0])])
                for r in events]

    def unclaim(self, event_ids: Sequence[str], target: str, owner: str) -> None:
        """Give back deliveries `owner` claimed and never attempted (its dispatcher stopped):
        due again at once, the attempt not counted."""
        if event_ids:
            marks = ", ".join("?" for _ in event_ids)
            self._sql.execute(
                f"UPDATE graphkit_deliveries SET attempts = attempts - 1, next_at = "
                f"{self._sql.now}, claimed_by = NULL WHERE target = ? AND claimed_by = ? "
                f"AND delivered_at IS NULL AND event_id IN ({marks})",
                (target, owner, *event_ids))

    def delivered(self, event_id: str, target: str) -> None:
        self._sql.execute(
            f"UPDATE graphkit_deliveries SET delivered_at = {self._sql.now}, last_error = NULL, "
            "claimed_by = NULL WHERE event_id = ? AND target = ? AND delivered_at IS NULL",
            (event_id, target))

    def delivery_failed(self, event_id: str, target: str, owner: str, *, error: str,
                        retry_in: float | None) -> None:
        """Record a failed attempt; retry in `retry_in` seconds, or never (None)."""
        next_at = f"{self._sql.now} + ?" if retry_in is not None else "?"
        self._sql.execute(
            f"UPDATE graphkit_deliveries SET next_at = {next_at}, last_error = ?, "
            "claimed_by = NULL WHERE event_id = ? AND target = ? AND claimed_by = ? "
            "AND delivered_at IS NULL", (retry_in, error, event_id, target, owner))

    def next_delivery(self, targets: Mapping[str, int]) -> float | None:
        """Seconds until the next delivery to one of `targets` (target -> max attempts) is due
        (0 or less: due now); None when none is left to attempt."""
        waits = []
        for target, max_attempts in targets.items():
            rows = self._sql.query(
                f"SELECT MIN(next_at) - {self._sql.now} FROM graphkit_deliveries "
                "WHERE target = ? AND delivered_at IS NULL AND next_at IS NOT NULL "
                "AND attempts < ?", (target, max_attempts))
            if rows and rows[0][0] is not None:
                waits.append(float(rows[0][0]))
        return min(waits) if waits else None

    def deliveries(self, event_id: str | None = None) -> list[dict[str, Any]]:
        """Delivery state, oldest event first (for operators and tests)."""
        clause, params = ("WHERE d.event_id = ? ", (event_id,)) if event_id else ("", ())
        rows = self._sql.query(
            "SELECT d.event_id, o.type, d.target, d.attempts, d.next_at, d.delivered_at, "
            "d.last_error FROM graphkit_deliveries d JOIN graphkit_outbox o "
            f"ON o.event_id = d.event_id {clause}ORDER BY o.created_at, d.target", params)
        keys = ("event_id", "type", "target", "attempts", "next_at", "delivered_at",
                "last_error")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def prune_outbox(self, older_than: float) -> int:
        """Forget events recorded more than `older_than` seconds ago that have no delivery
        left to attempt."""
        cutoff = f"{self._sql.now} - ?"
        pending = ("SELECT 1 FROM graphkit_deliveries d WHERE d.event_id = o.event_id "
                   "AND d.delivered_at IS NULL AND d.next_at IS NOT NULL")
        with self._sql.transaction() as tx:
            tx.execute(
                "DELETE FROM graphkit_deliveries WHERE event_id IN (SELECT o.event_id FROM "
                f"graphkit_outbox o WHERE o.created_at < {cutoff} AND NOT EXISTS ({pending}))",
                (older_than,))
            return tx.execute(
                f"DELETE FROM graphkit_outbox AS o WHERE o.created_at < {cutoff} "
                f"AND NOT EXISTS ({pending})", (older_than,))
