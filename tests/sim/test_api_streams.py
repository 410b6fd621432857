"""Streams, events, async copies, pinned memory and CUDA graphs on the simulator.

The programs follow the public CUDA samples' patterns (simpleStreams' chunked copy/compute/copy pipeline
timed with events, simpleCudaGraphs' stream capture with fork/join by events). The simulator queues work on
created streams and runs it at synchronisation points in an adversarial order (the most recently issued
ready operation first), so a missing dependency gives a wrong answer or a diagnosis instead of passing by luck.
"""

from __future__ import annotations

import pytest
import torch
from conftest import build

from cudacourse.errors import KernelError

SRC = r"""
#include <cuda_runtime.h>
#include <vector>

__global__ void inc_scale(float* x, int n, float add, float mul) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (x[i] + add) * mul;
}

// simpleStreams: chunk c goes H2D, through the kernel and D2H on stream c % nstreams; events time it.
void simple_streams(const float* in, float* out, float* ms, int n, int nchunks, int nstreams) {
    float *h, *d;
    cudaMallocHost(&h, n * sizeof(float));
    cudaMalloc(&d, n * sizeof(float));
    cudaMemcpy(h, in, n * sizeof(float), cudaMemcpyDeviceToHost);  // (tensors from Python are device memory)
    cudaStream_t s[8];
    for (int i = 0; i < nstreams; ++i) cudaStreamCreate(&s[i]);
    cudaEvent_t start, stop;
    cudaEventCreate(&start); cudaEventCreate(&stop);
    cudaEventRecord(start, 0);
    int chunk = (n + nchunks - 1) / nchunks;
    for (int c = 0; c < nchunks; ++c) {
        int lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        if (len <= 0) break;
        cudaStream_t st = s[c % nstreams];
        cudaMemcpyAsync(d + lo, h + lo, len * sizeof(float), cudaMemcpyHostToDevice, st);
        inc_scale<<<(len + 127) / 128, 128, 0, st>>>(d + lo, len, 1.0f, 2.0f);
        cudaMemcpyAsync(h + lo, d + lo, len * sizeof(float), cudaMemcpyDeviceToHost, st);
    }
    cudaEventRecord(stop, 0);
    cudaEventSynchronize(stop);
    float elapsed = -1.0f;
    cudaEventElapsedTime(&elapsed, start, stop);
    cudaMemcpy(ms, &elapsed, sizeof elapsed, cudaMemcpyHostToDevice);
    cudaMemcpy(out, h, n * sizeof(float), cudaMemcpyHostToDevice);
    for (int i = 0; i < nstreams; ++i) cudaStreamDestroy(s[i]);
    cudaEventDestroy(start); cudaEventDestroy(stop);
    cudaFreeHost(h); cudaFree(d);
}

// Producer on one stream, consumer on another: only the event orders them.
void producer_consumer(const float* in, float* out, int n, int wait) {
    float *h, *d;
    cudaMallocHost(&h, n * sizeof(float));
    cudaMalloc(&d, n * sizeof(float));
    cudaMemset(d, 0, n * sizeof(float));
    cudaMemcpy(h, in, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaStream_t copy_s, compute_s;
    cudaStreamCreate(&copy_s); cudaStreamCreate(&compute_s);
    cudaEvent_t copied; cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
    cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, copy_s);
    cudaEventRecord(copied, copy_s);
    if (wait) cudaStreamWaitEvent(compute_s, copied, 0);
    inc_scale<<<(n + 127) / 128, 128, 0, compute_s>>>(d, n, 0.0f, 3.0f);
    cudaMemcpyAsync(out, d, n * sizeof(float), cudaMemcpyDeviceToDevice, compute_s);
    cudaStreamSynchronize(compute_s);
    cudaStreamSynchronize(copy_s);
    cudaStreamDestroy(copy_s); cudaStreamDestroy(compute_s); cudaEventDestroy(copied);
    cudaFreeHost(h); cudaFree(d);
}

// The legacy default stream waits for blocking streams (a plain cudaMemcpy after the kernel is enough), not
// for cudaStreamNonBlocking ones.
void default_stream_sync(float* out, int n, int nonblocking) {
    float* d;
    cudaMalloc(&d, n * sizeof(float));
    cudaMemset(d, 0, n * sizeof(float));
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, nonblocking ? cudaStreamNonBlocking : cudaStreamDefault);
    inc_scale<<<(n + 127) / 128, 128, 0, s>>>(d, n, 5.0f, 1.0f);
    cudaMemcpy(out, d, n * sizeof(float), cudaMemcpyDeviceToDevice);
    cudaStreamDestroy(s);
    if (!nonblocking) cudaFree(d);
}

// cudaMemcpyAsync from pageable memory is staged: the source may be reused as soon as the call returns.
void pageable_async(const float* in, float* out, int n) {
    std::vector<float> pageable(n);
    cudaMemcpy(pageable.data(), in, n * sizeof(float), cudaMemcpyDeviceToHost);
    float* d;
    cudaMalloc(&d, n * sizeof(float));
    cudaStream_t s; cudaStreamCreate(&s);
    cudaMemcpyAsync(d, pageable.data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
    for (int i = 0; i < n; ++i) pageable[i] = -1.0f;       // reused at once
    inc_scale<<<(n + 127) / 128, 128, 0, s>>>(d, n, 0.0f, 1.0f);
    cudaMemcpyAsync(pageable.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s);  // synchronous: pageable
    cudaMemcpy(out, pageable.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaStreamDestroy(s); cudaFree(d);
}

// Queries never block: not-ready work answers cudaErrorNotReady (and then runs), so polling ends.
void queries(float* out, int n) {
    float codes[7];
    float* d; cudaMalloc(&d, n * sizeof(float));
    cudaStream_t s; cudaStreamCreate(&s);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    cudaEventRecord(a, s);
    cudaMemsetAsync(d, 0, n * sizeof(float), s);
    cudaEventRecord(b, s);
    float ms = -1.0f;
    codes[0] = (float)cudaEventElapsedTime(&ms, a, b);   // not ready yet
    codes[1] = (float)cudaStreamQuery(s);
    int polls = 0;
    while (cudaEventQuery(b) == cudaErrorNotReady) ++polls;
    codes[2] = (float)cudaStreamQuery(s);
    codes[3] = (float)cudaEventElapsedTime(&ms, a, b);
    codes[4] = ms >= 0.0f ? 1.0f : 0.0f;
    codes[5] = (float)polls;
    cudaEvent_t never; cudaEventCreate(&never);
    codes[6] = (float)cudaEventElapsedTime(&ms, a, never);  // never recorded
    cudaMemcpy(out, codes, sizeof codes, cudaMemcpyHostToDevice);
    cudaStreamDestroy(s); cudaFree(d);
}

// A CUDA graph captured from a stream with a fork/join through events, replayed `reps` times.
void graph_replay(float* x, float* nodes, int n, int reps) {
    cudaStream_t s, side;
    cudaStreamCreate(&s); cudaStreamCreate(&side);
    cudaEvent_t fork, join;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming); cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
    float* tmp; cudaMalloc(&tmp, n * sizeof(float));
    int half = n / 2;
    cudaGraph_t g; cudaGraphExec_t gx;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    inc_scale<<<(n + 127) / 128, 128, 0, s>>>(x, n, 1.0f, 1.0f);          // x += 1
    cudaEventRecord(fork, s);
    cudaStreamWaitEvent(side, fork, 0);
    inc_scale<<<(half + 127) / 128, 128, 0, side>>>(x, half, 0.0f, 2.0f); // first half *= 2
    inc_scale<<<(n - half + 127) / 128, 128, 0, s>>>(x + half, n - half, 0.0f, 3.0f);  // second half *= 3
    cudaEventRecord(join, side);
    cudaStreamWaitEvent(s, join, 0);
    cudaMemcpyAsync(tmp, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    inc_scale<<<(n + 127) / 128, 128, 0, s>>>(tmp, n, 0.0f, 1.0f);
    cudaMemcpyAsync(x, tmp, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    cudaStreamEndCapture(s, &g);
    size_t count = 0;
    cudaGraphGetNodes(g, nullptr, &count);
    const float node_count = (float)count;
    cudaMemcpy(nodes, &node_count, sizeof node_count, cudaMemcpyHostToDevice);
    cudaGraphInstantiate(&gx, g, 0);
    for (int r = 0; r < reps; ++r) cudaGraphLaunch(gx, s);
    cudaStreamSynchronize(s);
    cudaGraphExecDestroy(gx); cudaGraphDestroy(g);
    cudaStreamDestroy(s); cudaStreamDestroy(side); cudaFree(tmp);
}

// A synchronous copy inside a capture: refused, naming the call.
void graph_illegal(float* x, int n) {
    cudaStream_t s; cudaStreamCreate(&s);
    cudaGraph_t g;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    inc_scale<<<(n + 127) / 128, 128, 0, s>>>(x, n, 1.0f, 1.0f);
    cudaMemcpy(x, x, n * sizeof(float), cudaMemcpyDeviceToDevice);
    cudaStreamEndCapture(s, &g);
}

// A stream handle cudaStreamCreate never returned.
void bad_stream(float* x, int n) {
    cudaStream_t s = (cudaStream_t)0x1234;
    inc_scale<<<(n + 127) / 128, 128, 0, s>>>(x, n, 1.0f, 1.0f);
}

// The default stream waits on an event recorded on a non-blocking stream: only the event orders them.
__global__ void copy_plus(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i] + 1.0f;
}
void default_waits_on_event(float* out, int n) {
    float* d;
    cudaMalloc(&d, n * sizeof(float));
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t e; cudaEventCreate(&e);
    cudaMemsetAsync(d, 0, n * sizeof(float), s);
    inc_scale<<<(n + 127) / 128, 128, 0, s>>>(d, n, 2.0f, 1.0f);
    cudaEventRecord(e, s);
    cudaStreamWaitEvent(0, e, 0);
    copy_plus<<<(n + 127) / 128, 128>>>(d, out, n);
    cudaDeviceSynchronize();
    cudaStreamDestroy(s); cudaEventDestroy(e); cudaFree(d);
}

static void CUDART_CB append(void* p) { float* v = (float*)p; v[1] = v[0] + 1.0f; }
// Host functions run in stream order, after the work queued before them.
void host_func(float* x, int n) {
    float* h; cudaMallocHost(&h, 2 * sizeof(float));
    cudaStream_t s; cudaStreamCreate(&s);
    cudaMemcpyAsync(h, x, sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaLaunchHostFunc(s, append, h);
    cudaStreamSynchronize(s);
    cudaMemcpy(x + n - 1, h + 1, sizeof(float), cudaMemcpyHostToDevice);
    cudaStreamDestroy(s); cudaFreeHost(h);
}
"""


