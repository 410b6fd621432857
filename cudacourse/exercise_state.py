"""Where a learner stands in an exercise: each file against its stub, each task's TODO blocks, given functions.

The stubs are derived from the solutions (``stubs.expected``). The ``check`` verb (:mod:`cudacourse.checkcmd`), the
grader (:mod:`cudacourse.grading.plan`, :mod:`cudacourse.grading.feedback`) and the course's checks
(:func:`cudacourse.check.given_unchanged`) ask these questions; none of them imports another for the answer.
"""

from __future__ import annotations

import re
from pathlib import Path

from cudacourse.course import Course, LessonInfo, Task
from cudacourse.source import matching


def file_states(c: Course, lesson: LessonInfo, folder: Path | None = None) -> dict[str, str]:
    """What each exercise file of ``lesson`` in ``folder`` (default: this checkout's ``lessons/<id>/``) is, against
    the stub derived from its solution: ``untouched`` (the stub, which has a TODO), ``given`` (the stub, which is
    the solution: nothing to write), ``changed``, ``missing``, or ``unknown`` (no solution to compare with)."""
    from cudacourse import stubs

    folder = folder if folder is not None else c.kernel_dir(lesson.id, "student")
    out = {}
    for name in lesson.exercise_files:
        src, dst = c.kernel_dir(lesson.id, "solution") / name, folder / name
        if not src.is_file():
            out[name] = "unknown"
            continue
        want = stubs.expected(src)
        want_b = want.encode() if isinstance(want, str) else want
        if not dst.is_file():
            out[name] = "missing"
        elif dst.read_bytes() != want_b:
            out[name] = "changed"
        else:
            out[name] = "untouched" if want_b != src.read_bytes() else "given"
    return out


def _todo_spans(text: str, task_id: str) -> list[tuple[int, int] | None]:
    """(start, end) of the brace block around each ``TODO(task N.M...)`` comment in C++ ``text`` (``task_id``
    a regular expression); ``None`` for one outside any block. Mentions in the file's header are left out."""
    from cudacourse.source import mask

    code = mask(text)
    header_end = len(code) - len(code.lstrip())
    out: list[tuple[int, int] | None] = []
    for m in re.finditer(r"TODO\(task " + task_id + r"[,)]", text):
        if m.start() < header_end:
            continue
        depth, i = 0, m.start()
        while i >= 0 and not (code[i] == "{" and depth == 0):
            depth += {"}": 1, "{": -1}.get(code[i], 0)
            i -= 1
        if i < 0:
            out.append(None)
            continue
        j = matching(code, i, "{}")
        out.append((i, (len(code) if j is None else j) + 1))
    return out


def _todo_blocks(text: str, task_id: str) -> list[str | None]:
    """The code (comments and spacing aside) of the blocks of :func:`_todo_spans`, and, last, the code outside
    every TODO block of any task (the given code: a learner who wrote their kernel elsewhere changed it)."""
    from cudacourse.source import mask

    code = mask(text)
    mine = [None if s is None else re.sub(r"\s+", "", code[s[0]:s[1]]) for s in _todo_spans(text, re.escape(task_id))]
    keep = list(code)
    for s in _todo_spans(text, r"\d+\.\w+"):
        if s is not None:
            keep[s[0]:s[1]] = " " * (s[1] - s[0])
    return [*mine, re.sub(r"\s+", "", "".join(keep))] if mine else []


def _py_todo_blocks(text: str, task_id: str) -> list[str | None]:
    """The Python twin of :func:`_todo_blocks`: the code (comments and spacing aside) of the innermost function
    around each ``TODO(task N.M...)`` line of ``text`` (``None`` for one outside any function, or a file that does
    not parse: never claim such a file untouched), and, last, the code outside every such function."""
    import ast
    import io
    import tokenize

    try:
        tree = ast.parse(text)
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError):
        return [None]
    code_of_line: dict[int, list[str]] = {}
    for tok in tokens:  # comments are not code: a learner's note changes nothing
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_of_line.setdefault(tok.start[0], []).append(tok.string)
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    todo = re.compile(r"TODO\(task " + re.escape(task_id) + r"[,)]")
    mine: list[str | None] = []
    spans: list[tuple[int, int]] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not todo.search(line):
            continue
        around = [f for f in funcs if f.lineno <= no <= (f.end_lineno or f.lineno)]
        if not around:
            mine.append(None)
            continue
        f = max(around, key=lambda f: f.lineno)  # the innermost
        span = (f.lineno, f.end_lineno or f.lineno)
        if span not in spans:
            spans.append(span)
            mine.append("".join(t for n in range(span[0], span[1] + 1) for t in code_of_line.get(n, ())))
    if not mine:
        return []
    rest = "".join(t for n, toks in sorted(code_of_line.items()) if not any(a <= n <= b for a, b in spans)
                   for t in toks)
    return [*mine, rest]


