"""Scanning helpers of the simulator's rewriter (``rewrite.py``) on the masked source.

The rewriter never parses C++: it scans the source with comments and string contents blanked
(``cudacourse.source.mask``), so brackets, ``;`` and ``#`` found here are code. Each helper answers one question
about offsets in that masked text.
"""

from __future__ import annotations

import re

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}


def match_forward(m: str, i: int) -> int:
    """Index of the bracket closing the one at ``i`` (``(``, ``[`` or ``{``); -1 if none."""
    stack = []
    for j in range(i, len(m)):
        c = m[j]
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c in _CLOSE:
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j
    return -1


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), [], {} and template angle brackets."""
    parts, depth, angle, cur = [], 0, 0, []
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "<" and depth == 0:
            angle += 1
        elif c == ">" and depth == 0 and angle > 0:
            angle -= 1
        if c == sep and depth == 0 and angle == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def in_preprocessor_line(m: str, i: int) -> bool:
    """True when offset ``i`` lies on a preprocessor line (following backslash continuations)."""
    start = m.rfind("\n", 0, i) + 1
    while True:
        if m[start:].lstrip(" \t").startswith("#"):
            return True
        if start == 0:
            return False
        prev_end = start - 1
        prev_start = m.rfind("\n", 0, prev_end) + 1
        if m[prev_start:prev_end].rstrip(" \t\r").endswith("\\"):
            start = prev_start
            continue
        return False


def kernel_expr_start(m: str, i: int) -> int:
    """Start of the kernel expression ending just before offset ``i`` (``k``, ``ns::k<T, 4>``)."""
    j = i
    while j > 0 and m[j - 1] in " \t\n":
        j -= 1
    while True:
        if j > 0 and m[j - 1] == ">":  # template arguments
            depth, k = 0, j - 1
            while k >= 0:
                if m[k] == ">":
                    depth += 1
                elif m[k] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                k -= 1
            j = k
            while j > 0 and m[j - 1] in " \t\n":
                j -= 1
        k = j
        while k > 0 and (m[k - 1].isalnum() or m[k - 1] == "_"):
            k -= 1
        if k == j:
            return -1
        j = k
        if j >= 2 and m[j - 2:j] == "::":
            j -= 2
            continue
        return j


def token_spans(m: str, lo: int, hi: int, word: str) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into spans, each occurrence of the identifier ``word`` in masked ``m`` its own span."""
    out, last = [], lo
    for mm in re.finditer(rf"\b{word}\b", m[lo:hi]):
        out += [(last, lo + mm.start()), (lo + mm.start(), lo + mm.end())]
        last = lo + mm.end()
    return [*out, (last, hi)]


def brace_scopes(m: str) -> list[tuple[int, int, bool]]:
    """Every ``{...}`` block as (open, close, is_namespace_like)."""
    out, stack = [], []
    for i, c in enumerate(m):
        if c == "{":
            head = m[max(0, i - 200):i]
            ns = bool(re.search(r"(\bnamespace\b[\s\w:]*|\bextern\s*\"\s*\")\s*$", head))
            stack.append((i, ns))
        elif c == "}" and stack:
            o, ns = stack.pop()
            out.append((o, i, ns))
    return out


def at_file_scope(scopes: list[tuple[int, int, bool]], i: int) -> bool:
    """Whether offset ``i`` lies outside every block of ``scopes`` but namespaces and ``extern "C"``."""
    return not any(o < i < c and not ns for o, c, ns in scopes)