# These launchers copy their inputs through host memory to test the copy and stream API itself: the host-work check
# (test_host_work.py) is off for this module's workers (conftest.host_reads_allowed).
pytestmark = pytest.mark.usefixtures("host_reads_allowed")


@pytest.fixture(scope="module")
def lib():
    lb = build(SRC, "streams.cu")
    yield lb
    lb.close()


def _in(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g)


@pytest.mark.parametrize("n,nchunks,nstreams", [(1000, 4, 4), (4099, 8, 3), (33, 5, 2)])
def test_simple_streams_pipeline_is_correct_and_timed(lib, n, nchunks, nstreams):
    x = _in(n, n)
    y = torch.full((n,), float("nan"))
    ms = torch.full((1,), -1.0)
    lib.call("simple_streams", [x, y, ms, n, nchunks, nstreams])
    torch.testing.assert_close(y, (x + 1) * 2)
    assert ms.item() >= 0.0  # nominal host milliseconds on the simulator


def test_event_orders_producer_and_consumer(lib):
    n = 1000
    x = _in(n, 1)
    y = torch.full((n,), float("nan"))
    lib.call("producer_consumer", [x, y, n, 1])
    torch.testing.assert_close(y, 3 * x)


def test_missing_stream_wait_event_gives_the_wrong_answer(lib):
    n = 1000
    x = _in(n, 2)
    y = torch.full((n,), float("nan"))
    lib.call("producer_consumer", [x, y, n, 0])
    # the consumer ran before the copy it did not wait for: it scaled the memset zeros
    assert torch.equal(y, torch.zeros(n)), "the simulator should run the unordered consumer first"


