// ccsim_rt.cpp - the runtime proper of the CPU CUDA simulator.
//
// Compiled once per flags, WITHOUT instrumentation, and linked into every simulated module. It holds
// the execution model (a pool of OS worker threads running blocks; inside a block every CUDA thread is a
// fiber), the per-block scheduler (barriers, warp collectives, divergence and deadlock diagnosis), the
// shared-memory arena with its shadow, the __tsan_* access hooks of checked mode, atomics, the host API,
// and the error record the Python side turns into KernelError subclasses.
//
// Everything here has hidden visibility except the small C API the worker and the generated entry
// points use, so two loaded modules never resolve each other's hooks.
//
// The code lives in rt/, one file per concern, each included once below in the order of what it uses (one
// translation unit, as before the split: the hot paths of the access hooks inline across parts, and the
// system headers are parsed once; several translation units cost more compile time for the same object):
//
//   rt/state.h          records (Fiber, Worker, Launch, shadows, buffers), globals, set_error
//   rt/sched_fibers.h   scheduling: fibers and the context switch, stopping a failed CUDA thread
//   rt/mem_shared.h     memory and checks: the shared-memory arena and its shadow (races, uninitialised reads)
//   rt/mem_global.h     memory and checks: registered buffers' bounds and shadows (races, uninitialised reads)
//   rt/mem_buffers.h    memory and checks: device memory kept from host code, the buffer table, memory kinds
//   rt/profile.h        profiling counters (profile mode) and their JSON
//   rt/mem_hooks.h      memory and checks: check(), the __tsan_* hooks, atomics, assert() and exit()
//   rt/sched_blocks.h   scheduling: one block's passes, barriers, warp collectives, deadlock diagnosis
//   rt/sched_launch.h   scheduling: the worker pool, launches, the device-side barrier and warp entry points
//   rt/host_api.h       host API: allocations, errors, device properties
//   rt/mem_host_work.h  memory and checks: results are computed by kernels (issue 36)
//   rt/streams.h        streams, events, graphs, and the copies and fills issued on them
//   rt/worker_api.h     the worker's API: init, signals and crash/timeout reports, per-call reset
#include "ccsim.h"

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <dlfcn.h>
#include <link.h>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <algorithm>
#include <random>
#include <sys/mman.h>
#include <system_error>
#include <thread>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <deque>
#include <unordered_map>
#include <memory>
#include <string>
#include <vector>

using namespace ccsim;

#define API extern "C" __attribute__((visibility("default")))

#include "rt/state.h"
#include "rt/sched_fibers.h"
#include "rt/mem_shared.h"
#include "rt/mem_global.h"
#include "rt/mem_buffers.h"
#include "rt/profile.h"
#include "rt/mem_hooks.h"
#include "rt/sched_blocks.h"
#include "rt/sched_launch.h"
#include "rt/host_api.h"
#include "rt/mem_host_work.h"
#include "rt/streams.h"
#include "rt/worker_api.h"
#include "ccsim_hopper_rt.h"  // [hopper hook] Hopper's asynchronous machinery (mbarrier, TMA, wgmma)
