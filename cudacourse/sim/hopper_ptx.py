"""Names the Hopper instruction in an inline-PTX statement the simulator refuses (issue 38).

Inline assembly never runs on the simulator; lesson 05's ``cc_hopper.h`` wraps the Hopper instructions it models
(mbarrier, 2-D ``cp.async.bulk.tensor``, ``fence.proxy.async``, ``wgmma``, ``setmaxnreg``, ``elect.sync``). A
kernel that writes them as ``asm(...)`` is refused at build time naming the instruction, and whether the simulator
models it through ``cc_hopper.h`` or not at all (clusters, multicast).
"""

from __future__ import annotations

import re

# (pattern, what it is, modelled through cc_hopper.h): the first match wins, most specific first
_HOPPER = [
    (r"multicast::cluster|\.multicast\b", "a multicast copy to the CTAs of a cluster", False),
    (r"\bmapa\b|shared::cluster\.shared::cta|\bcluster\b.*\bbarrier\b|barrier\.cluster|%cluster",
     "thread-block cluster operations", False),
    (r"cp\.async\.bulk\.tensor\.[345]d|\.im2col\b", "a 3-5-D or im2col tensor copy", False),
    (r"cp\.async\.bulk\.tensor", "cp.async.bulk.tensor (TMA)", True),
    (r"cp\.async\.bulk\b", "cp.async.bulk", False),
    (r"\bmbarrier\.", "mbarrier", True),
    (r"fence\.proxy\.async|fence\.mbarrier_init", "fence.proxy.async", True),
    (r"\bwgmma\.", "wgmma", True),
    (r"\bsetmaxnreg\.", "setmaxnreg", True),
    (r"\belect\.sync\b", "elect.sync", True),
    (r"\bstmatrix\b", "stmatrix", False),
]
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def hopper_asm_message(source: str, start: int) -> str | None:
    """The refusal for the ``asm(`` statement at ``source[start:]`` if it holds a Hopper instruction, else None."""
    depth, i = 0, source.find("(", start)
    end = len(source)
    while 0 <= i < len(source):
        ch = source[i]
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            end = i
            break
        i += 1
    text = " ".join(_STRING.findall(source[start:end + 1]))
    for pattern, what, modelled in _HOPPER:
        mm = re.search(pattern, text)
        if not mm:
            continue
        instr = re.search(r"[a-z_][\w.:]*" + re.escape(mm.group(0).split(".")[0]) + r"[\w.:]*|" + pattern, text)
        name = (instr.group(0) if instr else mm.group(0)).strip()
        if modelled:
            return (f"inline PTX `{name}` ({what}, a Hopper instruction) cannot run on the CPU simulator as asm(...); "
                    "call it through lesson 05's cc_hopper.h (mbar_*, tma_load_2d/tma_store_2d, fence_async_smem, "
                    "wgmma_*, setmaxnreg_*, elect_one), which the simulator models and checks, or run this file "
                    "on a GPU")
        return (f"inline PTX `{name}` ({what}) is not modelled by the CPU simulator, and an asm(...) statement cannot "
                "run on it: run this file on a GPU (compute capability 9.0, sm_90a build)")
    return None
