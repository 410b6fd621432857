"""Check an installed ``cudacourse-swish-ext`` wheel: values, gradient, torch.compile, bad input.

Run it with the Python where the wheel is installed: ``python /path/to/check_wheel.py``. This folder is
taken off ``sys.path`` first, so ``import swish_ext`` finds the installed package, not the source.
Prints one line per check and a closing ``N passed, N failed`` line; exits non-zero on any failure. On a
CUDA build it checks the CUDA implementation too, on a non-default stream.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def main() -> int:
    """Run the checks; return the process exit status."""
    import swish_ext

    results: list[tuple[str, bool, str]] = []

    def run(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            results.append((name, True, ""))
        except Exception as e:  # noqa: BLE001  (report every failure, then the total)
            results.append((name, False, f"{type(e).__name__}: {e}"))

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

    def values(dev: str) -> None:
        x = torch.randn(4097, device=dev, generator=None) * 4
        torch.testing.assert_close(swish_ext.swish(x), x * torch.sigmoid(x), rtol=1e-5, atol=1e-6)

    def gradient(dev: str) -> None:
        x = (torch.randn(1000, device=dev) * 4).requires_grad_(True)
        swish_ext.swish(x).sum().backward()
        s = torch.sigmoid(x.detach())
        torch.testing.assert_close(x.grad, s * (1 + x.detach() * (1 - s)), rtol=1e-5, atol=1e-6)

    def compiled(dev: str) -> None:
        f = torch.compile(lambda t: swish_ext.swish(t) * 2, fullgraph=True, backend="aot_eager")
        x = torch.randn(513, device=dev)
        torch.testing.assert_close(f(x), 2 * x * torch.sigmoid(x), rtol=1e-5, atol=1e-6)

    def bad_dtype(dev: str) -> None:
        try:
            swish_ext.swish(torch.randn(8, device=dev, dtype=torch.float64))
        except RuntimeError as e:
            assert "'x' must be float32" in str(e), str(e)
            return
        raise AssertionError("a float64 input was accepted")

    for dev in devices:
        for name, fn in [("values", values), ("gradient", gradient), ("torch.compile fullgraph", compiled),
                         ("float64 refused naming 'x'", bad_dtype)]:
            run(f"{name} ({dev})", lambda fn=fn, dev=dev: fn(dev))
    if torch.cuda.is_available():
        def stream() -> None:
            x = torch.randn(1 << 22, device="cuda")
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                y = swish_ext.swish(x) + 0
            torch.cuda.current_stream().wait_stream(s)
            torch.testing.assert_close(y, x * torch.sigmoid(x), rtol=1e-5, atol=1e-6)
        run("non-default stream (cuda)", stream)
    for name, ok, why in results:
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {why}" if why else ""))
    passed = sum(ok for _, ok, _ in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
