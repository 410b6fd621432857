"""Writing generated files (the exercise stubs, the workflow templates) without ever losing a hand edit.

A generator may replace a file only when nobody edited it since it was generated. A file counts as
unedited when its bytes are

- what the generator would write now (nothing to do),
- what this checkout's generator last wrote there (a hash kept in ``.cudacourse-generated.json`` at the
  course root, ignored by git and kept by ``make clean``), or
- the *pristine* version the generator's caller names (for a stub: the stub derived from the solution as
  committed at git ``HEAD``; for a template: the template as committed at ``HEAD``).

Anything else is a learner's or an instructor's work: :func:`write_generated` then writes nothing at
all and raises :class:`EditedFilesError`, which lists the files and says how to force it. With
``force=True`` every edited file is first copied to ``.cudacourse-backups/<time>/<its path>``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

MANIFEST = ".cudacourse-generated.json"
BACKUPS = ".cudacourse-backups"


class EditedFilesError(RuntimeError):
    """A generator would overwrite files someone edited; nothing was written."""

    def __init__(self, files: list[Path], verb: str) -> None:
        self.files = files
        listing = "\n".join(f"  {p}" for p in files)
        super().__init__(
            f"{verb}: not written: {len(files)} file(s) differ from what {verb} generated, so someone edited them:\n"
            f"{listing}\nNothing was changed. To replace them anyway (each edited file is first copied to "
            f"{BACKUPS}/<time>/), run `make {verb} ARGS=--force` (or `python -m cudacourse {verb} --force`).")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest(root: Path) -> dict[str, str]:
    try:
        data = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def committed(root: Path, path: Path) -> bytes | None:
    """``path``'s bytes at git ``HEAD`` of the checkout ``root`` (``None``: no git, no commit, or not tracked)."""
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix()
        r = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{rel}"], capture_output=True, timeout=30,
                           check=False)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def edited(root: Path, want: Mapping[Path, bytes], pristine: Callable[[Path], bytes | None]) -> list[Path]:
    """The files of ``want`` whose current bytes are neither ``want``, nor what was last generated there, nor
    ``pristine(path)``."""
    last = _manifest(root)
    out = []
    for path, data in want.items():
        if not path.exists():
            continue
        have = path.read_bytes()
        if have == data or last.get(_key(root, path)) == _digest(have):
            continue
        if have == pristine(path):
            continue
        out.append(path)
    return out


def _key(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


def write_generated(root: Path, want: Mapping[Path, bytes], *, verb: str,
                    pristine: Callable[[Path], bytes | None], force: bool = False) -> list[Path]:
    """Write ``want`` (path -> bytes) under the checkout ``root``; returns the files that changed.

    Raises :class:`EditedFilesError` (and writes nothing) when a file someone edited would be replaced, unless
    ``force``: then those files are backed up first.
    """
    changed = [p for p, data in want.items() if not p.exists() or p.read_bytes() != data]
    hand = edited(root, {p: want[p] for p in changed}, pristine)
    if hand and not force:
        raise EditedFilesError(hand, verb)
    if hand:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for p in hand:
            backup = root / BACKUPS / stamp / _key(root, p)
            backup.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, backup)
            print(f"{verb}: kept your version of {p} in {backup}")
    record = _manifest(root)
    for p in changed:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(want[p])
    for p, data in want.items():
        record[_key(root, p)] = _digest(data)
    try:
        (root / MANIFEST).write_text(json.dumps(record, indent=0, sort_keys=True) + "\n")
    except OSError:
        pass  # a read-only checkout: the committed versions still protect the files
    return changed


def generator_main(argv: list[str], *, verb: str, what: str, stale_word: str, check: Callable[[], list[Path]],
                   write: Callable[[bool], list[Path]]) -> int:
    """The command line of a maintainer's generator (``stubs``, ``templates``): ``--check`` lists what is
    ``stale_word`` and fails; without it, :func:`write_generated`'s rules (``--force`` keeps backups)."""
    ap = argparse.ArgumentParser(
        prog=f"python -m cudacourse {verb}",
        description=f"Regenerate {what}: a maintainer's verb. It never replaces a file someone edited unless --force "
                    "(which keeps a backup).")
    ap.add_argument("--check", action="store_true", help=f"change nothing; fail if a file is {stale_word}")
    ap.add_argument("--force", action="store_true",
                    help=f"replace edited files too, after copying each to {BACKUPS}/<time>/")
    args = ap.parse_args(argv)
    if args.check:
        bad = check()
        for p in bad:
            print(f"{stale_word}: {p} (run `make {verb}`)")
        return 1 if bad else 0
    try:
        changed = write(args.force)
    except EditedFilesError as e:
        print(e, file=sys.stderr)
        return 1
    for p in changed:
        print(f"wrote {p}")
    return 0
