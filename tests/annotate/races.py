"""Playing out two transactions' order on PostgreSQL: a thread with a connection of its own (`Other`)."""

from __future__ import annotations

import threading

from django.db import connection, transaction

from tests.conftest import wait_for


class Other(threading.Thread):
    """`work()` on a connection of its own; its backend's pid, what it returned, or what it raised."""

    def __init__(self, work, *, hold: threading.Event | None = None):
        super().__init__(daemon=True)
        self.work, self.hold = work, hold
        self.pid = None
        self.result = self.error = None
        self.ready, self.done = threading.Event(), threading.Event()  # its work returned; it ended

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            with transaction.atomic():
                self.result = self.work()
                self.ready.set()
                if self.hold is not None:  # keep this transaction open until told
                    assert self.hold.wait(timeout=60), "never told to commit"
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.ready.set()
            self.done.set()
            connection.close()

    def waiting_for_a_lock(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [self.pid])
            row = cursor.fetchone()
        return row is not None and row[0] == "Lock"

    def blocked_or_done(self) -> bool:
        return self.done.is_set() or (self.pid is not None and self.waiting_for_a_lock())


def second_waits(first: Other, commit: threading.Event, second: Other, *, what: str) -> None:
    """Start `second` while `first` holds its transaction open (`hold=commit`), see it wait for a lock (or end),
    then let `first` commit; both joined, and neither failed."""
    second.start()
    wait_for(second.blocked_or_done, timeout=30, what=what)
    commit.set()
    first.join(timeout=30)
    second.join(timeout=30)
    assert first.error is None and second.error is None, (first.error, second.error)
