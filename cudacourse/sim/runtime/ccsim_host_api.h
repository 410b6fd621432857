// ccsim_host_api.h - runtime-API calls that the simulator implements on top of ccsim_rt.cpp's exports,
// the modelled GPU's numbers, and the device clock. Included at the end of ccsim.h.
//
// Streams (the model is in rt/streams.h): work on a created stream is
// queued and runs at a synchronisation point (a stream/event/device synchronize or query, a synchronous
// copy or launch on the default stream, cudaFree, the launcher's return), in an ADVERSARIAL order that
// respects only what CUDA promises: each stream's own order, cudaStreamWaitEvent, and the legacy default
// stream's implicit synchronisation with blocking streams (not with cudaStreamNonBlocking ones). Among
// the ready operations the most recently issued runs first, so a consumer with a missing dependency runs
// before its producer and reads stale data. Work on the default stream runs at once, after the blocking
// streams' queued work. cudaEventElapsedTime reports host wall-clock milliseconds between the moments
// the simulator ran the two records: a NOMINAL figure for the CPU simulator, not a GPU timing.
#ifndef CCSIM_HOST_API_H
#define CCSIM_HOST_API_H

#include <ctime>  // clock(), clock_t and CLOCKS_PER_SEC (device code may call clock() too)

// ---------------------------------------------------------------------------------------------------
// The modelled GPU: NVIDIA H100 SXM5 80GB (compute capability 9.0). Where each number comes from:
// - name, 132 SMs, cc 9.0: this repository's own H100 run (results/nvidia-h100-80gb-hbm3/results.md:
//   "NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs)");
// - total global memory 85017624576 bytes: torch.cuda.get_device_properties().total_memory as public
//   H100 80GB HBM3 logs report it (deviceQuery: 81079 MBytes);
// - 228 KB shared memory per SM, 227 KB per block with opt-in, 48 KB per block by default, 65536
//   32-bit registers per SM and per block, 2048 threads and 32 blocks per SM, 1024 threads per block,
//   warp size 32: CUDA C++ Programming Guide, "Compute Capabilities" table, column 9.0;
// - 50 MB L2 (52428800 bytes), 5120-bit memory bus: deviceQuery on an H100 80GB HBM3 ("L2 Cache Size:
//   52428800 bytes", "Memory Bus Width: 5120-bit");
// - memory clock 2619 MHz and SM clock 1980 MHz: nvidia-smi -q on an H100 80GB HBM3 ("Max Clocks:
//   SM 1980 MHz, Memory 2619 MHz"); cudaDeviceProp reports both in kHz.
// ---------------------------------------------------------------------------------------------------
namespace ccsim {
// The runtime keeps cudaGetLastError's state to itself: header-side calls return their error code only.
static inline cudaError_t set_last_error(cudaError_t e) { return e; }
namespace h100 {
static constexpr const char* kName = "NVIDIA H100 80GB HBM3";
static constexpr size_t kTotalGlobalMem = 85017624576ull;
static constexpr int kSMs = 132, kMajor = 9, kMinor = 0;
static constexpr size_t kSharedPerSM = 228 * 1024, kSharedPerBlockOptin = 227 * 1024, kSharedPerBlock = 48 * 1024;
static constexpr int kRegsPerSM = 65536, kRegsPerBlock = 65536, kThreadsPerSM = 2048, kBlocksPerSM = 32;
static constexpr int kThreadsPerBlock = 1024, kWarpSize = 32;
static constexpr int kL2Bytes = 50 * 1024 * 1024, kMemBusWidth = 5120;
static constexpr int kMemClockKHz = 2619000, kClockKHz = 1980000;
static constexpr size_t kConstMem = 65536;
}  // namespace h100

// Fill a cudaDeviceProp with the modelled GPU's numbers (the runtime's cudaGetDeviceProperties calls
// this once it is wired to it; see the simulator README).
static inline void h100_properties(cudaDeviceProp* p) {
    std::memset(p, 0, sizeof *p);
    std::snprintf(p->name, sizeof p->name, "%s", h100::kName);
    p->totalGlobalMem = h100::kTotalGlobalMem;
    p->sharedMemPerBlock = h100::kSharedPerBlock;
    p->regsPerBlock = h100::kRegsPerBlock;
    p->warpSize = h100::kWarpSize;
    p->maxThreadsPerBlock = h100::kThreadsPerBlock;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->multiProcessorCount = h100::kSMs;
    p->major = h100::kMajor; p->minor = h100::kMinor;
    p->clockRate = h100::kClockKHz;
    p->memoryClockRate = h100::kMemClockKHz;
    p->memoryBusWidth = h100::kMemBusWidth;
    p->sharedMemPerMultiprocessor = h100::kSharedPerSM;
    p->maxThreadsPerMultiProcessor = h100::kThreadsPerSM;
    p->totalConstMem = h100::kConstMem;
    p->l2CacheSize = h100::kL2Bytes;
    p->sharedMemPerBlockOptin = h100::kSharedPerBlockOptin;
    p->regsPerMultiprocessor = h100::kRegsPerSM;
    p->maxBlocksPerMultiProcessor = h100::kBlocksPerSM;
}
}  // namespace ccsim

