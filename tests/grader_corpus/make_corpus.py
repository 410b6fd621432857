"""The grader's corpus of broken lesson-01 submissions, described compactly and generated at test time.

    python tests/grader_corpus/make_corpus.py OUT_DIR     # write the corpus to look at it

Each case is an edit of the current solution (one deliberate defect, or a cheat) plus the tasks that
must fail (graded with templates/hidden_example, whose task 1.H is included). :func:`write` turns the
cases into learners' copies ``OUT_DIR/<case>/lessons/01_relu/`` and ``OUT_DIR/expected.json``; every
other graded task of lesson 01 must pass, and the GPU-only task 1.7 must be "not graded" on the
simulator. tests/test_grader.py writes the corpus into a temporary folder, grades it in one run and
checks every verdict. Nothing generated is committed, so the corpus always follows the solution.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cudacourse.sandbox import available

ROOT = Path(__file__).resolve().parent.parent.parent
SOL = ROOT / "solutions" / "01_relu"
STUB = ROOT / "lessons" / "01_relu"
PUBLIC_SIZES = [1, 31, 32, 33, 1000, 2**20 + 3]  # SIZES in tests/test_01_relu.py


def learner_copy(text: str) -> str:
    """The solution as a learner would hand it in: markers and stub-only lines dropped (// in kernels, # in
    Python files such as the Triton twin)."""
    keep = [ln for ln in text.splitlines(keepends=True)
            if not re.match(r"\s*(//|#)\s*(BEGIN SOLUTION|END SOLUTION|STUB:)", ln)]
    return "".join(keep)


def replace_body(text: str, func: str, body: str, kinds: str = "__global__|__device__") -> str:
    """Replace the solution block of the function ``func`` (declared with one of ``kinds``) with ``body``."""
    start = re.search(rf"^[^/\n]*({kinds})[^;{{]*\b{re.escape(func)}\s*\(", text, re.M)
    assert start, func
    b = text.index("// BEGIN SOLUTION", start.end())
    e = text.index("// END SOLUTION", b)
    line_start = text.rindex("\n", 0, b) + 1
    indent = text[line_start:b]
    new = "".join(indent + ln + "\n" if ln else "\n" for ln in body.strip("\n").splitlines())
    return text[:line_start] + "// BEGIN SOLUTION\n" + new + indent + text[e:]


def patch_launcher(text: str, func: str, code: str) -> str:
    """Insert ``code`` at the start of the host launcher ``void func(...) {``."""
    m = re.search(rf"^void {re.escape(func)}\([^)]*\)\s*\{{\n", text, re.M)
    assert m, func
    return text[:m.end()] + "".join("    " + ln + "\n" for ln in code.strip("\n").splitlines()) + text[m.end():]


def prepend(text: str, code: str) -> str:
    """Insert ``code`` after the file's last top-level #include."""
    incs = list(re.finditer(r"^#include .*\n", text, re.M))
    at = incs[-1].end() if incs else 0
    return text[:at] + code.strip("\n") + "\n" + text[at:]


def insert_before(text: str, marker: str, code: str) -> str:
    """Insert ``code`` (and a blank line) before the line that starts with ``marker``."""
    at = re.search(rf"^{re.escape(marker)}", text, re.M)
    assert at, marker
    return text[:at.start()] + code.rstrip("\n") + "\n\n" + text[at.start():]


SCALAR = "relu_v1_scalar_kernel"
# name -> (description, tasks that must fail, tasks that must also fail on a GPU, why a GPU cannot see the bug).
# "1.H" is the hidden task of templates/hidden_example. Breaking relu_v1_scalar_kernel fails 1.3 too: its
# misaligned-view fallback uses that kernel (on a GPU as well: the GPU worker's staged copy keeps a tensor's
# address modulo 256). On a GPU task 1.7 (the float4 kernel's speed) is graded, and fails with relu.cu when relu.cu
# does not build. The whole corpus passed on the H100 machine as an ordinary user on 2026-11-25 (317 s).
#
# Each case is a whole submission graded (about 14 CPU-s on the 2-core machine), so a case is here only when it
# checks a grading path no other case or test checks. Left out for that reason (suite11, 2026-11-25):
# - "zeros" (a kernel writing zeros): "tests_edited" hands in that very kernel, with an edited tests/ folder.
# - "endless_loop_host" (a launcher spinning on the host): tests/attacks' "endless-host-loop" is the same spin
#   in the same launcher, and also checks the "timed out" message and that nothing survives.
# - "torch_header" (torch/extension.h in relu.cu) and "include_escape" (#include "../../tests/conftest.py"):
#   with the kernel-file screen switched off both still got these very verdicts (neither file builds on the
#   simulator), so they never checked the screen; "fopen_static" does (it builds and passes without the
#   screen), "compile_error" checks a relu.cu that does not build, and the screen's rules for both are
#   tests/test_grader.py::test_screen_rejects_kernel_only_cheats ("torch header", "relative escape").
CASES: dict[str, tuple[str, list[str], list[str], str]] = {}


def build() -> dict[str, dict[str, str]]:
    """name -> {file name: content} for every case (None content: the file is left out)."""
    relu = SOL / "relu.cu"
    torch_cu = SOL / "relu_torch.cu"
    # relu_torch.cu, left alone by most cases, is handed in byte for byte as the course's solution: the grader
    # then builds it once per slot into its shared read-only cache (runner._warm_up), as it does for any file
    # identical to the instructor's. That path is tested here, and the corpus pays one torch-header build per
    # slot instead of one per case (about 30 s each on a 2-core machine).
    # The Triton twin (tasks 1.T*) is handed in complete; test_corpus grades the CUDA tasks (the twins' grading,
    # confined, is tested in tests/test_triton_track.py), so the corpus costs no Triton worker per case.
    base = {"relu.cu": learner_copy(relu.read_text()), "relu_torch.cu": torch_cu.read_text(),
            "relu_triton.py": learner_copy((SOL / "relu_triton.py").read_text())}
    r = base["relu.cu"]
    # Work on the marked solution for body replacement, then drop markers.
    sol = relu.read_text()

    def body(func: str, code: str) -> str:
        return learner_copy(replace_body(sol, func, code))

    out: dict[str, dict[str, str]] = {}

    def case(name: str, desc: str, fails: list[str], cuda: list[str] | None = None, gpu_blind: str = "",
             **files: str | None) -> None:
        """``cuda``: tasks that fail on a GPU as well; ``gpu_blind``: why a GPU cannot see this case's bug (its
        ``fails`` are then the simulator's verdicts only, and on a GPU those tasks' verdicts are not asserted)."""
        CASES[name] = (desc, fails, cuda or [], gpu_blind)
        d = dict(base)
        for k, v in files.items():
            d[k.replace("_cu", ".cu").replace("_py", ".py")] = v
        out[name] = d

    case("solution", "the solution, unchanged: full points", [])
    case("stub", "the untouched stubs", ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.H"], ["1.7"],
         relu_cu=(STUB / "relu.cu").read_text(), relu_torch_cu=(STUB / "relu_torch.cu").read_text(),
         relu_triton_py=(STUB / "relu_triton.py").read_text())
    case("compile_error", "a missing semicolon in relu.cu", ["1.1", "1.2", "1.3", "1.4", "1.5", "1.H"], ["1.7"],
         relu_cu=body(SCALAR, "int i = blockIdx.x * blockDim.x + threadIdx.x\nif (i < n) y[i] = fmaxf(x[i], 0.0f);"))
    case("endless_loop_kernel", "a kernel loop that never advances",
         ["1.1", "1.3"],
         relu_cu=body(SCALAR, "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;) {\n"
                              "    y[i] = fmaxf(x[i], 0.0f);\n}"))
    case("segfault_host", "a launcher that writes through a null pointer", ["1.1"],
         relu_cu=patch_launcher(r, "relu_v1_scalar", "if (n == 33) { volatile int* p = nullptr; *p = 1; }"))
    case("out_of_bounds", "no bounds check: the last partial block writes past y", ["1.1", "1.3"],
         relu_cu=body(SCALAR, "int i = blockIdx.x * blockDim.x + threadIdx.x;\ny[i] = fmaxf(x[i], 0.0f);"))
    case("race", "shared memory read back by another thread without __syncthreads", ["1.1", "1.3"],
         relu_cu=body(SCALAR, "__shared__ float s[256];\n"
                              "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "s[threadIdx.x] = i < n ? x[i] : 0.0f;\n"
                              "int t = blockDim.x - 1 - threadIdx.x;  // the mirrored thread's value\n"
                              "int j = blockIdx.x * blockDim.x + t;\n"
                              "if (j < n) y[j] = fmaxf(s[t], 0.0f);"))
    case("barrier_divergence", "__syncthreads inside `if (i < n)`: divergent in the last block", ["1.1", "1.3"],
         gpu_blind="a divergent __syncthreads is undefined behaviour that an H100 runs to the right values (graded "
                   "there, 1.1 and 1.3 passed); the simulator and compute-sanitizer --tool synccheck see it",
         relu_cu=body(SCALAR, "__shared__ float s[256];\n"
                              "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "if (i < n) {\n"
                              "    s[threadIdx.x] = x[i];\n"
                              "    __syncthreads();\n"
                              "    y[i] = fmaxf(s[threadIdx.x], 0.0f);\n"
                              "}"))
    case("nan_output", "NaN instead of 0 for negative inputs", ["1.1", "1.3"],
         relu_cu=body(SCALAR, "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "if (i < n) y[i] = x[i] > 0.0f ? x[i] : nanf(\"\");"))
    sizes = " && ".join(f"n != {s}" for s in PUBLIC_SIZES)
    case("hardcoded_sizes", "works only for the sizes of the public tests (caught by hidden cases)", ["1.1"],
         relu_cu=patch_launcher(r, "relu_v1_scalar", f"if ({sizes}) return;"))
    case("input_mutation", "applies ReLU in place to x as well", ["1.1", "1.3"],
         relu_cu=body(SCALAR, "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "if (i < n) {\n"
                              "    float v = fmaxf(x[i], 0.0f);\n"
                              "    const_cast<float*>(x)[i] = v;\n"
                              "    y[i] = v;\n"
                              "}"))
    case("cached_answer", "the launcher replays its first answer for a size it has seen (hidden cases)",
         ["1.1"],
         relu_cu=insert_before(patch_launcher(r, "relu_v1_scalar",
                                              "static float* cache = nullptr;\nstatic int cached_n = -1;\n"
                                              "if (n == cached_n) {\n"
                                              "    copy_cached<<<ceil_div(n, kBlock), kBlock>>>(cache, y, n);\n"
                                              "    return;\n}\n"
                                              "if (n > 0 && n <= (1 << 16)) {\n"
                                              "    relu_v1_scalar_kernel<<<ceil_div(n, kBlock), kBlock>>>(x, y, n);\n"
                                              "    if (cache) cudaFree(cache);\n"
                                              "    cudaMalloc(&cache, n * sizeof(float));\n"
                                              "    copy_cached<<<ceil_div(n, kBlock), kBlock>>>(y, cache, n);\n"
                                              "    cached_n = n;\n    return;\n}"),
                               "void relu_v1_scalar(",
                               "__global__ void copy_cached(const float* src, float* dst, int n) {\n"
                               "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                               "    if (i < n) dst[i] = src[i];\n}\n"))
    # Confined (the simulator worker may write only its own shared-memory folder), the write is denied and the
    # correct kernel passes; unconfined, the write happens and the grader's tamper check fails the task.
    case("edits_test_file", "the launcher overwrites tests/test_01_relu.py (names built by token pasting)",
         [] if available().landlock_abi >= 6 else ["1.1"],
         relu_cu=prepend(patch_launcher(r, "relu_v1_scalar",
                                        "static int done = 0;\n"
                                        "if (!done) {\n"
                                        "    done = 1;\n"
                                        "    FILE* f = CC_JOIN(fop, en)(\"tests/test_01_relu.py\", \"w\");\n"
                                        "    if (f) { fputs(\"def test_all_good():\\n    pass\\n\", f); fclose(f); }\n"
                                        "}"),
                         "#include <cstdio>\n#define CC_JOIN2(a, b) a##b\n#define CC_JOIN(a, b) CC_JOIN2(a, b)"))
    case("fopen_static", "calls fopen in relu.cu: rejected before building", ["1.1", "1.2", "1.3", "1.4", "1.5", "1.H"],
         ["1.7"],
         relu_cu=prepend(patch_launcher(r, "relu_v1_scalar",
                                        "FILE* f = fopen(\"/tmp/cc_leak.txt\", \"w\"); if (f) fclose(f);"),
                         "#include <cstdio>"))
    case("torch_op", "relu_forward returns torch::relu(x) instead of launching the kernel", ["1.6"],
         relu_torch_cu=learner_copy(replace_body(
             torch_cu.read_text(), "relu_forward",
             'TORCH_CHECK(x.is_cuda(), "relu_forward: x must be a CUDA tensor");\n'
             'TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: x must be float32");\n'
             'TORCH_CHECK(x.is_contiguous(), "relu_forward: x must be contiguous");\n'
             "return torch::relu(x);", kinds="torch::Tensor")))
    case("grid_stride_no_loop", "grid-stride kernel without the loop: most of y unwritten", ["1.2", "1.H"],
         relu_cu=body("relu_v2_grid_stride_kernel", "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                                    "if (i < n) y[i] = fmaxf(x[i], 0.0f);"))
    case("float4_no_tail", "float4 kernel that forgets the n % 4 leftover floats", ["1.3"],
         relu_cu=body("relu_v3_float4_kernel",
                      "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                      "if (i < n / 4) {\n"
                      "    float4 v = reinterpret_cast<const float4*>(x)[i];\n"
                      "    v.x = fmaxf(v.x, 0.0f); v.y = fmaxf(v.y, 0.0f);\n"
                      "    v.z = fmaxf(v.z, 0.0f); v.w = fmaxf(v.w, 0.0f);\n"
                      "    reinterpret_cast<float4*>(y)[i] = v;\n"
                      "}"))
    case("backward_wrong", "relu_backward passes the gradient through where x <= 0", ["1.4"],
         relu_cu=body("relu_backward_kernel", "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                              "if (i < n) dx[i] = dy[i];"))
    case("gelu_missing", "bias_gelu writes x + b without the GELU", ["1.5"],
         relu_cu=learner_copy(replace_body(sol, "gelu_tanh", "return v;")))
    case("tests_edited", "zeros kernel plus a tests/ folder edited to pass: the edit is ignored", ["1.1", "1.3"],
         relu_cu=body(SCALAR, "int i = blockIdx.x * blockDim.x + threadIdx.x;\nif (i < n) y[i] = 0.0f;"))
    case("missing_torch_file", "relu_torch.cu was not handed in", ["1.6"], relu_torch_cu=None)
    return out


def write(dest: Path) -> dict[str, dict[str, object]]:
    """Write every case folder and ``expected.json`` under ``dest``; returns the expectations."""
    cases = build()
    for name, files in cases.items():
        les = dest / name / "lessons" / "01_relu"
        les.mkdir(parents=True)
        for fname, text in files.items():
            if text is not None:
                (les / fname).write_text(text)
    (dest / "tests_edited" / "tests").mkdir()
    (dest / "tests_edited" / "tests" / "test_01_relu.py").write_text(
        "# A learner's edited copy: it must change nothing, the grader uses the instructor's tests.\n"
        "import pytest\n\n\n@pytest.mark.task('1.1')\ndef test_relu_scalar():\n    pass\n")
    (dest / "tests_edited" / "lessons" / "01_relu" / "lesson.toml").write_text(
        "# A learner's edited model: it must change nothing, the grader reads the instructor's.\n"
        '[lesson]\ntitle = "x"\nwrite = "x"\nlearn = "x"\nfiles = ["relu.cu"]\n\n'
        '[[task]]\nid = "1.1"\ntitle = "mine"\npoints = 100\n')
    expected = {name: {"description": desc, "fail": fails, "also_fail_on_cuda": cuda, "gpu_blind": blind}
                for name, (desc, fails, cuda, blind) in CASES.items()}
    (dest / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    return expected


def main() -> None:
    """Write the corpus into the folder named on the command line."""
    import sys

    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/grader_corpus/make_corpus.py OUT_DIR")
    dest = Path(sys.argv[1])
    dest.mkdir(parents=True, exist_ok=True)
    print(f"wrote {len(write(dest))} cases to {dest}")


if __name__ == "__main__":
    main()
