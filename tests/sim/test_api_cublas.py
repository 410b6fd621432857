"""The cuBLAS subset on the simulator against torch matmul: every op combination, leading dimensions
larger than the matrices, alpha/beta (beta = 0 never reads C), fp32/fp16/bf16 through cublasGemmEx and the
strided-batched forms; unsupported combinations and entry points refused by name."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch
from conftest import build

from cudacourse.errors import CompileError, OutOfBoundsError, UnsupportedError
from cudacourse.sim.paths import RUNTIME_DIR

SRC = r"""
#include <cuda_runtime.h>
#include <cublas_v2.h>

// dtype: 0 fp32, 1 fp16, 2 bf16 for A/B; ctype likewise for C; compute: 0 COMPUTE_32F, 1 FAST_TF32, 2 16F.
// Matrices live in the given buffers as cuBLAS sees them (column-major, leading dimensions as passed).
static cudaDataType dt(int t) { return t == 0 ? CUDA_R_32F : t == 1 ? CUDA_R_16F : CUDA_R_16BF; }
void gemm(const void* A, const void* B, void* C, int m, int n, int k, int lda, int ldb, int ldc, int ta, int tb,
          float alpha, float beta, int dtype, int ctype, int compute, int batch, long long sA, long long sB,
          long long sC, int* status) {
    cublasHandle_t h;
    cublasCreate(&h);
    cudaStream_t st; cudaStreamCreate(&st);
    cublasSetStream(h, st);
    cublasSetMathMode(h, compute == 1 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasComputeType_t ct = compute == 0 ? CUBLAS_COMPUTE_32F : compute == 1 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                              : CUBLAS_COMPUTE_16F;
    __half ha = __float2half(alpha), hb = __float2half(beta);
    const void* pa = compute == 2 ? (const void*)&ha : (const void*)&alpha;
    const void* pb = compute == 2 ? (const void*)&hb : (const void*)&beta;
    cublasStatus_t s;
    if (dtype == 0 && ctype == 0 && compute == 0 && batch == 1)
        s = cublasSgemm(h, oa, ob, m, n, k, &alpha, (const float*)A, lda, (const float*)B, ldb, &beta, (float*)C, ldc);
    else if (dtype == 0 && ctype == 0 && compute == 0)
        s = cublasSgemmStridedBatched(h, oa, ob, m, n, k, &alpha, (const float*)A, lda, sA, (const float*)B, ldb, sB,
                                      &beta, (float*)C, ldc, sC, batch);
    else if (batch == 1)
        s = cublasGemmEx(h, oa, ob, m, n, k, pa, A, dt(dtype), lda, B, dt(dtype), ldb, pb, C, dt(ctype), ldc, ct,
                         CUBLAS_GEMM_DEFAULT);
    else
        s = cublasGemmStridedBatchedEx(h, oa, ob, m, n, k, pa, A, dt(dtype), lda, sA, B, dt(dtype), ldb, sB, pb, C,
                                       dt(ctype), ldc, sC, batch, ct, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
    cudaStream_t got; cublasGetStream(h, &got);
    int hs[2] = {(int)s, got == st};
    cudaMemcpy(status, hs, sizeof hs, cudaMemcpyHostToDevice);  // (host code cannot write device memory)
    cublasDestroy(h);
    cudaStreamDestroy(st);
}
// the launcher binding needs one pointer type per parameter: one entry per dtype
void gemm_f32(const float* A, const float* B, float* C, int m, int n, int k, int lda, int ldb, int ldc, int ta, int tb,
              float alpha, float beta, int compute, int batch, long long sA, long long sB, long long sC, int* status) {
    gemm(A, B, C, m, n, k, lda, ldb, ldc, ta, tb, alpha, beta, 0, 0, compute, batch, sA, sB, sC, status);
}
void gemm_f16(const __half* A, const __half* B, __half* C, int m, int n, int k, int lda, int ldb, int ldc, int ta,
              int tb, float alpha, float beta, int compute, int batch, long long sA, long long sB, long long sC,
              int* status) {
    gemm(A, B, C, m, n, k, lda, ldb, ldc, ta, tb, alpha, beta, 1, 1, compute, batch, sA, sB, sC, status);
}
void gemm_f16_f32(const __half* A, const __half* B, float* C, int m, int n, int k, int lda, int ldb, int ldc, int ta,
                  int tb, float alpha, float beta, int batch, long long sA, long long sB, long long sC, int* status) {
    gemm(A, B, C, m, n, k, lda, ldb, ldc, ta, tb, alpha, beta, 1, 0, 0, batch, sA, sB, sC, status);
}
void gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int m, int n, int k, int lda,
               int ldb, int ldc, int ta, int tb, float alpha, float beta, int batch, long long sA, long long sB,
               long long sC, int* status) {
    gemm(A, B, C, m, n, k, lda, ldb, ldc, ta, tb, alpha, beta, 2, 2, 0, batch, sA, sB, sC, status);
}
// a combination cuBLAS does not list (bf16 inputs, fp16 output) and an invalid leading dimension
void bad_calls(const __nv_bfloat16* A, __half* C, int* status) {
    cublasHandle_t h; cublasCreate(&h);
    float one = 1.0f, zero = 0.0f;
    int hs[3];
    hs[0] = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, A, CUDA_R_16BF, 4, A, CUDA_R_16BF, 4, &zero,
                             C, CUDA_R_16F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    hs[1] = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, (const float*)A, 3, (const float*)A, 4, &zero,
                            (float*)C, 4);
    hs[2] = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, A, CUDA_R_16BF, 4, A, CUDA_R_16BF, 4, &zero,
                             C, CUDA_R_16BF, 4, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(status, hs, sizeof hs, cudaMemcpyHostToDevice);
    cublasDestroy(h);
}
"""

DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def lib():
    m = build(SRC, "cublas_api.cu")
    yield m
    m.close()


def _colmajor(rows: int, cols: int, ld: int, batch: int, stride: int, dtype: torch.dtype, g: torch.Generator):
    """A buffer holding ``batch`` column-major rows x cols matrices with leading dimension ld, padding NaN."""
    buf = torch.full((stride * (batch - 1) + ld * cols,), float("nan"), dtype=torch.float32)
    mats = []
    for b in range(batch):
        x = torch.randn(rows, cols, generator=g)
        view = buf[b * stride:b * stride + ld * cols].view(cols, ld)
        view[:, :rows] = x.t()
        mats.append(x)
    return buf.to(dtype), torch.stack(mats).to(dtype).float()


def _case(lib, kind, m, n, k, ta, tb, alpha, beta, batch=1, compute=0, pad=(3, 5, 2), seed=0):
    g = torch.Generator().manual_seed(seed)
    in_dt = DT["f16" if kind == "f16_f32" else kind]
    out_dt = torch.float32 if kind in ("f32", "f16_f32") else in_dt
    ar, ac = (k, m) if ta else (m, k)
    br, bc = (n, k) if tb else (k, n)
    lda, ldb, ldc = ar + pad[0], br + pad[1], m + pad[2]
    sA, sB, sC = lda * ac + 7, ldb * bc + 3, ldc * n + 5
    A, Am = _colmajor(ar, ac, lda, batch, sA, in_dt, g)
    B, Bm = _colmajor(br, bc, ldb, batch, sB, in_dt, g)
    C, Cm = _colmajor(m, n, ldc, batch, sC, out_dt, g)
    if beta == 0:
        C = torch.full_like(C, float("nan"))  # beta == 0 must not read C
    C0 = C.clone()
    status = torch.full((2,), -1, dtype=torch.int32)
    common = [A, B, C, m, n, k, lda, ldb, ldc, ta, tb, alpha, beta]
    if kind in ("f32", "f16"):
        lib.call(f"gemm_{kind}", [*common, compute, batch, sA, sB, sC, status])
    else:
        lib.call(f"gemm_{kind}", [*common, batch, sA, sB, sC, status])
    assert status.tolist() == [0, 1], f"cuBLAS status {status.tolist()}"
    opA = Am.transpose(1, 2) if ta else Am
    opB = Bm.transpose(1, 2) if tb else Bm
    ref = alpha * (opA.double() @ opB.double())
    if beta != 0:
        ref = ref + beta * Cm.double()
    got = C.float()
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1e-1}[out_dt if out_dt != torch.float32 else in_dt]
    for b in range(batch):
        mat = got[b * sC:b * sC + ldc * n].view(n, ldc)
        torch.testing.assert_close(mat[:, :m].t(), ref[b].float(), rtol=tol, atol=tol)
        # the padding rows of C (below m, inside ldc) are untouched
        pad_now = mat[:, m:]
        pad_was = C0.float()[b * sC:b * sC + ldc * n].view(n, ldc)[:, m:]
        assert torch.equal(pad_now.isnan(), pad_was.isnan())
        assert torch.equal(torch.nan_to_num(pad_now), torch.nan_to_num(pad_was))


@pytest.mark.parametrize("ta, tb", [(0, 0), (0, 1), (1, 0), (1, 1)], ids=["NN", "NT", "TN", "TT"])
def test_sgemm_every_op_combination(lib, ta, tb):
    _case(lib, "f32", 13, 9, 7, ta, tb, 1.5, 0.0)
    _case(lib, "f32", 5, 17, 11, ta, tb, -0.5, 2.0, seed=1)


@pytest.mark.parametrize("ta, tb", [(0, 0), (0, 1), (1, 0), (1, 1)], ids=["NN", "NT", "TN", "TT"])
def test_strided_batched(lib, ta, tb):
    _case(lib, "f32", 6, 7, 5, ta, tb, 1.0, 0.5, batch=3)
    _case(lib, "f16", 6, 7, 5, ta, tb, 1.0, 0.0, batch=2, seed=2)
    _case(lib, "bf16", 6, 7, 5, ta, tb, 2.0, 1.0, batch=2, seed=3)


@pytest.mark.parametrize("kind, compute", [("f32", 1), ("f16", 0), ("f16", 2), ("f16_f32", 0), ("bf16", 0)],
                         ids=["f32-tf32", "f16-32F", "f16-16F", "f16-in-f32-out", "bf16"])
@pytest.mark.parametrize("ta, tb", [(0, 0), (1, 1), (0, 1)], ids=["NN", "TT", "NT"])
def test_gemm_ex_types(lib, kind, compute, ta, tb):
    _case(lib, kind, 11, 6, 9, ta, tb, 1.0, 0.0, compute=compute)
    _case(lib, kind, 4, 10, 3, ta, tb, 0.75, -1.0, compute=compute, seed=4)


def test_unsupported_combinations_and_bad_arguments(lib):
    A = torch.zeros(16, dtype=torch.bfloat16)
    C = torch.zeros(16, dtype=torch.float16)
    status = torch.full((3,), -1, dtype=torch.int32)
    lib.call("bad_calls", [A, C, status])
    assert status.tolist() == [15, 7, 15], "NOT_SUPPORTED, INVALID_VALUE (lda < m), NOT_SUPPORTED"


def test_leading_dimension_past_the_buffer_is_out_of_bounds(lib):
    """A valid-looking lda whose matrix does not fit the buffer: checked mode stops the read and names it."""
    m = n = k = 8
    A = torch.randn(m * k - 5)  # too short by 5 elements
    B = torch.randn(k * n)
    C = torch.zeros(m * n)
    status = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(OutOfBoundsError):
        lib.call("gemm_f32", [A, B, C, m, n, k, m, k, m, 0, 0, 1.0, 0.0, 0, 1, 0, 0, 0, status])


def test_refused_entry_points_name_themselves(sim):
    src = ("#include <cublas_v2.h>\nvoid f(double* a) {\n    cublasHandle_t h; cublasCreate(&h);\n    double x = 1;\n"
           "    cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &x, a, 1, a, 1, &x, a, 1);\n}\n")
    with pytest.raises(CompileError) as e:
        sim(src, "refused.cu")
    assert "not available on the simulator: cublasDgemm" in str(e.value) and e.value.line == 5
    with pytest.raises(UnsupportedError, match="not available on the simulator"):
        sim("#include <cublasLt.h>\nvoid f(float* a) {}\n", "lt.cu")


def test_a_file_that_calls_no_gemm_instantiates_none(tmp_path):
    """The GEMMs are templates, instantiated only in a file that calls one (ccsim_cublas.h says why: as plain
    functions they doubled every small kernel's compile). Emitting every inline and static function
    (-fkeep-inline-functions -fkeep-static-functions) shows what including the header instantiated: no GEMM for a
    file without a call, and the one it calls for a file with a cublasSgemm."""
    def gemms(text: str) -> set[str]:
        (tmp_path / "t.cpp").write_text('#include "ccsim.h"\n' + text)
        subprocess.run(["g++", "-std=c++17", "-O0", "-w", "-fPIC", "-I", str(RUNTIME_DIR), "-fkeep-inline-functions",
                        "-fkeep-static-functions", "-c", "t.cpp", "-o", "t.o"], cwd=tmp_path, check=True)
        names = subprocess.run(["nm", "-C", str(tmp_path / "t.o")], capture_output=True, text=True, check=True)
        return {m.group(1) for m in re.finditer(r"cublasStatus_t ccsim::blas::gemm<([^>]*)>\(", names.stdout)}

    assert gemms("") == set()
    called = gemms("void f(cublasHandle_t h, const float* a, float* c) { float one = 1;\n"
                   "  cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &one, c, 4); }\n")
    assert called == {"float, float, float, float"}
