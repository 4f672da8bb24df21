"""PostgreSQL storage (langgraph-checkpoint-postgres), imported only when a URL asks for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphkit.storage import Storage

MISSING = (
    "checkpointer {url!r} needs PostgreSQL support: pip install 'graphkit[postgres]' "
    "(langgraph-checkpoint-postgres and psycopg)"
)


def open_postgres(url: str) -> Storage:
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError as exc:
        raise ImportError(MISSING.format(url=url)) from exc
    raise NotImplementedError("PostgreSQL storage arrives with the inbox issue")
