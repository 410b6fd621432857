// ccsim_cublas.h - a cuBLAS subset for the CPU simulator (what #include <cublas_v2.h> gets).
//
// Handles and streams: cublasCreate/Destroy, cublasSetStream/GetStream, cublasSetMathMode/GetMathMode,
// cublasSetPointerMode/GetPointerMode, cublasGetStatusName/String.
// GEMMs: cublasSgemm, cublasHgemm, cublasSgemmStridedBatched, cublasGemmEx, cublasGemmStridedBatchedEx,
// with cuBLAS's documented column-major contract:
//     C = alpha * op(A) * op(B) + beta * C,   op(A) m x k, op(B) k x n, C m x n,
//     element (i, j) of a column-major matrix X with leading dimension ldX is X[i + j * ldX];
//     op N: A is m x k (lda >= max(1, m)); op T (and C, the same for real types): A is k x m (lda >= max(1, k));
//     likewise B (ldb >= k for N, >= n for T) and ldc >= max(1, m); beta == 0 never reads C.
// The product runs as a simulated kernel (one CUDA thread per element of C), so checked mode reports a
// leading dimension or pointer that reaches outside a buffer like any kernel access. Accumulation is in
// float. Compute types: CUBLAS_COMPUTE_32F (and _PEDANTIC); CUBLAS_COMPUTE_32F_FAST_TF32/_FAST_16F/
// _FAST_16BF and CUBLAS_TF32_TENSOR_OP_MATH are computed as full fp32 (the GPU rounds inputs to TF32 or
// 16 bits: results there differ by that rounding); CUBLAS_COMPUTE_16F (and _PEDANTIC) on half data with
// half alpha/beta, accumulated in float and rounded once (the GPU may accumulate in half).
// Type combinations that cuBLAS does not list for cublasGemmEx return CUBLAS_STATUS_NOT_SUPPORTED.
// Anything else of cuBLAS/cuBLASLt that code commonly calls fails the build with
// "not available on the simulator: NAME"; names not listed are simply undeclared.
#ifndef CCSIM_CUBLAS_H
#define CCSIM_CUBLAS_H

#include <algorithm>

// ---------------------------------------------------------------------------------------------------
// Types and enums (values as in cublas_api.h and library_types.h)
// ---------------------------------------------------------------------------------------------------
#ifndef CCSIM_HAVE_CUDA_DATA_TYPE
#define CCSIM_HAVE_CUDA_DATA_TYPE
typedef enum cudaDataType_t {
    CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_8I = 3, CUDA_C_32F = 4, CUDA_C_64F = 5, CUDA_C_16F = 6,
    CUDA_R_32I = 10, CUDA_R_16BF = 14, CUDA_C_16BF = 15,
} cudaDataType;
#endif
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2, CUBLAS_OP_HERMITAN = 2, CUBLAS_OP_CONJG = 3 } cublasOperation_t;
typedef enum {
    CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2, CUBLAS_TF32_TENSOR_OP_MATH = 3,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
} cublasMath_t;
typedef enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 } cublasPointerMode_t;
typedef enum {
    CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_16F_PEDANTIC = 65, CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69, CUBLAS_COMPUTE_32F_FAST_16F = 74, CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77, CUBLAS_COMPUTE_64F = 70, CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72, CUBLAS_COMPUTE_32I_PEDANTIC = 73,
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DFALT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
               CUBLAS_GEMM_DFALT_TENSOR_OP = 99 } cublasGemmAlgo_t;
struct cublasContext { cudaStream_t stream; cublasMath_t math; cublasPointerMode_t pointer_mode; };
typedef cublasContext* cublasHandle_t;

