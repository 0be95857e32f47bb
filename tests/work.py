"""Count the work a block does, for tests that must show a hostile input is refused early.

A clock cannot say this in a test: on a busy 2-core machine a quick refusal can take seconds. The number of
Python and C-level function calls made does not depend on the machine's load, and it grows with any loop that
walks the input in Python, which is what a slow refusal would be.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Work:
    calls: int = 0


@contextmanager
def counted() -> Iterator[Work]:
    """`with counted() as work:`; afterwards (also when the block raised) `work.calls` is the calls it made."""
    work = Work()

    def profile(frame, event, arg) -> None:
        if event in ("call", "c_call"):
            work.calls += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield work
    finally:
        sys.setprofile(previous)
