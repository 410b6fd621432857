// rt/host_api.h - part of ccsim_rt.cpp. The host API: allocations, errors, the device.
//
// cudaMalloc (whole pages, poisoned, registered), managed and pinned memory (cudaMallocHost, cudaHostRegister),
// cudaFree; the sticky error and the error names; the device count and properties (the modelled H100).
// Copies, fills, synchronisation, streams, events and graphs are in streams.h.
// (Included once by ccsim_rt.cpp, after the parts it uses; not a header of its own.)

// ---- host API --------------------------------------------------------------------------------------
API cudaError_t ccsim_cudaMalloc(void** p, size_t n, int line) {
    // a gap of unregistered memory on both sides makes small overruns land outside every buffer
    size_t gap = 4096;
    char* raw = dev_pages_alloc(n, gap);
    if (!raw) return (cudaError_t)(g_last_cuda_error = cudaErrorMemoryAllocation);
    char* base = raw + gap;
    std::memcpy(base - 16, &raw, sizeof raw);
    std::memset(base, 0xFF, n);  // like the harness's poison: unwritten outputs read as NaN
    char name[64]; snprintf(name, sizeof name, "cudaMalloc buffer (line %d)", line);
    register_buffer(base, n, name, 1, true);
    dev_pages_settle();
    *p = base;
    return cudaSuccess;
}
API cudaError_t ccsim_cudaMallocManaged(void** p, size_t n) {
    cudaError_t e = ccsim_cudaMalloc(p, n, 0);
    if (e == cudaSuccess) {  // the host may write managed memory directly: count it as initialised
        std::lock_guard<std::mutex> lk(g_buf_mu);
        for (int i = 0; i < g_nbufs.load(); ++i) if (g_bufs[i].base == (uintptr_t)*p) g_bufs[i].track_init = false;
        dev_pages_unprotected(*p);
    }
    return e;
}
extern "C" void ccsim_rt_sync_all(void);
API cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    ccsim_rt_sync_all();  // a synchronisation point (ccsim_host_api.h): queued work may still use the buffer
    // only what cudaMalloc returned (and not freed yet) may be freed: anything else is an invalid value
    if (!unregister(p, "cudaMalloc buffer")) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    char* raw; std::memcpy(&raw, (char*)p - 16, sizeof raw);
    dev_pages_free(raw);
    return cudaSuccess;
}
// Pinned host memory is mapped into the device's address space on real GPUs: kernels may use it.
API cudaError_t cudaMallocHost(void** p, size_t n) {
    *p = malloc(n ? n : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    ccsim_rt_register(*p, n, "cudaMallocHost buffer", 1);
    return cudaSuccess;
}
API cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    if (!unregister(p, "cudaMallocHost buffer")) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    free(p);
    return cudaSuccess;
}
API cudaError_t cudaGetLastError(void) { cudaError_t e = (cudaError_t)g_last_cuda_error; g_last_cuda_error = 0; return e; }
API cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)g_last_cuda_error; }
API const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorIllegalState: return "cudaErrorIllegalState";
        case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
        case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
        case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
        default: return "cudaErrorUnknown";
    }
}
API const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureUnjoined: return "capture was not joined back to the origin stream";
        case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
        case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
        default: return "unknown error";
    }
}

// Pinned memory registered from an existing host allocation (cudaHostRegister) counts as pinned.
API cudaError_t cudaHostRegister(void* p, size_t n, unsigned) {
    if (!p || !n) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    ccsim_rt_register(p, n, "cudaHostRegister buffer", 1);
    return cudaSuccess;
}
API cudaError_t cudaHostUnregister(void* p) {
    return unregister(p, "cudaHostRegister buffer") ? cudaSuccess : (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
}
// Mapped pinned memory: on the simulator the device address is the host address (as under UVA).
API cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned) {
    if (!dev || mem_kind(host) != MEM_PINNED) return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    *dev = host;
    return cudaSuccess;
}

API cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
API cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
API cudaError_t cudaSetDevice(int) { return cudaSuccess; }
API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    ccsim::h100_properties(p);  // the modelled GPU's numbers (ccsim_host_api.h cites each)
    return cudaSuccess;
}

API cudaError_t cudaDeviceGetAttribute(int* v, enum cudaDeviceAttr a, int d) {
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, d);
    switch (a) {
        case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: *v = 1024; break;
        case cudaDevAttrMaxBlockDimY: *v = 1024; break;
        case cudaDevAttrMaxBlockDimZ: *v = 64; break;
        case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
        case cudaDevAttrMaxGridDimY: *v = 65535; break;
        case cudaDevAttrMaxGridDimZ: *v = 65535; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrWarpSize: *v = 32; break;
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
        default: *v = 0; return (cudaError_t)(g_last_cuda_error = cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
