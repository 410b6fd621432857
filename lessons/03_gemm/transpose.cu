// transpose.cu: lesson 03, matrix transpose through shared memory, and what bank conflicts cost.
//
//     out[N,M] = in[M,N]^T        row-major float32, contiguous, any M, N >= 1
//
// A transpose moves every element once, so its speed is all memory traffic: the reads and the writes must
// both be coalesced, and a shared-memory tile is what makes that possible. The tile then has to be read
// column-wise, which is where bank conflicts appear (32 banks of 4 bytes: a 32-float row spans all banks
// once, so a column of a [32][32] tile sits in ONE bank and a warp reading it needs 32 passes).
//
// Versions:
//   transpose_naive         worked example: one thread per element; reads coalesced, writes 32 floats apart
//   transpose_tiled         complete: a 32x32 tile in shared memory; reads and writes coalesced, but the
//                           column reads of the tile are 32-way bank conflicts
//   transpose_conflict_free TODO(task 3.8) the tiled version without a single bank conflict
//
// Run:     import cudacourse as cc; m = cc.lesson("03_gemm"); m.transpose_tiled(x, out, M, N)
// Profile: .venv/bin/python -m cudacourse profile 03_gemm transpose_tiled --size 64 --size 64  (bank conflicts
//          per line)
// Check:   make check T=3.8: correct on every shape AND zero bank conflicts under the simulator's profiler.

// ----------------------------------------------------------------------------------------------------
// Helpers
// ----------------------------------------------------------------------------------------------------

#define TILE 32        // tile edge: one warp covers a tile row
#define ROWS 8         // a block is TILE x ROWS threads; each thread moves TILE / ROWS = 4 elements

static inline int tr_ceil_div(int a, int b) { return (a + b - 1) / b; }

// ----------------------------------------------------------------------------------------------------
// Worked example: transpose_naive
// ----------------------------------------------------------------------------------------------------

// Thread (r, c) copies in[r, c] to out[c, r]. A warp reads 32 consecutive floats (4 sectors), but writes
// 32 floats M apart: 32 sectors per store request, 8x the traffic of a coalesced store.
__global__ void transpose_naive_kernel(const float* __restrict__ in, float* __restrict__ out, int M, int N) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < M && c < N) out[(long long)c * M + r] = in[(long long)r * N + c];
}

// Contract: in [M,N], out [N,M]; writes every out element.
void transpose_naive(const float* in, float* out, int M, int N) {
    if (M <= 0 || N <= 0) return;
    transpose_naive_kernel<<<dim3(tr_ceil_div(N, TILE), tr_ceil_div(M, ROWS)), dim3(TILE, ROWS)>>>(in, out, M, N);
}

// ----------------------------------------------------------------------------------------------------
// transpose_tiled: coalesced both ways, conflicted in shared memory
// ----------------------------------------------------------------------------------------------------

// The block stages a 32x32 tile: it reads rows of `in` (coalesced) into tile[row][col], then writes rows of
// `out`, which are columns of the tile: tile[col][row + j] for consecutive threadIdx.x. Those 32 words are
// 32 floats apart, all in one bank: every load from the tile is a 32-way bank conflict.
__global__ void transpose_tiled_kernel(const float* __restrict__ in, float* __restrict__ out, int M, int N) {
    __shared__ float tile[TILE][TILE];
    const int c = blockIdx.x * TILE + threadIdx.x;
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        const int r = blockIdx.y * TILE + j;
        if (r < M && c < N) tile[j][threadIdx.x] = in[(long long)r * N + c];
    }
    __syncthreads();
    const int oc = blockIdx.y * TILE + threadIdx.x;   // column of out = row of in
    for (int j = threadIdx.y; j < TILE; j += ROWS) {
        const int orow = blockIdx.x * TILE + j;          // row of out = column of in
        if (orow < N && oc < M) out[(long long)orow * M + oc] = tile[threadIdx.x][j];
    }
}

// Contract: as transpose_naive.
void transpose_tiled(const float* in, float* out, int M, int N) {
    if (M <= 0 || N <= 0) return;
    transpose_tiled_kernel<<<dim3(tr_ceil_div(N, TILE), tr_ceil_div(M, TILE)), dim3(TILE, ROWS)>>>(in, out, M, N);
}

// ----------------------------------------------------------------------------------------------------
// transpose_conflict_free (task 3.8)
// ----------------------------------------------------------------------------------------------------

__global__ void transpose_conflict_free_kernel(const float* __restrict__ in, float* __restrict__ out, int M,
                                               int N) {
    // TODO(task 3.8): transpose_tiled without bank conflicts (~12 lines; start from a copy of its body).
    // The graded check runs this kernel under the simulator's profiler and wants zero bank conflicts on
    // every shared-memory load and store, coalesced global stores, and the right answer for any M, N.
    // Hint: a tile row of 33 floats instead of 32 shifts each row by one bank, so a column of the tile
    // touches 32 different banks. See `.venv/bin/python -m cudacourse profile 03_gemm transpose_tiled` for
    // the conflicts of the given version, line by line.
}

// Contract: as transpose_naive.
void transpose_conflict_free(const float* in, float* out, int M, int N) {
    if (M <= 0 || N <= 0) return;
    transpose_conflict_free_kernel<<<dim3(tr_ceil_div(N, TILE), tr_ceil_div(M, TILE)), dim3(TILE, ROWS)>>>(
        in, out, M, N);
}
