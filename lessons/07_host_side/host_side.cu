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
//   pipeline_select / pipeline_stage_in / pipeline_run / pipeline_stage_out
//                        task 7.1  chunked copy-in, compute, copy-out over N streams; the per-feature
//                                  coefficients are uploaded once and every stream waits on their event
//   decode_eager         worked    a decode-like step of three short kernels, launched one by one
//   decode_graph         task 7.2  the same step captured once into a CUDA graph, instantiated, replayed
//                                  `steps` times; capture and replay are timed apart (host clock)
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

#include <chrono>
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
// the pages), so real programs allocate it once and reuse it. There are kSlots sets of them (the speed test
// of task 7.5 rotates over several, pipeline_select picks one); the names below are the current set's.
constexpr int kSlots = 4;
struct PipelineSlot {
    float *h_in = nullptr, *h_out = nullptr, *h_coef = nullptr, *d_buf = nullptr, *d_coef = nullptr;
    long long cap_n = 0;
    int cap_d = 0;
};
static PipelineSlot g_slots[kSlots];
static int g_slot = 0;
static float* g_h_in = nullptr;    // pinned host input (n floats): "the data arriving from the host"
static float* g_h_out = nullptr;   // pinned host output (n floats)
static float* g_h_coef = nullptr;  // pinned host coefficients (2 * d floats: a, then b)
static float* g_d_buf = nullptr;   // device working buffer (n floats)
static float* g_d_coef = nullptr;  // device copy of the coefficients
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

// Contract: makes buffer set `slot` (0 <= slot < kSlots) the one the other pipeline launchers use.
void pipeline_select(int slot) {
    if (slot < 0 || slot >= kSlots) {
        fprintf(stderr, "pipeline_select: slot %d is not in 0..%d\n", slot, kSlots - 1);
        return;
    }
    g_slot = slot;
    const PipelineSlot& b = g_slots[slot];
    g_h_in = b.h_in; g_h_out = b.h_out; g_h_coef = b.h_coef; g_d_buf = b.d_buf; g_d_coef = b.d_coef;
}

// Contract: x holds n floats and coef 2 * d floats (on the backend's device). Copies both into the current
// set's pinned host buffers (allocated on first use and when n or d grows) and fills its pinned output with NaN.
void pipeline_stage_in(const float* x, const float* coef, long long n, int d) {
    PipelineSlot& b = g_slots[g_slot];
    if (n > b.cap_n) {
        if (b.h_in) { cudaFreeHost(b.h_in); cudaFreeHost(b.h_out); cudaFree(b.d_buf); }
        CUDA_OK(cudaMallocHost(&b.h_in, n * sizeof(float)));
        CUDA_OK(cudaHostAlloc(&b.h_out, n * sizeof(float), cudaHostAllocDefault));
        CUDA_OK(cudaMalloc(&b.d_buf, n * sizeof(float)));
        b.cap_n = n;
    }
    if (d > b.cap_d) {
        if (b.h_coef) { cudaFreeHost(b.h_coef); cudaFree(b.d_coef); }
        CUDA_OK(cudaMallocHost(&b.h_coef, 2 * d * sizeof(float)));
        CUDA_OK(cudaMalloc(&b.d_coef, 2 * d * sizeof(float)));
        b.cap_d = d;
    }
    pipeline_select(g_slot);
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
// Part 2: a decode-like step of three short kernels (worked), launched eagerly and as a CUDA graph
// ----------------------------------------------------------------------------------------------------
// One step on the state x (d floats) with a d x d weight W:  t = W x;  x = x + tanh(t);  x = rmsnorm(x).
// The kernels are short: on the H100 a graph replays the whole step at d = 256 in 5.8 us, while launching
// the three kernels one by one costs the host about 4 us each (12.5 us per eager step, the same at d = 64).
// Launched one by one, the step is bound by launches (as lesson 04's single-token decode is); a graph,
// instantiated once and replayed, leaves the GPU only the kernels to run (benchmarks/decode_graph_sweep_h100.txt).

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kBlock / kWarp;  // one warp per output row: 8 rows per block of 256 threads

// t = W x, one warp per row r. Lane l reads W[r][l], W[r][l + 32], ...: the 32 lanes of a load read 32
// consecutive floats (one 128-byte transaction), and the warp's partial sums meet by shuffles. (With one
// thread per row instead, the 32 lanes of a load read 32 floats d apart and each thread loops over all d
// inputs: at d = 256 that step took 42 us on the H100, far longer than its launches, and a graph saved 3%.)
__global__ void matvec_kernel(const float* __restrict__ W, const float* __restrict__ x, float* __restrict__ t, int d) {
    const int r = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (r >= d) return;  // the whole warp leaves together (r is the same for its 32 lanes): the shuffles stay legal
    const float* row = W + (long long)r * d;
    float acc = 0.0f;
    for (int c = lane; c < d; c += kWarp) acc += row[c] * x[c];
    for (int offset = kWarp / 2; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) t[r] = acc;
}

__global__ void residual_tanh_kernel(float* __restrict__ x, const float* __restrict__ t, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < d) x[i] += tanhf(t[i]);
}

