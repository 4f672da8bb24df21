"""PostgreSQL storage (langgraph-checkpoint-postgres), imported only when a URL asks for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphkit._storage import Storage

MISSING = (
    "checkpointer {url!r} needs PostgreSQL support: pip install 'graphkit-hitl[postgres]' "
    "(langgraph-checkpoint-postgres and psycopg)"
)
POOL_SIZE = 8


def open_postgres(url: str) -> Storage:
    """LangGraph's PostgresSaver and PostgresStore on one connection pool."""
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise ImportError(MISSING.format(url=url)) from exc

    from graphkit._ledger import Ledger
    from graphkit._storage import Storage, ThreadedAsyncSaver

    class ThreadedPostgresSaver(ThreadedAsyncSaver, PostgresSaver):
        """LangGraph's `PostgresSaver`, usable from async runs too."""

    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0,
                              "row_factory": dict_row}
    pool: ConnectionPool[Any] = ConnectionPool(url, min_size=1, max_size=POOL_SIZE,
                                               kwargs=kwargs, open=True)
    saver = ThreadedPostgresSaver(pool)
    saver.setup()
    store = PostgresStore(pool)
    store.setup()
    safe = url.split("@")[-1]
    return Storage(saver, store, f"postgresql {safe}", Ledger.postgres(pool), url)