// ---------------------------------------------------------------------------------------------------
// Handle and stream
// ---------------------------------------------------------------------------------------------------
static inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH, CUBLAS_POINTER_MODE_HOST};
    return CUBLAS_STATUS_SUCCESS;
}
#define cublasCreate_v2 cublasCreate
static inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
#define cublasDestroy_v2 cublasDestroy
// cublasSet<Name>/cublasGet<Name>: one setting of the handle each (a null handle: not initialised).
#define CCSIM_CUBLAS_SETTING(Name, T, field)                                                                   \
    static inline cublasStatus_t cublasSet##Name(cublasHandle_t h, T v) {                                      \
        if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;                                                          \
        h->field = v; return CUBLAS_STATUS_SUCCESS;                                                            \
    }                                                                                                          \
    static inline cublasStatus_t cublasGet##Name(cublasHandle_t h, T* v) {                                     \
        if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;                                                          \
        if (!v) return CUBLAS_STATUS_INVALID_VALUE;                                                            \
        *v = h->field; return CUBLAS_STATUS_SUCCESS;                                                           \
    }
CCSIM_CUBLAS_SETTING(Stream, cudaStream_t, stream)
CCSIM_CUBLAS_SETTING(MathMode, cublasMath_t, math)
// Both pointer modes read the scalar where it is: device and host memory are one address space here.
CCSIM_CUBLAS_SETTING(PointerMode, cublasPointerMode_t, pointer_mode)
#undef CCSIM_CUBLAS_SETTING
#define cublasSetStream_v2 cublasSetStream
#define cublasGetStream_v2 cublasGetStream
#define cublasSetPointerMode_v2 cublasSetPointerMode
#define cublasGetPointerMode_v2 cublasGetPointerMode
static inline const char* cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}
static inline const char* cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "success";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
        case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
        case CUBLAS_STATUS_LICENSE_ERROR: return "license error";
    }
    return "unknown error";
}

// ---------------------------------------------------------------------------------------------------
// The GEMM core: one simulated CUDA thread per element of C, blockIdx.y the batch
// ---------------------------------------------------------------------------------------------------
namespace ccsim {
namespace blas {
template <class TA, class TB, class TC, class TS>
static inline cublasStatus_t gemm(const char* name, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                  int m, int n, int k, const TS* alpha, const TA* A, int lda, long long sA,
                                  const TB* B, int ldb, long long sB, const TS* beta, TC* C, int ldc, long long sC,
                                  int batch, const char* file, int line) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) || m < 0 || n < 0 || k < 0 || batch < 0 ||
        lda < std::max(1, tA ? k : m) || ldb < std::max(1, tB ? n : k) || ldc < std::max(1, m) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    float al, be;
    {  // (device pointer mode: alpha and beta live in device memory)
        ::ccsim::DevAccess open;
        al = (float)*alpha; be = (float)*beta;
    }
    const long long mn = (long long)m * n;
    const unsigned threads = 256;
    dim3 grid((unsigned)((mn + threads - 1) / threads), (unsigned)batch);
    auto body = [](const TA* A, const TB* B, TC* C, int m, int k, int lda, int ldb, int ldc, long long sA,
                   long long sB, long long sC, bool tA, bool tB, float al, float be, long long mn) {
        long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (idx >= mn) return;
        const int i = (int)(idx % m), j = (int)(idx / m);
        const TA* a = A + sA * blockIdx.y;
        const TB* b = B + sB * blockIdx.y;
        TC* c = C + sC * blockIdx.y;
        float acc = 0.0f;
        for (int p = 0; p < k; ++p) {
            float x = (float)(tA ? a[p + (long long)i * lda] : a[i + (long long)p * lda]);
            float y = (float)(tB ? b[j + (long long)p * ldb] : b[p + (long long)j * ldb]);
            acc += x * y;
        }
        TC* out = c + i + (long long)j * ldc;
        // beta == 0: C is not read (it may hold NaN), as cuBLAS documents
        *out = be == 0.0f ? TC(al * acc) : TC(al * acc + be * (float)*out);
    };
    ccsim_rt_drain(h->stream);  // runs at once (on the default stream), after the handle's stream's queued work
    ::ccsim::launch(name, file, line, ::ccsim::LaunchCfg(grid, dim3(threads)),
                    [&](auto... x) { body(x...); }, A, B, C, m, k, lda, ldb, ldc, sA, sB, sC, tA, tB, al, be, mn);
    return CUBLAS_STATUS_SUCCESS;
}

