// Variants of lesson 04's attention_flash (task 4.8) for benchmarks/flash_sweep.py: one generalized kernel,
// template knobs: RPT query rows per thread (4 or 8), NT threads per CTA (BQ = RPT * NT / 8), KFIX (K tile
// loaded with a lane order whose transposed shared stores are 2-way instead of 8-way bank conflicted), FEXP
// (ex2.approx.ftz instead of exp2f's denormal-safe sequence). Built as a plain shared library:
//   nvcc -O3 -arch=sm_90a -shared -Xcompiler -fPIC benchmarks/flash_variants.cu -o flash_variants.so
// and called through ctypes with raw device pointers (flash_variant(id, q, k, v, o, B, H, N, scale, causal)).
#include <cmath>
#include <cstdio>
#include <cuda_runtime.h>

#include "../solutions/04_transformer/attention.cu"  // id -1 below: the committed task 4.8 solution

namespace fv {
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPad = 4;

template <bool FEXP>
__device__ inline float ex2(float x) {
    if constexpr (FEXP) {
        float y;
        asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
        return y;
    } else {
        return exp2f(x);
    }
}

template <int D, int RPT, int NT, int KPT>
struct Cfg {
    static constexpr int kBK = 8 * KPT;  // keys per tile
    static constexpr int BQ = RPT * NT / 8;
    static constexpr int QS = BQ + kPad;
    static constexpr int KS = kBK + kPad;
    static constexpr int DPT = D / 8;
    static constexpr int LPT = kBK * D / 4 / NT;
    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + D * QS;
    static constexpr int V_OFF = K_OFF + D * KS;
    static constexpr int P_OFF = V_OFF + kBK * D;
    static constexpr int FLOATS = P_OFF + kBK * QS;
    static_assert(kBK * D / 4 % NT == 0, "tile load must split evenly");
};

template <int D, bool KFIX>
__device__ inline void k_index(int e, int& j, int& c4) {
    constexpr int D4 = D / 4;
    if constexpr (KFIX) {
        const int hi = e >> 4;
        c4 = 4 * ((e & 1) | ((hi % (D4 / 2)) << 1));
        j = ((e >> 1) & 7) + 8 * (hi / (D4 / 2));
    } else {
        j = e / D4;
        c4 = (e % D4) * 4;
    }
}

template <int D, int RPT, int NT, int KPT, bool KFIX, bool FEXP, int MINB>
__global__ void __launch_bounds__(NT, MINB)
flash_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
             float* __restrict__ o, int H, int N, float scale_log2, int causal) {
    using C = Cfg<D, RPT, NT, KPT>;
    constexpr int BQ = C::BQ;
    constexpr int kBK = C::kBK;
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    float* Qt = smem + C::Q_OFF;
    float* Kt = smem + C::K_OFF;
    float* Vs = smem + C::V_OFF;
    float* Pt = smem + C::P_OFF;

    const int tid = threadIdx.x, rg = tid / 8, cg = tid % 8;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BQ;
    const size_t tok = (size_t)H * D;
    const size_t head0 = ((size_t)b * N * H + h) * D;
    const float* kb = k + head0;
    const float* vb = v + head0;

    for (int e = tid; e < BQ * D / 4; e += NT) {
        const int r = e / (D / 4), c4 = (e % (D / 4)) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (q0 + r < N) x = *reinterpret_cast<const float4*>(q + head0 + (size_t)(q0 + r) * tok + c4);
        Qt[(c4 + 0) * C::QS + r] = x.x * scale_log2;
        Qt[(c4 + 1) * C::QS + r] = x.y * scale_log2;
        Qt[(c4 + 2) * C::QS + r] = x.z * scale_log2;
        Qt[(c4 + 3) * C::QS + r] = x.w * scale_log2;
    }

    float m_i[RPT], l_i[RPT], acc[RPT][C::DPT];
#pragma unroll
    for (int ii = 0; ii < RPT; ++ii) {
        m_i[ii] = -INFINITY;
        l_i[ii] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < C::DPT; ++kk) acc[ii][kk] = 0.0f;
    }

    const int k_end = causal ? (N < q0 + BQ ? N : q0 + BQ) : N;
    float4 kr[C::LPT], vr[C::LPT];
    auto load = [&](int k0) {
#pragma unroll
        for (int l = 0; l < C::LPT; ++l) {
            const int e = tid + NT * l;
            int j, c4;
            k_index<D, KFIX>(e, j, c4);
            const int jv = e / (D / 4), cv = (e % (D / 4)) * 4;
            kr[l] = k0 + j < N ? *reinterpret_cast<const float4*>(kb + (size_t)(k0 + j) * tok + c4)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
            vr[l] = k0 + jv < N ? *reinterpret_cast<const float4*>(vb + (size_t)(k0 + jv) * tok + cv)
                                : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    load(0);

    for (int k0 = 0; k0 < k_end; k0 += kBK) {
#pragma unroll
        for (int l = 0; l < C::LPT; ++l) {
            const int e = tid + NT * l;
            int j, c4;
            k_index<D, KFIX>(e, j, c4);
            Kt[(c4 + 0) * C::KS + j] = kr[l].x;
            Kt[(c4 + 1) * C::KS + j] = kr[l].y;
            Kt[(c4 + 2) * C::KS + j] = kr[l].z;
            Kt[(c4 + 3) * C::KS + j] = kr[l].w;
            const int jv = e / (D / 4), cv = (e % (D / 4)) * 4;
            *reinterpret_cast<float4*>(Vs + jv * D + cv) = vr[l];
        }
        __syncthreads();
        if (k0 + kBK < k_end) load(k0 + kBK);

        float s[RPT][KPT];
#pragma unroll
        for (int ii = 0; ii < RPT; ++ii)
#pragma unroll
            for (int jj = 0; jj < KPT; ++jj) s[ii][jj] = 0.0f;
#pragma unroll 16
        for (int c = 0; c < D; ++c) {
            float av[RPT];
#pragma unroll
            for (int hh = 0; hh < RPT / 4; ++hh) {
                const float4 a = *reinterpret_cast<const float4*>(Qt + c * C::QS + RPT * rg + 4 * hh);
                av[4 * hh] = a.x; av[4 * hh + 1] = a.y; av[4 * hh + 2] = a.z; av[4 * hh + 3] = a.w;
            }
            float kv[KPT];
#pragma unroll
            for (int kh = 0; kh < KPT / 4; ++kh) {
                const float4 kk4 = *reinterpret_cast<const float4*>(Kt + c * C::KS + 32 * kh + 4 * cg);
                kv[4 * kh] = kk4.x; kv[4 * kh + 1] = kk4.y; kv[4 * kh + 2] = kk4.z; kv[4 * kh + 3] = kk4.w;
            }
#pragma unroll
            for (int ii = 0; ii < RPT; ++ii)
#pragma unroll
                for (int jj = 0; jj < KPT; ++jj) s[ii][jj] = fmaf(av[ii], kv[jj], s[ii][jj]);
        }

#pragma unroll
        for (int ii = 0; ii < RPT; ++ii) {
            const int qi = q0 + RPT * rg + ii;
            float mx = -INFINITY;
#pragma unroll
            for (int jj = 0; jj < KPT; ++jj) {
                const int kj = k0 + 32 * (jj / 4) + 4 * cg + jj % 4;
                if (kj >= N || (causal && kj > qi)) s[ii][jj] = -INFINITY;
                mx = fmaxf(mx, s[ii][jj]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            const float m_new = fmaxf(m_i[ii], mx);
            const float mu = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = ex2<FEXP>(m_i[ii] - mu);
            m_i[ii] = m_new;
            l_i[ii] *= alpha;
#pragma unroll
            for (int kk = 0; kk < C::DPT; ++kk) acc[ii][kk] *= alpha;
#pragma unroll
            for (int jj = 0; jj < KPT; ++jj) {
                s[ii][jj] = ex2<FEXP>(s[ii][jj] - mu);
                l_i[ii] += s[ii][jj];
            }
        }
#pragma unroll
        for (int jj = 0; jj < KPT; ++jj)
#pragma unroll
            for (int hh = 0; hh < RPT / 4; ++hh)
                *reinterpret_cast<float4*>(Pt + (32 * (jj / 4) + 4 * cg + jj % 4) * C::QS + RPT * rg + 4 * hh) =
                    make_float4(s[4 * hh][jj], s[4 * hh + 1][jj], s[4 * hh + 2][jj], s[4 * hh + 3][jj]);
        __syncthreads();

#pragma unroll 4
        for (int j = 0; j < kBK; ++j) {
            float p[RPT];
#pragma unroll
            for (int hh = 0; hh < RPT / 4; ++hh) {
                const float4 p4 = *reinterpret_cast<const float4*>(Pt + j * C::QS + RPT * rg + 4 * hh);
                p[4 * hh] = p4.x; p[4 * hh + 1] = p4.y; p[4 * hh + 2] = p4.z; p[4 * hh + 3] = p4.w;
            }
            const float* vrow = Vs + j * D;
            if constexpr (D % 32 == 0) {
#pragma unroll
                for (int g = 0; g < C::DPT / 4; ++g) {
                    const float4 v4 = *reinterpret_cast<const float4*>(vrow + 4 * cg + 32 * g);
                    const float vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                    for (int ii = 0; ii < RPT; ++ii)
#pragma unroll
                        for (int u = 0; u < 4; ++u) acc[ii][4 * g + u] = fmaf(p[ii], vv[u], acc[ii][4 * g + u]);
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < C::DPT; ++kk) {
                    const float vv = vrow[cg + 8 * kk];
#pragma unroll
                    for (int ii = 0; ii < RPT; ++ii) acc[ii][kk] = fmaf(p[ii], vv, acc[ii][kk]);
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int ii = 0; ii < RPT; ++ii) {
        float l = l_i[ii];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        l += __shfl_xor_sync(0xffffffffu, l, 4);
        const int qi = q0 + RPT * rg + ii;
        if (qi < N) {
            const float inv = 1.0f / l;
            float* orow = o + head0 + (size_t)qi * tok;
#pragma unroll
            for (int kk = 0; kk < C::DPT; ++kk) {
                const int col = D % 32 == 0 ? 4 * cg + 32 * (kk / 4) + kk % 4 : cg + 8 * kk;
                orow[col] = acc[ii][kk] * inv;
            }
        }
    }
}

template <int D, int RPT, int NT, bool KFIX, bool FEXP, int KPT = 4, int MINB = 1>
static int launch(const float* q, const float* k, const float* v, float* o, int B, int H, int N, float scale,
                  int causal) {
    using C = Cfg<D, RPT, NT, KPT>;
    auto kern = flash_kernel<D, RPT, NT, KPT, KFIX, FEXP, MINB>;
    const size_t bytes = C::FLOATS * sizeof(float);
    if (bytes > 48 * 1024) cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    const dim3 grid((N + C::BQ - 1) / C::BQ, B * H);
    kern<<<grid, NT, bytes>>>(q, k, v, o, H, N, scale * kLog2e, causal);
    return (int)cudaGetLastError();
}

}  // namespace fv

// id: the variant (-1: the solution's attention_flash); names in flash_sweep.py's VARIANTS, same order.
extern "C" int flash_variant(int id, const float* q, const float* k, const float* v, float* o, int B, int H, int N,
                             float scale, int causal) {
    using namespace fv;
    switch (id) {
        case -1: attention_flash(q, k, v, o, B, H, N, 64, scale, causal); return (int)cudaGetLastError();
        case 0: return launch<64, 4, 128, false, false, 4, 4>(q, k, v, o, B, H, N, scale, causal);
        case 1: return launch<64, 4, 128, true, false, 4, 4>(q, k, v, o, B, H, N, scale, causal);
        case 2: return launch<64, 4, 128, true, true, 4, 4>(q, k, v, o, B, H, N, scale, causal);
        case 3: return launch<64, 4, 256, false, false, 4, 2>(q, k, v, o, B, H, N, scale, causal);
        case 4: return launch<64, 4, 256, true, true, 4, 2>(q, k, v, o, B, H, N, scale, causal);
        case 5: return launch<64, 8, 128, false, false>(q, k, v, o, B, H, N, scale, causal);
        case 6: return launch<64, 8, 128, true, true>(q, k, v, o, B, H, N, scale, causal);
        case 7: return launch<64, 8, 64, true, true>(q, k, v, o, B, H, N, scale, causal);
        case 8: return launch<64, 8, 256, true, true>(q, k, v, o, B, H, N, scale, causal);
        case 9: return launch<64, 4, 128, true, true, 8>(q, k, v, o, B, H, N, scale, causal);
        case 10: return launch<64, 4, 256, true, true, 8>(q, k, v, o, B, H, N, scale, causal);
        case 11: return launch<64, 8, 128, true, true, 4, 3>(q, k, v, o, B, H, N, scale, causal);
        case 12: return launch<64, 4, 128, true, true, 4, 1>(q, k, v, o, B, H, N, scale, causal);
        default: return -1;
    }
}