def test_legacy_default_stream_waits_for_blocking_streams(lib):
    n = 300
    y = torch.full((n,), float("nan"))
    lib.call("default_stream_sync", [y, n, 0])
    torch.testing.assert_close(y, torch.full((n,), 5.0))


def test_non_blocking_stream_is_not_ordered_by_the_default_stream(lib):
    n = 300
    y = torch.full((n,), float("nan"))
    with pytest.raises(KernelError, match=r"UnsynchronisedStream.*cudaStreamNonBlocking.*inc_scale"):
        lib.call("default_stream_sync", [y, n, 1])


def test_async_copy_from_pageable_memory_is_staged(lib):
    n = 513
    x = _in(n, 3)
    y = torch.full((n,), float("nan"))
    lib.call("pageable_async", [x, y, n])
    torch.testing.assert_close(y, x)


def test_queries_do_not_block_and_polling_ends(lib):
    c = torch.full((7,), float("nan"))
    lib.call("queries", [c, 100])
    not_ready, success, bad_handle = 600.0, 0.0, 400.0
    assert c[0].item() == not_ready and c[1].item() == not_ready
    assert c[2].item() == success and c[3].item() == success and c[4].item() == 1.0
    assert c[5].item() == 0.0  # the stream query that answered NotReady ran the work: polling saw it done
    assert c[6].item() == bad_handle