// cublasGemmEx's type table (cuBLAS documentation, cublasGemmEx): which A/B/C types each compute type takes
static inline bool ex_supported(cudaDataType a, cudaDataType b, cudaDataType c, cublasComputeType_t ct) {
    if (a != b) return false;
    switch (ct) {
        case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC:
            return a == CUDA_R_16F && c == CUDA_R_16F;
        case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC:
            return (a == CUDA_R_32F && c == CUDA_R_32F) || (a == CUDA_R_16F && (c == CUDA_R_16F || c == CUDA_R_32F)) ||
                   (a == CUDA_R_16BF && (c == CUDA_R_16BF || c == CUDA_R_32F));
        case CUBLAS_COMPUTE_32F_FAST_TF32: case CUBLAS_COMPUTE_32F_FAST_16F: case CUBLAS_COMPUTE_32F_FAST_16BF:
            return a == CUDA_R_32F && c == CUDA_R_32F;
        default:
            return false;
    }
}
template <class TA, class TS>
static inline cublasStatus_t ex_c(const char* name, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                  int n, int k, const void* al, const TA* A, int lda, long long sA, const TA* B,
                                  int ldb, long long sB, const void* be, void* C, cudaDataType ct, int ldc,
                                  long long sC, int batch, const char* f, int l) {
    const TS* a = (const TS*)al; const TS* b = (const TS*)be;
    if (ct == CUDA_R_32F) return gemm(name, h, ta, tb, m, n, k, a, A, lda, sA, B, ldb, sB, b, (float*)C, ldc, sC, batch, f, l);
    if (ct == CUDA_R_16F) return gemm(name, h, ta, tb, m, n, k, a, A, lda, sA, B, ldb, sB, b, (__half*)C, ldc, sC, batch, f, l);
    return gemm(name, h, ta, tb, m, n, k, a, A, lda, sA, B, ldb, sB, b, (__nv_bfloat16*)C, ldc, sC, batch, f, l);
}
template <class Lazy = void>
static inline cublasStatus_t gemm_ex(const char* name, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                     int m, int n, int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                     long long sA, const void* B, cudaDataType bt, int ldb, long long sB,
                                     const void* beta, void* C, cudaDataType ct, int ldc, long long sC, int batch,
                                     cublasComputeType_t comp, const char* f, int l) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!ex_supported(at, bt, ct, comp)) return CUBLAS_STATUS_NOT_SUPPORTED;
    const bool half_scale = comp == CUBLAS_COMPUTE_16F || comp == CUBLAS_COMPUTE_16F_PEDANTIC;
    if (at == CUDA_R_32F)
        return ex_c<float, float>(name, h, ta, tb, m, n, k, alpha, (const float*)A, lda, sA, (const float*)B, ldb, sB, beta, C, ct, ldc, sC, batch, f, l);
    if (at == CUDA_R_16F) {
        if (half_scale)
            return ex_c<__half, __half>(name, h, ta, tb, m, n, k, alpha, (const __half*)A, lda, sA, (const __half*)B, ldb, sB, beta, C, ct, ldc, sC, batch, f, l);
        return ex_c<__half, float>(name, h, ta, tb, m, n, k, alpha, (const __half*)A, lda, sA, (const __half*)B, ldb, sB, beta, C, ct, ldc, sC, batch, f, l);
    }
    return ex_c<__nv_bfloat16, float>(name, h, ta, tb, m, n, k, alpha, (const __nv_bfloat16*)A, lda, sA, (const __nv_bfloat16*)B, ldb, sB, beta, C, ct, ldc, sC, batch, f, l);
}
}  // namespace blas
}  // namespace ccsim