def untouched_todos(c: Course, lesson: LessonInfo, task: Task, folder: Path | None = None) -> list[str]:
    """The exercise files (``.cu``, and ``.py`` by function) holding ``task``'s ``TODO(task N.M...)`` comments, when
    every block around them still reads as in the stub (a started lesson's task not begun: its cases cannot pass,
    so the grader need not run them);
    ``[]`` when one was changed, has no block, or there is nothing to compare with."""
    from cudacourse import stubs

    folder = folder if folder is not None else c.kernel_dir(lesson.id, "student")
    found = []
    for name in lesson.files_of(task):
        src, dst = c.kernel_dir(lesson.id, "solution") / name, folder / name
        blocks = _todo_blocks if name.endswith(".cu") else _py_todo_blocks if name.endswith(".py") else None
        if blocks is None or not src.is_file():
            continue
        stub = stubs.expected(src)
        stub = stub if isinstance(stub, str) else stub.decode(errors="replace")
        want = blocks(stub, task.id)
        if not want:
            continue
        if not dst.is_file() or None in want or blocks(dst.read_text(errors="replace"), task.id) != want:
            return []
        found.append(name)
    return found


def untouched_reason(c: Course, lesson: LessonInfo, task: Task, folder: Path | None = None,
                     untouched: set[str] | None = None) -> str:
    """Why ``task`` of a started lesson counts as not begun, or ``""``: every file its tests use is still the stub,
    or every block around its ``TODO(task ...)`` comments is. ``untouched``: the lesson's untouched files, when
    the caller has them (:func:`file_states`). Such a task is neither built nor run by ``check`` or ``grade``."""
    if untouched is None:
        untouched = {n for n, state in file_states(c, lesson, folder).items() if state == "untouched"}
    files = lesson.files_of(task)
    if set(files) <= untouched:
        return f"{', '.join(files)} {'is' if len(files) == 1 else 'are'} still the stub"
    if todos := untouched_todos(c, lesson, task, folder):
        return f"its TODO in {', '.join(todos)} is still the stub"
    return ""


def lesson_started(c: Course, lesson: LessonInfo, folder: Path | None = None) -> bool:
    """Whether any exercise file of ``lesson`` in ``folder`` (default: this checkout's ``lessons/<id>/``)
    differs from the stub derived from its solution. A missing file counts as started (it was changed), and
    so does a lesson none of whose stubs differ from their solutions (an untouched copy would be complete),
    or a file without a solution to compare with (never claim the learner has not started)."""
    states = file_states(c, lesson, folder).values()
    return any(s in ("changed", "missing", "unknown") for s in states) or "untouched" not in states


def function_text(source: str, name: str) -> str | None:
    """The code of the global-scope function ``name`` in C++ ``source`` (from its ``void name(`` line to its
    closing brace), without comments and whitespace; ``None`` if there is none."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)
    m = re.search(r"^void\s+" + re.escape(name) + r"\s*\(", code, flags=re.M)
    if m is None:
        return None
    start = code.find("{", m.end())
    end = matching(code, start, "{}") if start >= 0 else None
    return None if end is None else re.sub(r"\s+", "", code[m.start():end + 1])


def function_unchanged(learner: Path, solution: Path, name: str) -> bool | None:
    """Whether function ``name`` in the learner's file reads as in the stub derived from ``solution`` (the course
    gives it complete: a launcher); ``None`` when either file or the function is missing."""
    from cudacourse import stubs

    try:
        mine = function_text(learner.read_text(errors="replace"), name)
        given_text = stubs.expected(solution)
    except Exception:  # noqa: BLE001 - no solution to compare with (a grader's worker), unreadable, bad markers
        return None
    given = function_text(given_text if isinstance(given_text, str) else given_text.decode(errors="replace"), name)
    if mine is None or given is None:
        return None
    return mine == given