@pytest.mark.parametrize("reps", [1, 3])
def test_graph_capture_with_fork_join_replays(lib, reps):
    n = 257
    x = _in(n, 4)
    ref = x.clone()
    for _ in range(reps):
        ref = ref + 1
        ref[: n // 2] *= 2
        ref[n // 2:] *= 3
    nodes = torch.full((1,), float("nan"))
    lib.call("graph_replay", [x, nodes, n, reps])
    assert nodes.item() == 6  # 4 kernels, 2 copies: events and waits are edges, not nodes
    torch.testing.assert_close(x, ref)


def test_synchronous_call_inside_capture_is_refused_naming_it(lib):
    x = torch.zeros(64)
    with pytest.raises(KernelError, match=r"StreamCaptureError: cudaMemcpy at streams\.cu:\d+ .*capturing") as e:
        lib.call("graph_illegal", [x, 64])
    assert e.value.details["kind"] == "stream"


def test_default_stream_waits_on_an_event_of_a_non_blocking_stream(lib):
    n = 200
    y = torch.full((n,), float("nan"))
    lib.call("default_waits_on_event", [y, n])
    torch.testing.assert_close(y, torch.full((n,), 3.0))


def test_launch_on_a_stream_never_created_is_reported(lib):
    x = torch.zeros(8)
    with pytest.raises(KernelError, match=r"InvalidStream: a kernel launch at streams\.cu:\d+ .*cudaStreamCreate"):
        lib.call("bad_stream", [x, 8])


def test_host_function_runs_in_stream_order(lib):
    x = torch.tensor([41.0, 0.0, 0.0])
    lib.call("host_func", [x, 3])
    assert x[2].item() == 42.0
