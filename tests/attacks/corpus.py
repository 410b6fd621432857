"""Load the hostile-submission corpus (attacks.toml) and build each attack's file from the course.

    from tests.attacks.corpus import load, build
    for attack in load():
        files = build(attack, course=ROOT, paths={"REPORT": ..., "JUNIT": ..., "HIDDEN": ..., ...})
        # files: {"lessons/01_relu/relu.cu": text} to stage over an unchanged solution submission

The format is described in README.md beside this file. Nothing here runs an attack: the grader's test
stages, grades and checks them (verdicts, ``must_not`` effects, checksums, nothing left running).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    try:
        import tomli as tomllib
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("the attack corpus needs Python 3.11+, or `pip install tomli` on 3.10") from e

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "attacks.toml"

# What each must_not entry means: the effect the grader's test must show did not happen.
EFFECTS = {
    "forge:report": "the JSON report holds exactly the verdicts the grader computed (no added or changed task)",
    "forge:junit": "the JUnit file holds exactly the grader's verdicts",
    "change:hidden": "every file of the --hidden folder is unchanged (checksums before and after)",
    "change:course": "every file of the course checkout is unchanged, and no file was added to it",
    "change:neighbour": "the other batch submission's staged and original files are unchanged",
    "change:outside-scratch": "no file outside the worker's scratch changed (checksums of course, hidden, "
                              "submissions, report folder)",
    "leak:hidden": "no line of a hidden test (a planted secret token) appears in the report, JUnit, feedback or output",
    "leak:solution": "no line of the instructor's solutions (a planted secret token) appears in any output",
    "leak:passwd": "no line of /etc/passwd appears in any output",
    "leak:build-cache": "no line of a file in the instructor's build cache (a planted secret token) appears in any "
                        "output",
    "kill:grader": "the grader survives and writes its report",
    "survive": "no process started by the submission is left once the grade ends",
    "slow": "the attack costs at most its own task's limits (build or case timeout); other tasks are unaffected",
}
PLACEHOLDERS = ("REPORT", "JUNIT", "HIDDEN", "COURSE", "NEIGHBOUR", "BUILD", "FORGED_REPORT", "FORGED_JUNIT")
OPS = ("prepend", "append", "patch_launcher", "insert_before", "replace_body", "replace", "pad")
_MARKER = re.compile(r"^\s*(//|#)\s*(BEGIN SOLUTION|END SOLUTION|STUB:).*\n?", re.M)


@dataclass
class Attack:
    """One hostile submission: a course file with edits, the verdict it must get, what must not happen."""

    id: str
    issue: str
    base: str  # "<lesson>/<file>", taken from solutions/ and staged as lessons/
    fail: list[str]
    must_not: list[str]
    edits: list[dict[str, Any]]
    prelude: str | None = None
    message: dict[str, str] = field(default_factory=dict)
    batch: bool = False

    @property
    def target(self) -> str:
        """Where the edited file lands in the submission."""
        return f"lessons/{self.base}"


def load(path: Path = CORPUS) -> list[Attack]:
    """Every attack of the corpus, checked for a well-formed entry (ValueError naming the attack if not)."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    preludes = data.get("prelude", {})
    out, seen = [], set()
    for raw in data["attack"]:
        aid = raw.get("id", "?")
        for key in ("id", "issue", "base", "fail", "must_not", "edit"):
            if key not in raw:
                raise ValueError(f"attack {aid}: missing '{key}'")
        if aid in seen:
            raise ValueError(f"attack {aid}: duplicate id")
        seen.add(aid)
        if raw.get("prelude") and raw["prelude"] not in preludes:
            raise ValueError(f"attack {aid}: unknown prelude {raw['prelude']!r}")
        bad = [e for e in raw["must_not"] if e not in EFFECTS]
        if bad or not raw["must_not"]:
            raise ValueError(f"attack {aid}: must_not needs entries from {sorted(EFFECTS)}, got {raw['must_not']}")
        for e in raw["edit"]:
            if e.get("op") not in OPS:
                raise ValueError(f"attack {aid}: edit op must be one of {OPS}, got {e.get('op')!r}")
        if not raw["fail"]:
            raise ValueError(f"attack {aid}: 'fail' lists the tasks that must fail; an attack always costs one")
        out.append(Attack(id=aid, issue=raw["issue"], base=raw["base"], fail=list(raw["fail"]),
                          must_not=list(raw["must_not"]), edits=list(raw["edit"]), prelude=raw.get("prelude"),
                          message=dict(raw.get("message", {})), batch=bool(raw.get("batch", False))))
    return out