// One block of kBlock threads: x = x / sqrt(mean(x^2) + 1e-6). The sum of squares meets by shuffles within
// each warp, then across the block's 8 warps through shared memory: two barriers instead of a tree of eight.
__global__ void rmsnorm_kernel(float* x, int d) {
    __shared__ float warp_sums[kRowsPerBlock];
    __shared__ float inv_rms;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += x[i] * x[i];
    for (int offset = kWarp / 2; offset > 0; offset /= 2) s += __shfl_down_sync(0xffffffffu, s, offset);
    if (lane == 0) warp_sums[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < kRowsPerBlock ? warp_sums[lane] : 0.0f;
        for (int offset = kWarp / 2; offset > 0; offset /= 2) s += __shfl_down_sync(0xffffffffu, s, offset);
        if (lane == 0) inv_rms = rsqrtf(s / d + 1e-6f);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) x[i] *= inv_rms;
}

// The three launches of one step, in order on stream s.
static void decode_step(cudaStream_t s, float* x, const float* W, float* t, int d) {
    matvec_kernel<<<ceil_div(d, kRowsPerBlock), kBlock, 0, s>>>(W, x, t, d);
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

// Host time in milliseconds since t0. The launchers time themselves with the host clock, around the launches
// and the synchronisation that ends them: launch overhead is host time, which GPU events alone do not see.
using HostClock = std::chrono::steady_clock;
static double ms_since(HostClock::time_point t0) {
    return std::chrono::duration<double, std::milli>(HostClock::now() - t0).count();
}

// Write n floats of host values into device memory (the launchers' report; info is device memory).
static void report(float* info, const float* values, int n) {
    CUDA_OK(cudaMemcpy(info, values, n * sizeof(float), cudaMemcpyHostToDevice));
}

// Worked example. Contract: x holds d floats (updated in place), W d*d floats, t d floats of scratch;
// runs `steps` decode steps, 3 launches each, on the lesson's decode stream, and waits for them.
// info (device memory, 1 float): the host time of the launches and the wait, in ms.
void decode_eager(float* x, const float* W, float* t, float* info, int d, int steps) {
    cudaStream_t s = decode_stream();
    CUDA_OK(cudaStreamSynchronize(s));  // the clock starts on an idle stream
    const HostClock::time_point t0 = HostClock::now();
    for (int i = 0; i < steps; ++i) decode_step(s, x, W, t, d);
    CUDA_OK(cudaStreamSynchronize(s));
    const float ms = (float)ms_since(t0);
    report(info, &ms, 1);
}

// Contract: as decode_eager, but one step is captured into a CUDA graph, instantiated, and the graph is
// launched `steps` times (steps = 0: captured and instantiated only; x is unchanged). info (device memory,
// 3 floats): the number of nodes in the captured graph (3 for one step), the host time of capture and
// instantiation in ms, and the host time of the `steps` replays and the wait, in ms.
void decode_graph(float* x, const float* W, float* t, float* info, int d, int steps) {
    cudaStream_t s = decode_stream();
    CUDA_OK(cudaStreamSynchronize(s));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    const HostClock::time_point t_capture = HostClock::now();
    // TODO(task 7.2, part 1 of 2): capture one step into `graph` and instantiate it into `exec` (~4 lines).
    // The calls: cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), decode_step on s,
    // cudaStreamEndCapture(s, &graph), then cudaGraphInstantiate(&exec, graph, 0).
    // Hint: during the capture nothing runs: the launches are recorded, with their arguments (the same
    // pointers every replay, so the graph updates x in place each time). A synchronising call inside the
    // capture (cudaMemcpy, cudaDeviceSynchronize) is an error: the simulator names it.
    const double capture_ms = ms_since(t_capture);
    const HostClock::time_point t_replay = HostClock::now();
    // TODO(task 7.2, part 2 of 2): launch `exec` `steps` times on s (~1 line): one cudaGraphLaunch per step.
    // Hint: the launches queue up like kernel launches; the synchronisation below waits for them all.
    CUDA_OK(cudaStreamSynchronize(s));
    const double replay_ms = ms_since(t_replay);
    if (graph) {
        size_t count = 0;
        CUDA_OK(cudaGraphGetNodes(graph, nullptr, &count));
        const float values[3] = {(float)count, (float)capture_ms, (float)replay_ms};
        report(info, values, 3);
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
