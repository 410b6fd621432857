"""A guard around the learner's Python at run time: torch may shape and move data, never compute the answer.

Used wherever a lesson's Python exercise file runs (``decoder.py``, ``train.py``, the Triton twins): by the
lesson tests in-process, and by the torch worker's program (``workers/torch_serve.py``) while grading. The
grader's screens of the same files (``grading/screens.py``) are early, friendly errors; this is the check at
run time, so it lives in the runtime layer, below both.
"""

from __future__ import annotations

# Torch functions a learner's Python exercise file may call itself: allocation, views, copies, dtype and
# device moves, queries. Anything else called *from the learner's file* (matmul, linear, softmax, sum, +)
# computes what the learner's kernels must compute, and is refused.
TORCH_ALLOWED = frozenset("""
empty empty_like zeros zeros_like ones ones_like full full_like tensor as_tensor arange
reshape view view_as contiguous t transpose permute narrow unsqueeze squeeze flatten unflatten expand
expand_as split chunk unbind select __getitem__ __setitem__ __len__ __iter__ __index__ __int__ __float__
__bool__ __format__ __repr__ __hash__ __eq__ __ne__ cat stack
to cpu cuda float double half int long bool clone detach detach_ requires_grad_ copy_ fill_ zero_
numel size dim is_contiguous item tolist stride data_ptr element_size is_cuda device dtype shape
requires_grad grad grad_fn is_leaf data apply backward __get__ __set__ storage_offset untyped_storage
""".split())


def _torch_name(func: object) -> str:
    name = getattr(func, "__name__", "") or str(func)
    return name.split(".")[0]  # torch.ops overloads: "mm.default" -> "mm"


def torch_answer_guard(learner_files: list[str]):  # noqa: ANN201 - a TorchFunctionMode (torch imported lazily)
    """A ``TorchFunctionMode`` that refuses torch functions which compute, when called directly from one of
    ``learner_files`` (a lesson's Python exercise files: ``decoder.py``, ``train.py``).

    Use it around the calls into the learner's Python::

        with torch_answer_guard([str(path_of_decoder_py)]):
            y = dec.decoder_block(k, x, ...)

    Calls made by other code (the test's kernel wrappers, torch internals) are not affected, nor are the
    learner's allocations, views, copies and queries (:data:`TORCH_ALLOWED`). Catches ``torch.ops`` calls,
    operators (``x @ w``) and ``torch.nn.functional`` alike. A refusal raises ``RuntimeError`` naming the
    learner's line and the function.
    """
    import os
    import sys

    import torch
    from torch.overrides import TorchFunctionMode

    mine = {os.path.realpath(f) for f in learner_files}
    torch_dir = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
    here = os.path.realpath(__file__)

    class _Guard(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            name = _torch_name(func)
            if name not in TORCH_ALLOWED:
                f = sys._getframe(1)
                while f is not None:
                    path = os.path.realpath(f.f_code.co_filename)
                    if not (path.startswith(torch_dir) or path == here):
                        break
                    f = f.f_back
                if f is not None and os.path.realpath(f.f_code.co_filename) in mine:
                    file = os.path.basename(f.f_code.co_filename)
                    how = ("its @triton.jit kernels" if file.endswith("_triton.py") else
                           "your kernels (the methods of the kernels object it is given)")
                    raise RuntimeError(
                        f"{file}:{f.f_lineno}: calls torch's {name}(), which computes part of the answer; "
                        f"{file} must compute it with {how}. torch may only allocate, view, copy and move data "
                        f"in {file}.")
            return func(*args, **(kwargs or {}))

    return _Guard()