// ---------------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------------
// 2-D copies: `height` rows of `width` bytes, rows `spitch`/`dpitch` bytes apart (cudaMemcpy2D's contract:
// both pitches at least `width`, else cudaErrorInvalidValue).
static inline cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                       size_t height, cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch) return ccsim::set_last_error(cudaErrorInvalidValue);
    for (size_t r = 0; r < height; ++r) {
        cudaError_t e = cudaMemcpy((char*)dst + r * dpitch, (const char*)src + r * spitch, width, kind);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                            size_t height, cudaMemcpyKind kind, cudaStream_t = nullptr) {
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}
static inline cudaError_t cudaMemset2D(void* dst, size_t pitch, int value, size_t width, size_t height) {
    if (width > pitch) return ccsim::set_last_error(cudaErrorInvalidValue);
    for (size_t r = 0; r < height; ++r) cudaMemset((char*)dst + r * pitch, value, width);
    return cudaSuccess;
}
// Pitched allocation: rows padded to 512 bytes (the H100's texture pitch alignment), one cudaMalloc
// buffer, so the padding is inside the buffer as on the GPU.
template <class T>
static inline cudaError_t cudaMallocPitch(T** p, size_t* pitch, size_t width, size_t height) {
    *pitch = (width + 511) / 512 * 512;
    return cudaMalloc((void**)p, *pitch * height);
}
// Free and total memory of the modelled GPU (nothing else runs on it: free = total less what this
// process holds is not tracked; the figure is the card's, nominal).
static inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    if (!free_bytes || !total_bytes) return ccsim::set_last_error(cudaErrorInvalidValue);
    *total_bytes = ccsim::h100::kTotalGlobalMem;
    *free_bytes = ccsim::h100::kTotalGlobalMem - (512ull << 20);  // the context's usual reservation
    return cudaSuccess;
}
static inline cudaError_t cudaMemPrefetchAsync(const void*, size_t, int, cudaStream_t = nullptr) { return cudaSuccess; }

// ---------------------------------------------------------------------------------------------------
// Streams, events, pinned memory, CUDA graphs (implemented in rt/streams.h and rt/host_api.h)
// ---------------------------------------------------------------------------------------------------
#define cudaEventDefault 0x0
#define cudaEventBlockingSync 0x1
#define cudaEventDisableTiming 0x2
#define cudaHostAllocDefault 0x0
#define cudaHostAllocPortable 0x1
#define cudaHostAllocMapped 0x2
#define cudaHostAllocWriteCombined 0x4
#define cudaHostRegisterDefault 0x0
#define cudaHostRegisterPortable 0x1
#define cudaHostRegisterMapped 0x2
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1,
                               cudaStreamCaptureStatusInvalidated = 2 };
struct CUgraph_st; typedef CUgraph_st* cudaGraph_t;
struct CUgraphExec_st; typedef CUgraphExec_st* cudaGraphExec_t;
struct CUgraphNode_st; typedef CUgraphNode_st* cudaGraphNode_t;
typedef void (*cudaHostFn_t)(void* userData);
#define CUDART_CB
extern "C" {
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);
cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned* flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user_data);
cudaError_t cudaHostRegister(void* p, size_t n, unsigned flags);
cudaError_t cudaHostUnregister(void* p);
cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned flags);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t ccsim_cudaGraphInstantiate(cudaGraphExec_t* x, cudaGraph_t g);
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s);
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x);
void ccsim_rt_drain(cudaStream_t s);
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e) { return cudaStreamWaitEvent(s, e, 0); }
// Both signatures CUDA has had: (exec, graph, flags) since CUDA 12 and (exec, graph, errNode, log, size) before.
static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long = 0) {
    return ccsim_cudaGraphInstantiate(x, g);
}
static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* x, cudaGraph_t g, cudaGraphNode_t*, char* log, size_t n) {
    if (log && n) log[0] = 0;
    return ccsim_cudaGraphInstantiate(x, g);
}
static inline cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long = 0) {
    return ccsim_cudaGraphInstantiate(x, g);
}
template <class T> static inline cudaError_t cudaHostGetDevicePointer(T** dev, void* host, unsigned flags) {
    return cudaHostGetDevicePointer((void**)dev, host, flags);
}

// ---------------------------------------------------------------------------------------------------
// Device clock: clock64() counts at the modelled SM clock from a host steady clock (monotonic per
// thread, as on the GPU; differences are host time, not GPU cycles).
// ---------------------------------------------------------------------------------------------------
static inline long long clock64() {
    timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * (ccsim::h100::kClockKHz * 1000ll) + (long long)t.tv_nsec * (ccsim::h100::kClockKHz / 1000) / 1000;
}

#endif  // CCSIM_HOST_API_H