// ---------------------------------------------------------------------------------------------------
// Public GEMMs
// ---------------------------------------------------------------------------------------------------
// Each is a template (the unused parameter Lazy) so that its GEMM kernels are instantiated only in a file that
// calls it: as plain functions they instantiated all twelve in every file that includes the simulator's header,
// and a small kernel's compile took 1.4 CPU-s instead of 0.6 (g++ 12, checked mode's flags, 2-core machine).
// A call reads the same; only taking a function's address needs the template argument (&cublasSgemm<>).
template <class Lazy = void>
static inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda, const float* B, int ldb,
                                         const float* beta, float* C, int ldc,
                                         const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim::blas::gemm("cublasSgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, f, l);
}
#define cublasSgemm_v2 cublasSgemm
template <class Lazy = void>
static inline cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                         const __half* alpha, const __half* A, int lda, const __half* B, int ldb,
                                         const __half* beta, __half* C, int ldc,
                                         const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim::blas::gemm("cublasHgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, f, l);
}
template <class Lazy = void>
static inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                       int m, int n, int k, const float* alpha, const float* A, int lda,
                                                       long long sA, const float* B, int ldb, long long sB,
                                                       const float* beta, float* C, int ldc, long long sC, int batch,
                                                       const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim::blas::gemm("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C,
                             ldc, sC, batch, f, l);
}
template <class Lazy = void>
static inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          const void* B, cudaDataType bt, int ldb, const void* beta, void* C,
                                          cudaDataType ct, int ldc, cublasComputeType_t comp, cublasGemmAlgo_t,
                                          const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim::blas::gemm_ex("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct,
                                ldc, 0, 1, comp, f, l);
}
template <class Lazy = void>
static inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                        int m, int n, int k, const void* alpha, const void* A,
                                                        cudaDataType at, int lda, long long sA, const void* B,
                                                        cudaDataType bt, int ldb, long long sB, const void* beta,
                                                        void* C, cudaDataType ct, int ldc, long long sC, int batch,
                                                        cublasComputeType_t comp, cublasGemmAlgo_t,
                                                        const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
    return ccsim::blas::gemm_ex("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb,
                                sB, beta, C, ct, ldc, sC, batch, comp, f, l);
}

// ---------------------------------------------------------------------------------------------------
// Refused: a call stops the build with "not available on the simulator: NAME" at the caller's line.
// ---------------------------------------------------------------------------------------------------
#define CCSIM_BLAS_REFUSE(name) \
    extern "C++" cublasStatus_t name(...) __attribute__((error("not available on the simulator: " #name)));
CCSIM_BLAS_REFUSE(cublasDgemm) CCSIM_BLAS_REFUSE(cublasCgemm) CCSIM_BLAS_REFUSE(cublasZgemm)
CCSIM_BLAS_REFUSE(cublasSgemmBatched) CCSIM_BLAS_REFUSE(cublasGemmBatchedEx) CCSIM_BLAS_REFUSE(cublasHgemmStridedBatched)
CCSIM_BLAS_REFUSE(cublasDgemmStridedBatched) CCSIM_BLAS_REFUSE(cublasSgemmEx) CCSIM_BLAS_REFUSE(cublasLtCreate)
CCSIM_BLAS_REFUSE(cublasLtMatmul) CCSIM_BLAS_REFUSE(cublasLtDestroy) CCSIM_BLAS_REFUSE(cublasLtMatmulDescCreate)
CCSIM_BLAS_REFUSE(cublasLtMatrixLayoutCreate) CCSIM_BLAS_REFUSE(cublasLtMatmulPreferenceCreate)
CCSIM_BLAS_REFUSE(cublasLtMatmulAlgoGetHeuristic) CCSIM_BLAS_REFUSE(cublasSgemv) CCSIM_BLAS_REFUSE(cublasDgemv)
CCSIM_BLAS_REFUSE(cublasSaxpy) CCSIM_BLAS_REFUSE(cublasSdot) CCSIM_BLAS_REFUSE(cublasSnrm2) CCSIM_BLAS_REFUSE(cublasSscal)
CCSIM_BLAS_REFUSE(cublasSgeam) CCSIM_BLAS_REFUSE(cublasStrsm) CCSIM_BLAS_REFUSE(cublasSetWorkspace)
CCSIM_BLAS_REFUSE(cublasSetMatrix) CCSIM_BLAS_REFUSE(cublasGetMatrix) CCSIM_BLAS_REFUSE(cublasSetVector)
CCSIM_BLAS_REFUSE(cublasGetVector)
#undef CCSIM_BLAS_REFUSE

#endif  // CCSIM_CUBLAS_H
