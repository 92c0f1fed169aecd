#pragma once
// Internal to hpctrain's libraries (collectives, ml, train): HPCTRAIN_VECTOR_CLONES compiles a hot loop for AVX-512 (x86-64-v4: F/BW/CD/DQ/VL),
// AVX2 (x86-64-v3) and the baseline, picked at load time by GCC's target_clones (by ISA level,
// not by CPU model as "arch=<cpu>" would). Every clone does the same IEEE operations in the same
// order per element, so the bits do not depend on the CPU. Other compilers, and nvcc, get the
// baseline loop. The files using it are compiled with -O3 (collectives/CMakeLists.txt) or -O2
// with the dynamic cost model (src/ml/CMakeLists.txt): GCC 12 vectorises loops of unknown trip
// count only so. Neither may contract a * b + c into a fused multiply-add where the bits matter
// (-ffp-contract=off in ml).

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define HPCTRAIN_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define HPCTRAIN_ALWAYS_INLINE __attribute__((always_inline))
#else
#define HPCTRAIN_VECTOR_CLONES
#define HPCTRAIN_ALWAYS_INLINE
#endif
