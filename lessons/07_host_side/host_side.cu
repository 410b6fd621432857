// ====================================================================================================
// Lesson 07: the host side. Streams, pinned memory and events; CUDA graphs; kernels for a custom op.
//
// The kernels here are simple on purpose: what this lesson teaches happens in the host code around
// them. A GPU has copy engines that move data over PCIe/NVLink while the SMs compute, but only if the
// host memory is pinned (page-locked) and the copies and kernels are issued on different streams; and
// a step made of many small kernels is bound by launch overhead, which a CUDA graph removes by
// submitting the whole step at once.
//
// Versions (each launcher is callable from Python as m.<name>(...), tensors for pointers):
//   pipeline_stage_in / pipeline_run / pipeline_stage_out
//                        task 7.1  chunked copy-in, compute, copy-out over N streams; the per-feature
//                                  coefficients are uploaded once and every stream waits on their event
//   decode_eager         worked    a decode-like step of three small kernels, launched one by one
//   decode_graph         task 7.2  the same step captured once into a CUDA graph and replayed
//   swish_forward / swish_backward
//                        worked    y = x * sigmoid(x) and its gradient, on the caller's stream: the kernels
//                                  behind task 7.3's torch.library op (custom_op.py)
//
// Run it:
//   import cudacourse as cc; m = cc.lesson("07_host_side")
//   make check T=7.1                 (one task's graded checks; run it in the course's top folder)
//   make bench LESSONS=07_host_side  (timings, GPU only)
// On the CPU simulator, work on a created stream runs at synchronisation points in an adversarial order
// (most recently issued first): a missing cudaStreamWaitEvent gives a wrong answer there, not a lucky pass.
// ====================================================================================================

#include <cmath>
#include <cstdio>

constexpr int kBlock = 256;
constexpr int kMaxStreams = 8;

static inline int ceil_div(long long n, int per_block) { return (int)((n + per_block - 1) / per_block); }

// Report a failed runtime call with its line; the graded checks then fail on the wrong output.
#define CUDA_OK(call)                                                                                     \
    do {                                                                                                  \
        cudaError_t err_ = (call);                                                                        \
        if (err_ != cudaSuccess) fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
    } while (0)

// ----------------------------------------------------------------------------------------------------
// Part 1 (task 7.1): the chunked pipeline. Given: the buffers, the kernel, staging in and out.
// ----------------------------------------------------------------------------------------------------
// The pipeline's buffers live between calls: pinned host memory is slow to allocate (the driver locks
// the pages), so real programs allocate it once and reuse it.
static float* g_h_in = nullptr;    // pinned host input (n floats): "the data arriving from the host"
static float* g_h_out = nullptr;   // pinned host output (n floats)
static float* g_h_coef = nullptr;  // pinned host coefficients (2 * d floats: a, then b)
static float* g_d_buf = nullptr;   // device working buffer (n floats)
static float* g_d_coef = nullptr;  // device copy of the coefficients
static long long g_cap_n = 0;
static int g_cap_d = 0;
static cudaStream_t g_streams[kMaxStreams];
static bool g_have_streams = false;

// x[i] -> repeat `iters` times: v = a[j] * v + b[j], with j = (offset + i) % d the element's feature.
// `iters` sets the arithmetic per byte, so the benchmark can make compute as long as the copies.
__global__ void transform_kernel(float* __restrict__ x, const float* __restrict__ coef, int d, long long offset,
                                 int len, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    int j = (int)((offset + i) % d);
    float a = coef[j], b = coef[d + j], v = x[i];
    for (int k = 0; k < iters; ++k) v = a * v + b;
    x[i] = v;
}

