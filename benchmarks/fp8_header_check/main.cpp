// run.sh's driver: the same inputs through ours.cpp and theirs.cpp; prints every mismatch (the first few).
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <random>
#include <cstdlib>
extern "C" { unsigned char ours_f(float,int,int), theirs_f(float,int,int), ours_d(double,int,int), theirs_d(double,int,int);
unsigned short ours_h(unsigned short,int,int), theirs_h(unsigned short,int,int), ours_b(unsigned short,int,int), theirs_b(unsigned short,int,int);
unsigned short ours_dec(unsigned char,int), theirs_dec(unsigned char,int); float ours_decf(unsigned char,int), theirs_decf(unsigned char,int);
long long ours_int(unsigned char,int,int), theirs_int(unsigned char,int,int); unsigned short ours_bf(unsigned char,int), theirs_bf(unsigned char,int);}
int main(int argc, char** argv) {
  long bad = 0;
  for (int k = 0; k < 2; ++k) for (int b = 0; b < 256; ++b) {
    if (ours_dec(b,k) != theirs_dec(b,k)) { if (bad++ < 10) printf("dec %d %02x %04x %04x\n", k, b, ours_dec(b,k), theirs_dec(b,k)); }
    float a = ours_decf(b,k), t = theirs_decf(b,k); if (memcmp(&a,&t,4)) { if (bad++ < 10) printf("decf %d %02x\n", k, b); }
    if (ours_bf(b,k) != theirs_bf(b,k)) { if (bad++ < 10) printf("bf %d %02x %04x %04x\n", k, b, ours_bf(b,k), theirs_bf(b,k)); }
    for (int w = 0; w < 9; ++w) if (ours_int(b,k,w) != theirs_int(b,k,w)) { if (bad++ < 20) printf("int %d %02x w%d %lld %lld\n", k, b, w, ours_int(b,k,w), theirs_int(b,k,w)); }
  }
  for (unsigned h = 0; h < 65536; ++h) for (int s = 0; s < 2; ++s) for (int k = 0; k < 2; ++k) {
    if (ours_h(h,s,k) != theirs_h(h,s,k)) { if (bad++ < 30) printf("h %04x %d %d\n", h, s, k); }
    if (ours_b(h,s,k) != theirs_b(h,s,k)) { if (bad++ < 30) printf("b %04x %d %d\n", h, s, k); }
  }
  std::mt19937_64 rng(1);
  for (long i = 0; i < 20000000; ++i) { uint64_t u = rng(); if (i % 4 == 0) u = (u & 0x800FFFFFFFFFFFFFull) | ((uint64_t)(1023 - 30 + (rng() % 50)) << 52); double d; memcpy(&d,&u,8);
    for (int s = 0; s < 2; ++s) for (int k = 0; k < 2; ++k) if (ours_d(d,s,k) != theirs_d(d,s,k)) { if (bad++ < 40) printf("d %016llx %d %d %02x %02x\n", (unsigned long long)u, s, k, ours_d(d,s,k), theirs_d(d,s,k)); } }
  long n = 0;
  const uint64_t step = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1;  // > 1: every step-th float instead
  for (uint64_t u = 0; u < (1ull << 32); u += step) { uint32_t v = (uint32_t)u; int e = (v >> 23) & 0xff;
    if (step == 1 && (e < 127 - 20 || e > 127 + 20) && (v & 0xfff) != 0) continue;  // outside 2^-20..2^21: 1/4096
    float f; memcpy(&f,&v,4); ++n;
    for (int s = 0; s < 2; ++s) for (int k = 0; k < 2; ++k) if (ours_f(f,s,k) != theirs_f(f,s,k)) { if (bad++ < 60) printf("f %08x %d %d %02x %02x\n", v, s, k, ours_f(f,s,k), theirs_f(f,s,k)); } }
  printf("256 codes x 2 kinds (decode to half/float/bf16, 9 integer conversions), 65536 half and 65536 bf16 inputs, "
         "20000000 random doubles, %ld floats; x 2 saturation modes x 2 kinds where they apply\n", n);
  printf("mismatches: %ld\n", bad); return bad != 0;
}
