// The reference side of run.sh: the CUDA toolkit's cuda_fp8.h (its host code), compiled by g++.
#include <cuda_fp8.h>
extern "C" unsigned char theirs_f(float x, int sat, int kind) { return __nv_cvt_float_to_fp8(x, (__nv_saturation_t)sat, (__nv_fp8_interpretation_t)kind); }
extern "C" unsigned char theirs_d(double x, int sat, int kind) { return __nv_cvt_double_to_fp8(x, (__nv_saturation_t)sat, (__nv_fp8_interpretation_t)kind); }
extern "C" unsigned short theirs_h(unsigned short h, int sat, int kind) { __half_raw r; r.x=h; return __nv_cvt_halfraw_to_fp8(r, (__nv_saturation_t)sat, (__nv_fp8_interpretation_t)kind); }
extern "C" unsigned short theirs_b(unsigned short h, int sat, int kind) { __nv_bfloat16_raw r; r.x=h; return __nv_cvt_bfloat16raw_to_fp8(r, (__nv_saturation_t)sat, (__nv_fp8_interpretation_t)kind); }
extern "C" unsigned short theirs_dec(unsigned char b, int kind) { return __nv_cvt_fp8_to_halfraw(b, (__nv_fp8_interpretation_t)kind).x; }
extern "C" float theirs_decf(unsigned char b, int kind) { if (kind==0){__nv_fp8_e4m3 v; v.__x=b; return float(v);} __nv_fp8_e5m2 v; v.__x=b; return float(v); }
extern "C" long long theirs_int(unsigned char b, int kind, int which) {
  if (kind==0){__nv_fp8_e4m3 v; v.__x=b; switch(which){case 0: return (unsigned char)v; case 1: return (signed char)v; case 2: return (int)v; case 3: return (unsigned)v; case 4: return (short)v; case 5: return (unsigned short)v; case 6: return (long long)v; case 7: return (bool)v; case 8: return (long long)(unsigned long long)v;}}
  else {__nv_fp8_e5m2 v; v.__x=b; switch(which){case 0: return (unsigned char)v; case 1: return (signed char)v; case 2: return (int)v; case 3: return (unsigned)v; case 4: return (short)v; case 5: return (unsigned short)v; case 6: return (long long)v; case 7: return (bool)v; case 8: return (long long)(unsigned long long)v;}}
  return 0; }
extern "C" unsigned short theirs_bf(unsigned char b, int kind) { if (kind==0){__nv_fp8_e4m3 v; v.__x=b; __nv_bfloat16 r=(__nv_bfloat16)v; return *(unsigned short*)&r;} __nv_fp8_e5m2 v; v.__x=b; __nv_bfloat16 r=(__nv_bfloat16)v; return *(unsigned short*)&r; }
