"""A heartbeat for long waits: no build or step may look like a hang (issue 34: a 26-44 s build of a torch-route
file was one silent wait). Used by ``cudacourse check``'s builds and the grader's warm-up builds."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

EVERY_S = 10.0


@contextlib.contextmanager
def heartbeat(say: Callable[[str], None], what: Callable[[], str], every: float = EVERY_S) -> Iterator[None]:
    """While the block runs, call ``say(f"... still {what()} ({n} s so far)")`` every ``every`` seconds; ``what``
    is asked each time (what is being built may change), and an empty answer says nothing."""
    stop = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not stop.wait(every):
            if text := what():
                say(f"... still {text} ({time.monotonic() - t0:.0f} s so far)")

    thread = threading.Thread(target=beat, daemon=True, name="heartbeat")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1.0)
