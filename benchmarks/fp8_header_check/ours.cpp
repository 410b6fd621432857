// The simulator side of run.sh: cuda_fp8.h as cudacourse/sim/runtime/ccsim_fp8.h provides it.
#include <cstdint>
#include <limits>
struct float2 { float x, y; }; struct double2 { double x, y; }; struct float4 { float x, y, z, w; };
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
#include "ccsim_fp16.h"
#include "ccsim_fp8.h"
extern "C" unsigned char ours_f(float x, int sat, int kind) { return __nv_cvt_float_to_fp8(x, (__nv_saturation_t)sat, (__nv_fp8_interpretation_t)kind); }
extern "C" unsigned char ours_d(double x, int sat, int kind) { return __nv_cvt_double_to_fp8(x, (__nv_saturation_t)sat, (__nv_fp8_interpretation_t)kind); }
extern "C" unsigned short ours_h(unsigned short h, int sat, int kind) { return __nv_cvt_halfraw_to_fp8(__half_raw{h}, (__nv_saturation_t)sat, (__nv_fp8_interpretation_t)kind); }
extern "C" unsigned short ours_b(unsigned short h, int sat, int kind) { return __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{h}, (__nv_saturation_t)sat, (__nv_fp8_interpretation_t)kind); }
extern "C" unsigned short ours_dec(unsigned char b, int kind) { return __nv_cvt_fp8_to_halfraw(b, (__nv_fp8_interpretation_t)kind).x; }
extern "C" float ours_decf(unsigned char b, int kind) { if (kind==0){__nv_fp8_e4m3 v; v.__x=b; return float(v);} __nv_fp8_e5m2 v; v.__x=b; return float(v); }
extern "C" long long ours_int(unsigned char b, int kind, int which) {
  if (kind==0){__nv_fp8_e4m3 v; v.__x=b; switch(which){case 0: return (unsigned char)v; case 1: return (signed char)v; case 2: return (int)v; case 3: return (unsigned)v; case 4: return (short)v; case 5: return (unsigned short)v; case 6: return (long long)v; case 7: return (bool)v; case 8: return (long long)(unsigned long long)v;}}
  else {__nv_fp8_e5m2 v; v.__x=b; switch(which){case 0: return (unsigned char)v; case 1: return (signed char)v; case 2: return (int)v; case 3: return (unsigned)v; case 4: return (short)v; case 5: return (unsigned short)v; case 6: return (long long)v; case 7: return (bool)v; case 8: return (long long)(unsigned long long)v;}}
  return 0; }
extern "C" unsigned short ours_bf(unsigned char b, int kind) { if (kind==0){__nv_fp8_e4m3 v; v.__x=b; return ((__nv_bfloat16)v).__x;} __nv_fp8_e5m2 v; v.__x=b; return ((__nv_bfloat16)v).__x; }
