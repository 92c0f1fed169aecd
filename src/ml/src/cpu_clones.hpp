#pragma once
// HPCTRAIN_ML_CLONES before a hot loop's function: GCC compiles it for AVX-512 and AVX2 besides
// the baseline, and the loader picks the widest the CPU has (target_clones, an ifunc). The files
// that use it are compiled with -ffp-contract=off (src/ml/CMakeLists.txt), so every clone runs
// the same element-wise IEEE operations in the same order: the same bits on any CPU, only
// wider. Internal to hpctrain::ml.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define HPCTRAIN_ML_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HPCTRAIN_ML_CLONES
#endif
