"""Files of one concern (issue 35): no Python file in ``cudacourse/`` is longer than 500 lines.

A file that grows past the limit is split along its concerns, not trimmed of its comments. A file listed in
``KNOWN_OVERSIZED`` may exceed it until it is split (the list is empty now); a listed file that fits fails the
test, so the list only shrinks.
"""

from __future__ import annotations

import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cudacourse"
LIMIT = 500

KNOWN_OVERSIZED: dict[str, str] = {}


def sizes() -> dict[str, int]:
    """Lines per Python file of the package, by path relative to ``cudacourse/``."""
    return {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_python_file_is_over_the_limit() -> None:
    over = {f: n for f, n in sizes().items() if n > LIMIT and f not in KNOWN_OVERSIZED}
    assert not over, f"files over {LIMIT} lines (split them along their concerns):\n" + "\n".join(
        f"  cudacourse/{f}: {n}" for f, n in sorted(over.items()))


def test_known_oversized_files_still_are_and_are_reported() -> None:
    have = sizes()
    fits = sorted(f for f in KNOWN_OVERSIZED if have.get(f, 0) <= LIMIT)
    assert not fits, f"these fit in {LIMIT} lines now (or are gone): remove them from KNOWN_OVERSIZED: {fits}"
    for f, why in KNOWN_OVERSIZED.items():
        warnings.warn(f"cudacourse/{f} has {have[f]} lines (> {LIMIT}), to split: {why}", UserWarning, stacklevel=1)