// Contract: x holds n floats and coef 2 * d floats (on the backend's device). Copies both into pinned
// host buffers (allocated on first use and when n or d grows) and fills the pinned output with NaN.
void pipeline_stage_in(const float* x, const float* coef, long long n, int d) {
    if (n > g_cap_n) {
        if (g_h_in) { cudaFreeHost(g_h_in); cudaFreeHost(g_h_out); cudaFree(g_d_buf); }
        CUDA_OK(cudaMallocHost(&g_h_in, n * sizeof(float)));
        CUDA_OK(cudaHostAlloc(&g_h_out, n * sizeof(float), cudaHostAllocDefault));
        CUDA_OK(cudaMalloc(&g_d_buf, n * sizeof(float)));
        g_cap_n = n;
    }
    if (d > g_cap_d) {
        if (g_h_coef) { cudaFreeHost(g_h_coef); cudaFree(g_d_coef); }
        CUDA_OK(cudaMallocHost(&g_h_coef, 2 * d * sizeof(float)));
        CUDA_OK(cudaMalloc(&g_d_coef, 2 * d * sizeof(float)));
        g_cap_d = d;
    }
    CUDA_OK(cudaMemcpy(g_h_in, x, n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(g_h_coef, coef, 2 * d * sizeof(float), cudaMemcpyDeviceToHost));
    for (long long i = 0; i < n; ++i) g_h_out[i] = NAN;   // unwritten output reads as NaN
}

// Contract: copies the pinned output (n floats) into y.
void pipeline_stage_out(float* y, long long n) {
    CUDA_OK(cudaMemcpy(y, g_h_out, n * sizeof(float), cudaMemcpyHostToDevice));
}

// Contract: after pipeline_stage_in(x, coef, n, d), computes g_h_out = transform(g_h_in) chunk by chunk:
// nchunks chunks, chunk c on stream c % nstreams (1 <= nstreams <= 8), each chunk copied in, transformed
// and copied out on its stream. The coefficients are uploaded once, on stream 0, and `coef_ready` marks
// them. ms (device memory, 1 float): the pipeline's time by events (nominal host time on the simulator).
void pipeline_run(float* ms, long long n, int d, int nchunks, int nstreams, int iters) {
    if (nstreams < 1 || nstreams > kMaxStreams || nchunks < 1 || n <= 0 || d <= 0 || !g_h_in) {
        fprintf(stderr, "pipeline_run: need 1 <= nstreams <= %d, nchunks >= 1, and pipeline_stage_in first\n",
                kMaxStreams);
        return;
    }
    if (!g_have_streams) {  // blocking streams: the legacy default stream (the events below) waits for them
        for (int i = 0; i < kMaxStreams; ++i) CUDA_OK(cudaStreamCreate(&g_streams[i]));
        g_have_streams = true;
    }
    cudaEvent_t start, stop, coef_ready;
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    CUDA_OK(cudaEventCreateWithFlags(&coef_ready, cudaEventDisableTiming));
    CUDA_OK(cudaEventRecord(start, 0));
    CUDA_OK(cudaMemcpyAsync(g_d_coef, g_h_coef, 2 * d * sizeof(float), cudaMemcpyHostToDevice, g_streams[0]));
    CUDA_OK(cudaEventRecord(coef_ready, g_streams[0]));
    const long long chunk = (n + nchunks - 1) / nchunks;

    // TODO(task 7.1): the pipeline loop (~9 lines). For each chunk c (elements lo .. lo + len - 1 with
    // lo = c * chunk, len = min(chunk, n - lo); stop when len <= 0), on stream st = g_streams[c % nstreams]:
    //   1. make st wait for the coefficients (coef_ready) before anything of this chunk reads them,
    //   2. copy the chunk from g_h_in into g_d_buf (cudaMemcpyAsync on st),
    //   3. run transform_kernel over the chunk on st (its `offset` is lo: features are j = (lo + i) % d),
    //   4. copy the chunk from g_d_buf back to g_h_out (cudaMemcpyAsync on st).
    // Hint: every call here is asynchronous; the host waits below, on the `stop` event recorded on the
    // legacy default stream (which waits for every blocking stream). Without step 1 only stream 0's chunks
    // are ordered after the upload: the simulator runs the others first.
    (void)chunk;

    CUDA_OK(cudaEventRecord(stop, 0));
    CUDA_OK(cudaEventSynchronize(stop));
    float elapsed = -1.0f;
    CUDA_OK(cudaEventElapsedTime(&elapsed, start, stop));
    CUDA_OK(cudaMemcpy(ms, &elapsed, sizeof elapsed, cudaMemcpyHostToDevice));  // ms is device memory
    cudaEventDestroy(start); cudaEventDestroy(stop); cudaEventDestroy(coef_ready);
}

// ----------------------------------------------------------------------------------------------------
// Part 2: a decode-like step of three small kernels (worked), launched eagerly and as a CUDA graph
// ----------------------------------------------------------------------------------------------------
// One step on the state x (d floats) with a d x d weight W:  t = W x;  x = x + tanh(t);  x = rmsnorm(x).
// Each kernel does microseconds of work at small d, so launching them one by one costs about as much as
// running them: the step is launch-bound, as lesson 04's single-token decode is.

__global__ void matvec_kernel(const float* __restrict__ W, const float* __restrict__ x, float* __restrict__ t, int d) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= d) return;
    float acc = 0.0f;
    for (int c = 0; c < d; ++c) acc += W[(long long)r * d + c] * x[c];
    t[r] = acc;
}