def forgeries(path: Path = CORPUS) -> dict[str, str]:
    """The forged report and JUnit texts (values of @FORGED_REPORT@ and @FORGED_JUNIT@)."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    return {"FORGED_REPORT": data["forgery"]["report"], "FORGED_JUNIT": data["forgery"]["junit"]}


def build(attack: Attack, course: Path, paths: dict[str, str], corpus: Path = CORPUS) -> dict[str, str]:
    """The attack's files, ``{path in the submission: text}``, from ``course``'s solution of ``attack.base``.

    ``paths`` gives the absolute paths for REPORT, JUNIT, HIDDEN, COURSE, NEIGHBOUR and BUILD (missing ones are
    left as "/nonexistent"). Raises ValueError when an edit's anchor is not found exactly once.
    """
    text = (course / "solutions" / attack.base).read_text()
    py = attack.base.endswith(".py")
    if attack.prelude:
        with open(corpus, "rb") as f:
            prelude = tomllib.load(f)["prelude"][attack.prelude]
        text = _prepend(text, prelude, py)
    for e in attack.edits:
        text = _apply(attack.id, text, e, py)
    text = _MARKER.sub("", text)
    values = {"FORGED_REPORT": "", "FORGED_JUNIT": "", **forgeries(corpus),
              **{k: "/nonexistent" for k in PLACEHOLDERS if k not in ("FORGED_REPORT", "FORGED_JUNIT")}, **paths}
    for k in PLACEHOLDERS:
        text = text.replace(f"@{k}@", _escape(str(values[k])))
    return {attack.target: text}


def _escape(s: str) -> str:
    """The value as the inside of a C or Python double-quoted string literal."""
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _indent(code: str, indent: str) -> str:
    return "".join(indent + ln + "\n" if ln.strip() else "\n" for ln in code.strip("\n").splitlines())


def _prepend(text: str, code: str, py: bool) -> str:
    """Insert after the last top-level #include (C++) or import (Python)."""
    pat = r"^(?:import |from \S+ import ).*\n" if py else r"^#include .*\n"
    marks = list(re.finditer(pat, text, re.M))
    at = marks[-1].end() if marks else 0
    return text[:at] + code.strip("\n") + "\n" + text[at:]


def _one(aid: str, text: str, pattern: str, what: str) -> re.Match[str]:
    found = list(re.finditer(pattern, text, re.M))
    if len(found) != 1:
        raise ValueError(f"attack {aid}: {what} found {len(found)} times in the course file (expected once)")
    return found[0]


def _apply(aid: str, text: str, e: dict[str, Any], py: bool) -> str:
    op, at, code = e["op"], e.get("at", ""), e.get("code", "")
    if op == "prepend":
        return _prepend(text, code, py)
    if op == "append":
        return text.rstrip("\n") + "\n\n" + code.strip("\n") + "\n"
    if op == "pad":
        line = ("# " if py else "// ") + "padding " * 8 + "\n"
        return text + line * (int(e["bytes"]) // len(line) + 1)
    if op == "patch_launcher":
        m = _one(aid, text, rf"^void {re.escape(at)}\([^)]*\)\s*\{{\n", f"launcher {at}")
        return text[:m.end()] + _indent(code, "    ") + text[m.end():]
    if op == "insert_before":
        m = _one(aid, text, rf"^{re.escape(at)}", f"line starting {at!r}")
        return text[:m.start()] + code.strip("\n") + "\n\n" + text[m.start():]
    if op == "replace":
        m = _one(aid, text, rf"^([ \t]*).*{re.escape(at)}.*\n", f"line containing {at!r}")
        return text[:m.start()] + _indent(code, m.group(1)) + text[m.end():]
    if op == "replace_body":
        decl = rf"^[ \t]*def {re.escape(at)}\(" if py else rf"^[^/\n]*\b{re.escape(at)}\s*\("
        start = _one(aid, text, decl, f"function {at}")
        c = "#" if py else "//"
        b = text.index(f"{c} BEGIN SOLUTION", start.end())
        end = text.index(f"{c} END SOLUTION", b)
        line_start = text.rindex("\n", 0, b) + 1
        indent = text[line_start:b]
        return text[:line_start] + _indent(code, indent) + text[text.index("\n", end) + 1:]
    raise ValueError(f"attack {aid}: unknown op {op!r}")
