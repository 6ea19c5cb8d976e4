"""A database server that does not answer ends the wait with an error, not a hang.

A server stopped (SIGSTOP, a frozen VM) or cut off behind a network that drops packets keeps its
TCP connections open: the kernel acknowledges what is sent, and libpq waits for an answer forever
(keepalives and ``tcp_user_timeout`` do not see it; ``statement_timeout`` is the server's own,
which is not running). So every psycopg2 connection of the process waits through :func:`_wait`
(psycopg2's wait callback: the driver's blocking calls become polls), which gives up after
:func:`dse.study.timeouts.db_answer_s` seconds without a byte from the server, connecting or
running a statement: the connection is closed (psycopg2 closes one whose wait failed) and the
error is an ``OperationalError`` that names the figure, which a worker waits out as it waits out a
restart, and a lone run says in one line. A server slow to answer but answering (a large read,
a pause of a few seconds) is not cut: the bound is on silence, not on a statement's length.

psycopg2 takes one wait callback for the whole process, so the bound is dse's connections' alone
(made as :class:`AnsweredConnection`, :func:`connect_args`): any other psycopg2 connection of the
process (a user's own, through the Python API: a long report query is silent until it is done)
waits through the callback installed before dse's (gevent's, say) or, with none, as dse's do
but without a bound. (With any callback installed psycopg2 refuses COPY and large objects on
every connection of the process: docs/reliability.md says so.)
"""

from __future__ import annotations

import functools
import selectors
from collections.abc import Callable
from typing import Any

from dse.study.timeouts import DB_ANSWER_ENV, db_answer_s

_before: list[Callable[[Any], None] | None] = [None]
"""The wait callback installed before :func:`_wait` (None: none), which other connections keep."""


def install() -> None:
    """Make every psycopg2 connection of this process wait through :func:`_wait` (idempotent): dse's
    within the bound, any other as before."""
    import psycopg2.extensions

    db_answer_s()  # a bad DSE_DB_ANSWER_S is said before any connection, not from inside the driver
    current = psycopg2.extensions.get_wait_callback()
    if current is not _wait:
        _before[0] = current
        psycopg2.extensions.set_wait_callback(_wait)


def connect_args() -> dict[str, Any]:
    """SQLAlchemy's ``connect_args`` for a dse connection to a PostgreSQL server: its waits are
    bounded (:func:`_wait`)."""
    return {"connection_factory": _answered()}


@functools.cache
def _answered() -> type[Any]:
    import psycopg2.extensions

    class AnsweredConnection(psycopg2.extensions.connection):  # type: ignore[misc]
        """A psycopg2 connection of dse's: a server silent past the bound is an error."""

    return AnsweredConnection


def _wait(conn: Any) -> None:
    """Poll ``conn`` until its operation is done; raise ``OperationalError`` when the server sends
    nothing for :func:`db_answer_s` seconds (psycopg2 then closes the connection). A connection
    not dse's waits through the callback installed before dse's, or here without a bound (its
    failure to connect named as libpq names it, as for dse's)."""
    import psycopg2
    import psycopg2.extensions as ext

    ours = isinstance(conn, _answered())
    if not ours and _before[0] is not None:
        _before[0](conn)
        return
    limit = db_answer_s() if ours else None
    with selectors.DefaultSelector() as sel:
        while True:
            failed = None
            try:
                state = conn.poll()
            except psycopg2.OperationalError as exc:
                if conn.status not in CONNECTING:
                    raise
                failed = f"{_server(conn)} failed: {exc}"
            if failed is not None:  # raised outside the except: the driver's line is this one alone
                raise psycopg2.OperationalError(failed)
            if state == ext.POLL_OK:
                return
            events = selectors.EVENT_READ if state == ext.POLL_READ else selectors.EVENT_WRITE
            sel.register(conn.fileno(), events)
            try:
                ready = sel.select(limit)
            finally:
                sel.unregister(conn.fileno())
            if not ready:
                raise psycopg2.OperationalError(
                    f"no answer from the database server within {limit:g} s, the bound {DB_ANSWER_ENV} sets"
                )


CONNECTING = (20, 21)
"""psycopg2's states of a connection being made (``CONN_STATUS_CONNECTING``, ``_DATESTYLE``)."""


def _server(conn: Any) -> str:
    """The server a connection goes to, as libpq's own connect errors name it (libpq leaves it out
    of a connection made in steps, as the wait callback makes them: "Connection refused" alone)."""
    host, port = conn.info.host, conn.info.port
    if str(host).startswith("/"):
        return f'connection to server on socket "{host}/.s.PGSQL.{port}"'
    return f'connection to server at "{host}", port {port}'
