"""Lesson 07: a small model using the swish custom op, exported to ONNX and run in ONNX Runtime.

    .venv/bin/python -m pip install onnx onnxscript onnxruntime onnxruntime-extensions
    .venv/bin/python lessons/07_host_side/onnx_export.py [--impl solution|student] [--out DIR]

The route uses only registry packages. ONNX Runtime's PyPI wheel ships no C/C++ headers, so a compiled
custom-op library (the C++ route: OrtCustomOp, onnxruntime_cxx_api.h) needs the vendor's release archive,
which carries include/ (see README, "Shipping the op"). onnxruntime-extensions' PyOp serves instead: a
Python function registered with ``@onnx_op`` becomes the implementation of a node of domain
``ai.onnx.contrib``, and that function calls the lesson's kernel through ``cc.lesson`` (on the GPU, or on
the CPU simulator). The model is exported with ``torch.onnx.export(dynamo=True)``, whose translation table
maps ``torch.ops.cudacourse_l07.swish`` to that node. Prints the largest difference between ONNX Runtime's
output and PyTorch's, writes DIR/swish_mlp.onnx (DIR: $OUT, else a temporary folder), and exits non-zero
if they differ by more than 1e-5.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxscript
import torch
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

import cudacourse as cc
from cudacourse import settings

# The node's schema (one float tensor in, one out), registered with ONNX so that the exporter knows the node
# has one output; onnxruntime-extensions' domain for Python ops is ai.onnx.contrib.
onnx.defs.register_schema(onnx.defs.OpSchema(
    "Swish", "ai.onnx.contrib", 1,
    inputs=[onnx.defs.OpSchema.FormalParameter("X", "T")],
    outputs=[onnx.defs.OpSchema.FormalParameter("Y", "T")],
    type_constraints=[("T", ["tensor(float)"], "float32 only, as the kernel")],
))
CONTRIB = onnxscript.values.Opset("ai.onnx.contrib", 1)


def swish_onnx(x: onnxscript.FLOAT) -> onnxscript.FLOAT:
    """The ONNX node the exporter writes for torch.ops.cudacourse_l07.swish: ai.onnx.contrib::Swish (traced)."""
    return CONTRIB.Swish(x)


class SwishMLP(torch.nn.Module):
    """Linear, swish (the custom op), linear."""

    def __init__(self, swish: object) -> None:
        super().__init__()
        self.fc1, self.fc2, self.swish = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4), swish

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.swish(self.fc1(x)))  # type: ignore[operator]


def main() -> int:
    """Export the model, run it in ONNX Runtime with the kernel-backed custom op, compare with PyTorch."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", default="solution", choices=["solution", "student"])
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp())
    args = ap.parse_args()
    import onnxruntime as ort

    with settings.using(impl=args.impl):
        m = cc.lesson("07_host_side")
        sys.path.insert(0, str(m.dir))
        from custom_op import swish  # noqa: E402  (the learner's op, task 7.3)

        calls: list[tuple] = []  # the shapes ONNX Runtime called the kernel with

        @onnx_op(op_type="Swish", domain="ai.onnx.contrib", inputs=[PyCustomOpDef.dt_float],
                 outputs=[PyCustomOpDef.dt_float])
        def swish_ort(x: np.ndarray) -> np.ndarray:
            """ONNX Runtime calls this for every ai.onnx.contrib::Swish node: the lesson's kernel runs it."""
            calls.append(x.shape)
            t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(m.device)
            y = torch.empty_like(t)
            m.swish_forward(t, y, t.numel(), 0)
            return y.cpu().numpy()

        torch.manual_seed(0)
        model = SwishMLP(swish).to(m.device).eval()
        x = torch.randn(8, 16, device=m.device)
        with torch.no_grad():
            ref = model(x).cpu().numpy()
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "swish_mlp.onnx"
        program = torch.onnx.export(model, (x,), dynamo=True,
                                    custom_translation_table={torch.ops.cudacourse_l07.swish.default: swish_onnx})
        program.save(str(path))
        so = ort.SessionOptions()
        so.register_custom_ops_library(get_library_path())
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x.cpu().numpy()})
    nodes = [f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in program.model_proto.graph.node]
    diff = float(np.abs(got - ref).max())
    print(f"ONNX graph nodes: {', '.join(nodes)}")
    print(f"kernels on: {m.backend}; ONNX Runtime {ort.__version__}; the kernel ran for {len(calls)} node call(s) "
          f"{calls}; max |ORT - PyTorch| = {diff:.3g}; model: {path}")
    ok = diff <= 1e-5 and "ai.onnx.contrib::Swish" in nodes and len(calls) > 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
