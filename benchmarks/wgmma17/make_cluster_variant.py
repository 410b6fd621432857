"""Write gemm_hopper.cu: benchmarks/wgmma17/gemm_hopper_v2.cu with clusters of 2 blocks sharing W by TMA multicast.

gemm_hopper_v2.cu is task 5.12 made persistent, C stored from registers; the pairs of blocks run along M.

Each block of a pair loads its own A tile (128 x 64) and one half (128 rows) of the pair's W tile, multicast into
both blocks' shared memory; a stage is refilled only once the consumer warps of both blocks have released it
(remote mbarrier arrivals). Halves the W traffic from L2 to the SMs. A benchmark variant for
benchmarks/wgmma_sweep.py, not course code.

    python benchmarks/wgmma17/make_cluster_variant.py OUT_DIR   (OUT_DIR gets the .cu and a copy of cc_hopper.h)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOL = ROOT / "solutions/05_tensor_cores"

HELPERS = r'''
__device__ inline uint32_t cl_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ inline void cl_sync() { asm volatile("barrier.cluster.arrive;\nbarrier.cluster.wait;\n" ::: "memory"); }
__device__ inline void mbar_arrive_cta(uint64_t* bar, uint32_t cta) {
    asm volatile("{\n .reg .b32 ra;\n mapa.shared::cluster.u32 ra, %0, %1;\n"
                 " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n"
                 ::"r"(cc_hopper_smem(bar)), "r"(cta) : "memory");
}
__device__ inline void tma_load_2d_mc(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar,
                                      uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 ::"r"(cc_hopper_smem(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row),
                 "r"(cc_hopper_smem(bar)), "h"(mask) : "memory");
}
'''

SUBS = [
    ("#include \"cc_hopper.h\"\n", "#include <cstdio>\n#include \"cc_hopper.h\"\n" + HELPERS),
    ("__global__ void __launch_bounds__(kHThreads, 1) gemm_wgmma_kernel(",
     "__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kHThreads, 1) gemm_wgmma_kernel("),
    ("mbar_init(&empty[s], 4 * kHConsumers);", "mbar_init(&empty[s], 2 * 4 * kHConsumers);"),
    ("    __syncthreads();  // the last block-wide barrier",
     "    cl_sync();  // (cluster-wide) the last block-wide barrier"),
    ("    const int tiles_n = (N + kHBN - 1) / kHBN, n_tiles = tiles_n * ((M + kHBM - 1) / kHBM);\n",
     "    const int tiles_n = (N + kHBN - 1) / kHBN, n_tiles = tiles_n * ((M + 2 * kHBM - 1) / (2 * kHBM));\n"
     "    const uint32_t rank = cl_rank();\n"),
    ("        if (threadIdx.x != 0) return;\n", "        if (threadIdx.x == 0) {\n"),
    ("for (int tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {",
     "for (int tile = blockIdx.x / 2; tile < n_tiles; tile += gridDim.x / 2) {"),
    ("const int row0 = (tile / tiles_n) * kHBM, col0 = (tile % tiles_n) * kHBN;",
     "const int row0 = ((tile / tiles_n) * 2 + rank) * kHBM, col0 = (tile % tiles_n) * kHBN;"),
    ("                tma_load_2d(w_s + s * kHTileB, &map_w, t * kHBK, col0, &full[s]);\n            }\n",
     "                tma_load_2d_mc(w_s + s * kHTileB + rank * (kHBN / 2) * kHBK, &map_w, t * kHBK,\n"
     "                               col0 + rank * (kHBN / 2), &full[s], 3);\n            }\n"),
    ("                if (t > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % kHStages]);",
     "                if (t > 0 && lane == 0) { mbar_arrive_cta(&empty[(it - 1) % kHStages], 0); "
     "mbar_arrive_cta(&empty[(it - 1) % kHStages], 1); }"),
    ("            if (lane == 0) mbar_arrive(&empty[(it - 1) % kHStages]);",
     "            if (lane == 0) { mbar_arrive_cta(&empty[(it - 1) % kHStages], 0); "
     "mbar_arrive_cta(&empty[(it - 1) % kHStages], 1); }"),
    ("!cc_make_tmap_bf16(&map_w, W, N, K, kHBN)", "!cc_make_tmap_bf16(&map_w, W, N, K, kHBN / 2)"),
    ("    const long long tiles = (long long)((N + kHBN - 1) / kHBN) * ((M + kHBM - 1) / kHBM);\n"
     "    const int grid = (int)(tiles < sms ? tiles : sms);",
     "    const long long tiles = (long long)((N + kHBN - 1) / kHBN) * ((M + 2 * kHBM - 1) / (2 * kHBM));\n"
     "    static int pairs = 0;  // clusters resident at once (a GPC holds whole clusters only)\n"
     "    if (!pairs) {\n"
     "        cudaLaunchConfig_t cfg = {};\n"
     "        cfg.gridDim = dim3(sms);\n"
     "        cfg.blockDim = dim3(kHThreads);\n"
     "        cfg.dynamicSmemBytes = kHSmem;\n"
     "        if (cudaOccupancyMaxActiveClusters(&pairs, gemm_wgmma_kernel, &cfg) != cudaSuccess || pairs <= 0)\n"
     "            pairs = sms / 2;\n"
     "        printf(\"cluster2: %d pairs resident\\n\", pairs);\n"
     "    }\n"
     "    const int grid = 2 * (int)(tiles < pairs ? tiles : pairs);"),
]


def main() -> None:
    """Apply SUBS to the solution (each must match once) and write the variant next to a copy of cc_hopper.h."""
    text = (ROOT / "benchmarks/wgmma17/gemm_hopper_v2.cu").read_text()
    for old, new in SUBS:
        if text.count(old) < 1:
            raise SystemExit(f"not in gemm_hopper_v2.cu: {old!r}")
        text = text.replace(old, new)
    # the producer's `if (threadIdx.x == 0) {` needs its closing brace: after the tile loop of the producer
    marker = "            // END SOLUTION\n        }\n    } else {"
    if marker not in text:
        raise SystemExit("producer loop end not found")
    text = text.replace(marker, "            // END SOLUTION\n        }\n        }\n    } else {")
    # every thread (producer warps too) meets the peer block at the end: its barriers get remote arrivals
    tail = "                }\n        }\n    }\n}\n"
    if tail not in text:
        raise SystemExit("kernel end not found")
    end = "                }\n        }\n    }\n    cl_sync();  // the peer may still arrive on our barriers\n}\n"
    text = text.replace(tail, end)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "gemm_hopper.cu").write_text(text)
    shutil.copy(SOL / "cc_hopper.h", out / "cc_hopper.h")


if __name__ == "__main__":
    main()