__global__ void residual_tanh_kernel(float* __restrict__ x, const float* __restrict__ t, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < d) x[i] += tanhf(t[i]);
}

// One block of kBlock threads: x = x / sqrt(mean(x^2) + 1e-6).
__global__ void rmsnorm_kernel(float* x, int d) {
    __shared__ float partial[kBlock];
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += x[i] * x[i];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    float inv = rsqrtf(partial[0] / d + 1e-6f);
    for (int i = threadIdx.x; i < d; i += blockDim.x) x[i] *= inv;
}

// The three launches of one step, in order on stream s.
static void decode_step(cudaStream_t s, float* x, const float* W, float* t, int d) {
    matvec_kernel<<<ceil_div(d, kBlock), kBlock, 0, s>>>(W, x, t, d);
    residual_tanh_kernel<<<ceil_div(d, kBlock), kBlock, 0, s>>>(x, t, d);
    rmsnorm_kernel<<<1, kBlock, 0, s>>>(x, d);
}

// A blocking stream (cudaStreamCreate): it waits for work the caller queued earlier on the legacy default
// stream (PyTorch's default stream), so the launcher stays ordered with the caller's own work.
static cudaStream_t decode_stream() {
    static cudaStream_t s = nullptr;
    if (!s) CUDA_OK(cudaStreamCreate(&s));
    return s;
}

// Worked example. Contract: x holds d floats (updated in place), W d*d floats, t d floats of scratch;
// runs `steps` decode steps, 3 launches each, on the lesson's decode stream, and waits for them.
void decode_eager(float* x, const float* W, float* t, int d, int steps) {
    cudaStream_t s = decode_stream();
    for (int i = 0; i < steps; ++i) decode_step(s, x, W, t, d);
    CUDA_OK(cudaStreamSynchronize(s));
}

// Contract: as decode_eager, but one step is captured into a CUDA graph and the graph is launched `steps`
// times. info (device memory, 1 float): the number of nodes in the captured graph (3 for one step).
void decode_graph(float* x, const float* W, float* t, float* info, int d, int steps) {
    cudaStream_t s = decode_stream();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    // TODO(task 7.2): capture one step into `graph`, instantiate it into `exec`, launch it `steps` times on
    // s (~6 lines). The calls: cudaStreamBeginCapture / cudaStreamEndCapture around decode_step, then
    // cudaGraphInstantiate and cudaGraphLaunch.
    // Hint: during the capture nothing runs: the launches are recorded, with their arguments (the same
    // pointers every replay, so the graph updates x in place each time). A synchronising call inside the
    // capture (cudaMemcpy, cudaDeviceSynchronize) is an error: the simulator names it.
    CUDA_OK(cudaStreamSynchronize(s));
    if (graph) {
        size_t count = 0;
        CUDA_OK(cudaGraphGetNodes(graph, nullptr, &count));
        const float nodes = (float)count;
        CUDA_OK(cudaMemcpy(info, &nodes, sizeof nodes, cudaMemcpyHostToDevice));  // info is device memory
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
}

// ----------------------------------------------------------------------------------------------------
// Part 3: swish and its gradient (worked), on the caller's stream: the kernels behind task 7.3's op
// ----------------------------------------------------------------------------------------------------
// `stream` is a cudaStream_t passed as an integer (torch.cuda.current_stream().cuda_stream; 0 is the
// default stream): launching on PyTorch's current stream keeps the op ordered with the rest of the model.

__global__ void swish_forward_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] / (1.0f + expf(-x[i]));
}

// d/dx x sigmoid(x) = sigmoid(x) (1 + x (1 - sigmoid(x)))
__global__ void swish_backward_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                      float* __restrict__ dx, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) {
        float s = 1.0f / (1.0f + expf(-x[i]));
        dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

// Contract: y = swish(x) over n floats, launched on `stream`.
void swish_forward(const float* x, float* y, long long n, long long stream) {
    if (n <= 0) return;
    swish_forward_kernel<<<ceil_div(n, kBlock), kBlock, 0, (cudaStream_t)stream>>>(x, y, n);
}

// Contract: dx = dy * swish'(x) over n floats, launched on `stream`.
void swish_backward(const float* x, const float* dy, float* dx, long long n, long long stream) {
    if (n <= 0) return;
    swish_backward_kernel<<<ceil_div(n, kBlock), kBlock, 0, (cudaStream_t)stream>>>(x, dy, dx, n);
}
