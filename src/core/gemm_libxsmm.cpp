// Small float matrix products through libxsmm's JIT kernels (CPU), behind core::gemm.
//
// Why: deterministic training runs every layer on micro-shards of 16 rows. At those shapes
// oneDNN 2.6's brgemm matmul ran the MLP's products at 84-96 GFLOP/s on one Zen 4 core against
// 106-111 at 64 rows, and libxsmm 1.17's kernels at 102-116 at both (a throw-away program, hot
// caches, one thread, both libraries in the same run; docs/compute-core.md). The 16-row passes
// were the floor of deterministic mode's cost (docs/deterministic.md).
//
// How: libxsmm's kernels are column-major C = A op(B) (op(B) = B or B^T; 1.17 has no transposed
// A). A row-major matrix is the column-major transpose of itself, so:
//  - c = a b and c = a^T b (a dense layer's backward: dx = dy w, dw = dy^T x) are column-major
//    c^T = b^T op(a)^T: b as it is stored, a as the kernel's B (transposed for a^T). Nothing is
//    copied.
//  - c = a b^T (the dense forward y = x w^T) would need a transposed A. Instead a (the batch's
//    rows: small) is transposed into a scratch matrix, the kernel computes column-major
//    t[m x n] = a w^T with w read as stored, and t is transposed into c with the bias added.
//    The two transposes touch m x (k + n) floats against the product's 2 m n k flops.
// Kernels are generated on first use and cached by libxsmm for the process (its registry is
// thread-safe). Scratch matrices are per thread and only grow: no allocation in a steady step.
//
// Threads: c's columns are cut into blocks of about 128 (whole 16-column vectors, an even count)
// by the column count alone, one kernel call each; with OpenMP (HPCTRAIN_HAVE_OPENMP) a product of at least
// kParallelFlops shares the blocks out over the rank's OpenMP team (the thread count the
// Environment set). No element's sum over k is split and the cut does not depend on the thread
// count, so neither do the bits (tests/core/test_tensor_gemm.cpp checks 1 against 2 threads).
//
// Range: libxsmm's kernels do not block for caches, so large products go to oneDNN: at most
// kMaxRows rows of the batch (m for a b and a b^T, k for a^T b) and kMaxInner for the other
// dimensions; and a b^T where b's row stride is a multiple of 1 KiB (see gemm()).
//
// gemm_tn_leaf_tree (deterministic training's grouped passes): a dense layer's weight gradient
// over a node of micro-shards is the pairwise tree (core/leaf_tree.hpp) of the micro-shards'
// separate products. Each thread takes its column blocks of c as gemm() cuts them and, tile of
// c's rows by tile, computes every leaf's product with libxsmm's kernels into a stack of tile
// buffers beside c and adds them in tree order while they are in cache: no whole-matrix term is
// written or read back (TreeSum's way was a whole gradient vector per micro-shard, then adds).
// Each leaf's bits are those gemm() gives its rows alone: the same column blocks, k = the leaf's
// rows, and tiles only where a once-per-shape probe shows they keep the whole-height kernel's
// bits. MLP at 64 rows in leaves of 16, one Zen 4 core: 0.85-0.86 of the whole batch's step
// against 0.69-0.73 for a gradient vector per micro-shard (bench_kernels train_step_micro_shards).
// On AVX-512 CPUs, groups of 4 leaves are instead summed over the tree in registers by hpctrain's
// own kernel (group_tile), where a once-per-shape probe shows it gives a leaf libxsmm's bits; the
// memory tree then only adds the groups (weight gradient 0.91-0.95 of the plain product's rate on
// one thread and 0.85-0.86 on two, against 0.68-0.71 and 0.63-0.66; bench_kernels gemm_leaf_tree).

#include "gemm_libxsmm.hpp"

#include <libxsmm.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/vector_clones.hpp"
#include "host_parallel.hpp"
#include "hpctrain/core/leaf_tree.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#ifdef HPCTRAIN_HAVE_OPENMP
#include <omp.h>
#endif

namespace hpctrain::core::libxsmm {

namespace {

constexpr std::int64_t kMaxRows = 256;
constexpr std::int64_t kMaxInner = 8192;
constexpr double kParallelFlops = 4.0e6;
constexpr std::int64_t kBlock = 128;      // c's column blocks: about this wide,
constexpr std::int64_t kVector = 16;      // whole vectors of this many floats,
constexpr std::int64_t kMaxBlocks = 128;  // and at most this many
constexpr std::int64_t kAliasingStride = 256;  // floats: 1 KiB
constexpr std::int64_t kTreeRows = 64;  // gemm_tn_leaf_tree: c's rows per tile (a node block: 32 KiB)

libxsmm_smmfunction kernel(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda,
                           std::int64_t ldb, std::int64_t ldc, float beta, bool trans_b) {
  const float alpha = 1.0F;
  const auto lm = static_cast<libxsmm_blasint>(m);
  const auto ln = static_cast<libxsmm_blasint>(n);
  const auto lk = static_cast<libxsmm_blasint>(k);
  const auto la = static_cast<libxsmm_blasint>(lda);
  const auto lb = static_cast<libxsmm_blasint>(ldb);
  const auto lc = static_cast<libxsmm_blasint>(ldc);
  const int flags = trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
  const int prefetch = LIBXSMM_PREFETCH_NONE;
  return libxsmm_smmdispatch(lm, ln, lk, &la, &lb, &lc, &alpha, &beta, &flags, &prefetch);
}

/// c's columns cut into blocks of whole 16-column vectors, about kBlock wide, an even count of
/// them where there are two or more (two threads get equal shares), the last block ending at the
/// last column. The cut depends on the column count only, never on the thread count: a kernel's
/// bits for an element depend on the width of the block it computes (libxsmm's code for a
/// 784-column block and for a 400-column one sums some columns differently), so the threads
/// share out whole blocks.
struct Blocks {
  std::int64_t columns, count, base, extra;
  int threads;
  /// Block i: its first column and width.
  std::pair<std::int64_t, std::int64_t> operator[](std::int64_t i) const {
    const std::int64_t first = (i * base + std::min(i, extra)) * kVector;
    return {first, std::min((base + (i < extra ? 1 : 0)) * kVector, columns - first)};
  }
};

Blocks column_blocks(std::int64_t columns, double flops) {
  const std::int64_t vectors = (columns + kVector - 1) / kVector;
  std::int64_t count = (vectors * kVector + kBlock - 1) / kBlock;
  if (count > 1 && count % 2 == 1 && count < vectors) ++count;
  Blocks b{columns, count, vectors / count, vectors % count, 1};
#ifdef HPCTRAIN_HAVE_OPENMP
  if (flops >= kParallelFlops && omp_in_parallel() == 0) {
    b.threads = static_cast<int>(std::min<std::int64_t>(detail::stable_kernel_team(), b.count));  // bits independent of it
  }
#endif
  return b;
}

/// The kernels of every block, kernels[i] = make(width of block i); false where one is missing.
/// The blocks have at most three widths (base, base + 1 vectors, a shorter last one), and
/// neighbours mostly share one: libxsmm's registry is asked once per run of equal widths.
template <class Make>
bool block_kernels(const Blocks& b, std::array<libxsmm_smmfunction, kMaxBlocks>& kernels, const Make& make) {
  if (b.count > kMaxBlocks) return false;
  std::int64_t width = -1;
  libxsmm_smmfunction k = nullptr;
  for (std::int64_t i = 0; i < b.count; ++i) {
    if (b[i].second != width) {
      width = b[i].second;
      k = make(width);
      if (k == nullptr) return false;
    }
    kernels[static_cast<std::size_t>(i)] = k;
  }
  return true;
}

/// body(i, first, width) for every block, on b.threads threads.
template <class Body>
void for_column_blocks(const Blocks& b, const Body& body) {
#ifdef HPCTRAIN_HAVE_OPENMP
#pragma omp parallel for num_threads(b.threads) schedule(static) if (b.threads > 1)
#endif
  for (std::int64_t i = 0; i < b.count; ++i) body(static_cast<std::size_t>(i), b[i].first, b[i].second);
}

/// prepare(s) for s in [0, slabs), then (after all of them, a barrier) body(i, first, width) for
/// every block, both on b.threads threads in one parallel region: an operand the blocks share
/// is laid out by all the threads first (one fork, not two).
template <class Prepare, class Body>
void for_column_blocks_after(const Blocks& b, std::int64_t slabs, const Prepare& prepare, const Body& body) {
#ifdef HPCTRAIN_HAVE_OPENMP
#pragma omp parallel num_threads(b.threads) if (b.threads > 1)
  {
#pragma omp for schedule(static)
    for (std::int64_t s = 0; s < slabs; ++s) prepare(s);
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < b.count; ++i) body(static_cast<std::size_t>(i), b[i].first, b[i].second);
  }
#else
  for (std::int64_t s = 0; s < slabs; ++s) prepare(s);
  for (std::int64_t i = 0; i < b.count; ++i) body(static_cast<std::size_t>(i), b[i].first, b[i].second);
#endif
}

/// Clears the upper halves of the vector registers after a kernel: libxsmm's AVX-512 code returns
/// without vzeroupper, and the SSE code compiled for baseline x86-64 that runs next (the
/// optimiser step, the activations) then ran 3-4x slower (measured: SGD 7 % -> 25 % of a step).
/// Only called where available() (AVX2 or newer) holds.
__attribute__((target("avx"))) void zero_upper() { _mm256_zeroupper(); }

/// Per-thread scratch `which`, at least `floats` long: it only grows (a resize to each call's
/// size refilled the part regained with zeros whenever the layers' sizes alternated: 37 us of a
/// deterministic MLP step at 1 x 2 in memset).
float* scratch(int which, std::int64_t floats) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& b = buffers[which];
  if (b.size() < static_cast<std::size_t>(floats)) b.resize(static_cast<std::size_t>(floats));
  return b.data();
}

/// gemm_tn_leaf_tree's node storage beside c: `slots` matrices of at least `floats` each, per
/// thread; they only grow.
std::vector<std::vector<float>>& tree_scratch(int slots, std::size_t floats) {
  thread_local std::vector<std::vector<float>> buffers;
  if (buffers.size() < static_cast<std::size_t>(slots)) buffers.resize(static_cast<std::size_t>(slots));
  for (auto& b : buffers) {
    if (b.size() < floats) b.resize(floats);
  }
  return buffers;
}

/// A probe's answers, once per shape and leading dimensions {m, n, k, lda, ldb, ldc}, for the
/// process; the probe runs under the lock.
class ProbeAnswers {
 public:
  template <class Probe>
  bool remembered(const std::array<std::int64_t, 6>& key, const Probe& probe) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = known_.find(key); it != known_.end()) return it->second;
    const bool answer = probe();
    known_.emplace(key, answer);
    return answer;
  }

 private:
  std::mutex mutex_;
  std::map<std::array<std::int64_t, 6>, bool> known_;
};

/// The probes' operands a [k x lda] and b [k x ldb]: pseudo-random, of mixed magnitudes and signs
/// (where a different order of the k terms shows), a's columns 0, 3, 6, ... below m exact zeros,
/// some negative (where a product-first or a zero-first start differs in the sign of a zero sum).
std::pair<std::vector<float>, std::vector<float>> probe_operands(std::int64_t k, std::int64_t m, std::int64_t lda,
                                                                 std::int64_t ldb) {
  std::vector<float> pa(static_cast<std::size_t>(k * lda)), pb(static_cast<std::size_t>(k * ldb));
  std::uint32_t state = 2463534242U;
  for (auto* v : {&pa, &pb}) {
    for (float& x : *v) {
      state ^= state << 13;
      state ^= state >> 17;
      state ^= state << 5;
      x = std::ldexp(static_cast<float>(state % 2001U) / 1000.0F - 1.0F, static_cast<int>(state >> 28) - 8);
    }
  }
  for (std::int64_t r = 0; r < k; ++r) {  // a's columns 0, 3, 6, ...: zeros, some negative
    for (std::int64_t i = 0; i < m; i += 3) pa[static_cast<std::size_t>(r * lda + i)] = (r + i) % 2 == 0 ? 0.0F : -0.0F;
  }
  return {std::move(pa), std::move(pb)};
}

/// Whether the first m rows of n floats (row stride ldc) of x and y are the same bits.
bool same_rows(const std::vector<float>& x, const std::vector<float>& y, std::int64_t m, std::int64_t n,
               std::int64_t ldc) {
  for (std::int64_t r = 0; r < m; ++r) {
    if (std::memcmp(x.data() + r * ldc, y.data() + r * ldc, static_cast<std::size_t>(n) * sizeof(float)) != 0) return false;
  }
  return true;
}

/// Whether gemm_tn_leaf_tree's tiled kernels (tiled[wide tile][block], `tiles` tiles of m's rows,
/// the first m % tiles one row taller) give every element of a leaf's product the bits of the
/// whole-height kernels gemm() runs (whole[block]). Run once per shape and leading dimensions on
/// pseudo-random operands of mixed magnitudes, where a different order of the k terms shows,
/// and remembered for the process.
bool tiles_keep_bits(const Blocks& s, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda,
                     std::int64_t ldb, std::int64_t ldc, std::int64_t tiles,
                     const std::array<libxsmm_smmfunction, kMaxBlocks>& whole,
                     const std::array<libxsmm_smmfunction, kMaxBlocks> (&tiled)[2]) {
  static ProbeAnswers cache;
  return cache.remembered({m, n, k, lda, ldb, ldc}, [&] {
    const auto [pa, pb] = probe_operands(k, m, lda, ldb);
    std::vector<float> one(static_cast<std::size_t>(m * ldc)), cut(one.size());
    const std::int64_t tile = m / tiles, wide_tiles = m % tiles;
    for (std::int64_t i = 0; i < s.count; ++i) {
      const std::int64_t first = s[i].first;
      whole[static_cast<std::size_t>(i)](pb.data() + first, pa.data(), one.data() + first);
      for (std::int64_t t = 0, t0 = 0; t < tiles; ++t) {
        const int wide = t < wide_tiles ? 1 : 0;
        tiled[wide][static_cast<std::size_t>(i)](pb.data() + first, pa.data() + t0, cut.data() + t0 * ldc + first);
        t0 += tile + wide;
      }
      zero_upper();
    }
    return same_rows(one, cut, m, n, ldc);
  });
}

// ---- gemm_tn_leaf_tree's groups of leaves in registers (AVX-512) --------------------------------
//
// Up to kGroupLeaves consecutive leaves (node (2, g) of the tree) summed over the tree in
// registers for a register block of c: each leaf's sum over its own rows in its own
// accumulators, siblings added as soon as both exist, the group's node stored once. With
// libxsmm's kernels each leaf's product was stored and then added from memory: 0.68-0.71 of the
// plain product's GFLOP/s over the MLP's 8 leaves of 16 rows on one thread (bench_kernels
// gemm_leaf_tree). Every element of a leaf is x[r][j] dy[r][i] summed over the leaf's rows first
// to last, the first a product and the rest fused multiply-adds; the groups are used only where a
// once-per-shape probe shows that this gives libxsmm's bits for a leaf alone (what gemm()
// computes), so a node's bits stay those of its leaves' separate products. Register blocks of 8
// rows x 1 vector with groups of 4 leaves, masked loads throughout: 0.81-0.84 of the plain
// product on one thread; 6 x 2
// in pairs 0.79-0.80, 4 x 2 in fours 0.74-0.82, 3 x 2 in eights 0.58-0.67 (too few
// accumulators per leaf to hide the FMA latency). Whole vectors load and store without a mask
// (with every load masked: 0.83-0.85 against 0.91-0.95).

constexpr int kGroupLevels = 2;  // a group is a node of this level:
constexpr std::int64_t kGroupLeaves = 1 << kGroupLevels;  // 4 leaves, 3 register sets live at most
constexpr int kGroupRows = 8;     // rows of c per register block (8 x 3 accumulators)
constexpr int kGroupVectors = 1;  // 16-float vectors of c per register block

/// Row r's 16-float vectors of x at the register block's columns, the last one masked where the
/// block ends in a partial vector (Masked; masked loads cost the MLP's groups 6-10 %, so the
/// whole vectors load plainly).
template <int MV, bool Masked>
__attribute__((target("avx512f"), always_inline)) inline void load_row(__m512 (&xv)[MV], const float* row,
                                                                       __mmask16 last) {
#pragma GCC unroll 8
  for (int v = 0; v < MV; ++v) {
    xv[v] = Masked && v == MV - 1 ? _mm512_maskz_loadu_ps(last, row + 16 * v) : _mm512_loadu_ps(row + 16 * v);
  }
}

/// What one group's register blocks read: x and dy at the group's first row (row strides ldx,
/// ldd), the leaves' rows (the last may be shorter), the group's rows in all; whether the node
/// is added into the output (the tree's merge of it into the node before it) or stored.
struct GroupRows {
  const float* x;
  std::int64_t ldx;
  const float* dy;
  std::int64_t ldd;
  std::int64_t leaf_rows, rows;
  __mmask16 last;
  bool add;
};

/// acc[i][v] = sum over the leaf's k >= 1 rows of x[r][16 v ..] * dy[r][i], first to last: row
/// 0's product, then a fused multiply-add per row.
template <int NR, int MV, bool Masked>
__attribute__((target("avx512f"), always_inline)) inline void leaf_block(__m512 (&acc)[NR][MV], const float* x,
                                                                         std::int64_t ldx, const float* dy,
                                                                         std::int64_t ldd, std::int64_t k,
                                                                         __mmask16 last) {
  __m512 xv[MV];
  load_row<MV, Masked>(xv, x, last);
#pragma GCC unroll 8
  for (int i = 0; i < NR; ++i) {
    const __m512 d = _mm512_set1_ps(dy[i]);
#pragma GCC unroll 8
    for (int v = 0; v < MV; ++v) acc[i][v] = _mm512_mul_ps(xv[v], d);
  }
  for (std::int64_t r = 1; r < k; ++r) {
    load_row<MV, Masked>(xv, x + r * ldx, last);
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i) {
      const __m512 d = _mm512_set1_ps(dy[r * ldd + i]);
#pragma GCC unroll 8
      for (int v = 0; v < MV; ++v) acc[i][v] = _mm512_fmadd_ps(xv[v], d, acc[i][v]);
    }
  }
}

/// acc = the node of level L whose first leaf starts at row `first` of the group: its left
/// child, plus its right child where that holds a leaf (core/leaf_tree.hpp's tree).
template <int L, int NR, int MV, bool Masked>
__attribute__((target("avx512f"), always_inline)) inline void node_block(__m512 (&acc)[NR][MV], const GroupRows& g,
                                                                         std::int64_t first) {
  if constexpr (L == 0) {
    leaf_block<NR, MV, Masked>(acc, g.x + first * g.ldx, g.ldx, g.dy + first * g.ldd, g.ldd,
                       std::min(g.leaf_rows, g.rows - first), g.last);
  } else {
    node_block<L - 1, NR, MV, Masked>(acc, g, first);
    const std::int64_t right = first + (std::int64_t{1} << (L - 1)) * g.leaf_rows;
    if (right < g.rows) {
      __m512 other[NR][MV];
      node_block<L - 1, NR, MV, Masked>(other, g, right);
#pragma GCC unroll 8
      for (int i = 0; i < NR; ++i) {
#pragma GCC unroll 8
        for (int v = 0; v < MV; ++v) acc[i][v] = _mm512_add_ps(acc[i][v], other[i][v]);
      }
    }
  }
}

/// out[i][16 v ..] (row stride ldo) = the group's node, for one register block; with g.add,
/// out + the node (the bits of storing the node and adding it to out afterwards).
template <int NR, int MV, bool Masked>
__attribute__((target("avx512f"))) void group_block(const GroupRows& g, float* out, std::int64_t ldo) {
  __m512 acc[NR][MV];
  node_block<kGroupLevels, NR, MV, Masked>(acc, g, 0);
#pragma GCC unroll 8
  for (int i = 0; i < NR; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < MV; ++v) {
      float* to = out + i * ldo + 16 * v;
      if (Masked && v == MV - 1) {
        if (g.add) acc[i][v] = _mm512_add_ps(_mm512_maskz_loadu_ps(g.last, to), acc[i][v]);
        _mm512_mask_storeu_ps(to, g.last, acc[i][v]);
      } else {
        if (g.add) acc[i][v] = _mm512_add_ps(_mm512_loadu_ps(to), acc[i][v]);
        _mm512_storeu_ps(to, acc[i][v]);
      }
    }
  }
}

using GroupBlock = void (*)(const GroupRows&, float*, std::int64_t);

template <bool Masked, int R, int... V>
constexpr std::array<GroupBlock, kGroupVectors> group_blocks_of_rows(std::integer_sequence<int, V...>) {
  return {&group_block<R, V + 1, Masked>...};
}

/// blocks[rows - 1][vectors - 1]: the register blocks of every size a tile's edges need.
template <bool Masked, int... R>
constexpr std::array<std::array<GroupBlock, kGroupVectors>, kGroupRows> group_blocks(std::integer_sequence<int, R...>) {
  return {group_blocks_of_rows<Masked, R + 1>(std::make_integer_sequence<int, kGroupVectors>{})...};
}

/// out[mt x width] (row stride ldo) = the node of the group of leaves (of leaf_rows rows, `rows`
/// in all, at most kGroupLeaves leaves) over register blocks; with `add`, out += the node. x: the
/// group's rows of b at the column block's first column (row stride ldx); dy: those of a at the
/// tile's first column.
void group_tile(const float* x, std::int64_t ldx, const float* dy, std::int64_t ldd, std::int64_t leaf_rows,
                std::int64_t rows, float* out, std::int64_t ldo, std::int64_t mt, std::int64_t width, bool add) {
  static constexpr auto kWhole = group_blocks<false>(std::make_integer_sequence<int, kGroupRows>{});
  static constexpr auto kPartial = group_blocks<true>(std::make_integer_sequence<int, kGroupRows>{});
  const std::int64_t vectors = (width + 15) / 16;
  const auto tail = static_cast<int>(width % 16);
  for (std::int64_t v0 = 0; v0 < vectors; v0 += kGroupVectors) {
    const std::int64_t mv = std::min<std::int64_t>(kGroupVectors, vectors - v0);
    const bool partial = v0 + mv == vectors && tail != 0;
    for (std::int64_t i0 = 0; i0 < mt; i0 += kGroupRows) {
      const std::int64_t nr = std::min<std::int64_t>(kGroupRows, mt - i0);
      const GroupRows g{x + 16 * v0, ldx, dy + i0, ldd, leaf_rows, rows,
                        static_cast<__mmask16>(partial ? (1U << tail) - 1U : 0xFFFFU), add};
      (partial ? kPartial : kWhole)[static_cast<std::size_t>(nr - 1)][static_cast<std::size_t>(mv - 1)](
          g, out + i0 * ldo + 16 * v0, ldo);
    }
  }
}

/// Whether group_tile gives a leaf alone (a group of one leaf of k rows) the bits of libxsmm's whole-height
/// kernels (whole[block], as gemm() runs the leaf), for every column block: run once per shape
/// and leading dimensions on pseudo-random operands of mixed magnitudes and signs with columns
/// of exact zeros (where a product-first or zero-first start differs in the sign of a zero sum),
/// and remembered for the process. False on CPUs without AVX-512.
bool groups_keep_bits(const Blocks& s, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda,
                      std::int64_t ldb, std::int64_t ldc, const std::array<libxsmm_smmfunction, kMaxBlocks>& whole) {
  static const bool avx512 = __builtin_cpu_supports("avx512f") != 0;
  if (!avx512) return false;
  static ProbeAnswers cache;
  return cache.remembered({m, n, k, lda, ldb, ldc}, [&] {
    const auto [pa, pb] = probe_operands(k, m, lda, ldb);
    std::vector<float> one(static_cast<std::size_t>(m * ldc)), fused(one.size());
    for (std::int64_t i = 0; i < s.count; ++i) {
      const auto [first, width] = s[i];
      whole[static_cast<std::size_t>(i)](pb.data() + first, pa.data(), one.data() + first);
      zero_upper();
      group_tile(pb.data() + first, ldb, pa.data(), lda, k, k, fused.data() + first, ldc, m, width, false);
    }
    return same_rows(one, fused, m, n, ldc);
  });
}

/// gemm_tn_leaf_tree's short last leaf, whole, per thread; only grows.
std::vector<float>& short_leaf_scratch() {
  thread_local std::vector<float> buffer;
  return buffer;
}

/// dst += src on `rows` rows of `width` floats, `ld` apart (one call per node merge: the clone
/// is picked once, not per row).
HPCTRAIN_VECTOR_CLONES void add_rows(float* __restrict dst, const float* __restrict src, std::int64_t rows,
                                     std::int64_t width, std::int64_t ld) {
  for (std::int64_t i = 0; i < rows; ++i) {
    float* __restrict d = dst + i * ld;
    const float* __restrict s = src + i * ld;
    for (std::int64_t j = 0; j < width; ++j) d[j] += s[j];
  }
}

/// c's rows cut into `count` tiles as equal as can be: the first `wide` have base + 1 rows.
struct RowTiles {
  std::int64_t count, base, wide;
  /// At most kTreeRows rows per tile.
  static RowTiles of(std::int64_t m) {
    const std::int64_t count = (m + kTreeRows - 1) / kTreeRows;
    return RowTiles{count, m / count, m % count};
  }
  static RowTiles one(std::int64_t m) { return RowTiles{1, m, 0}; }
  std::int64_t most_rows() const { return base + (wide > 0 ? 1 : 0); }
};

/// gemm()'s leaves: c's (and a's) rows cut into `count` leaves of `rows` rows, the last `last`
/// rows high (shorter where the rows do not divide).
struct Leaves {
  std::int64_t count, rows, last;
  /// Leaves of leaf_rows rows over m (one leaf of m rows where leaf_rows is 0 or at least m).
  static Leaves of(std::int64_t m, std::int64_t leaf_rows) {
    if (leaf_rows <= 0 || leaf_rows >= m) return Leaves{1, m, m};
    const std::int64_t count = (m + leaf_rows - 1) / leaf_rows;
    return Leaves{count, leaf_rows, m - (count - 1) * leaf_rows};
  }
  bool short_last() const { return last != rows; }
  bool is_short(std::int64_t l) const { return l == count - 1 && short_last(); }
  std::int64_t height(std::int64_t l) const { return l == count - 1 ? last : rows; }
};

/// gemm_tn_leaf_tree's sum: for every column block of c (on the block's thread) and tile of c's
/// rows in order, the tree of core/leaf_tree.hpp over `items` nodes, item i computed by
/// compute(block, first, width, tile, first_row, tile_rows, i, out, add) into `out` (c's tile or
/// a per-thread buffer, row stride ldc, at the block's first column), siblings added there while
/// they are in cache. With AddsItems, an item merged into the node before it as soon as it is
/// computed is asked for with add = true (out += item); else add is always false.
template <bool AddsItems, class Compute>
void tree_in_tiles(const Blocks& s, const RowTiles& tiles, std::int64_t items, float* c, std::int64_t ldc,
                   const Compute& compute) {
  const int depth = leaf_tree_depth(items);
  const auto tile_floats = static_cast<std::size_t>(tiles.most_rows() * ldc);
  for_column_blocks(s, [&](std::size_t block, std::int64_t first, std::int64_t width) {
    std::vector<std::vector<float>>& nodes = tree_scratch(depth - 1, tile_floats);
    for (std::int64_t t = 0, t0 = 0; t < tiles.count; ++t) {
      const std::int64_t mt = tiles.base + (t < tiles.wide ? 1 : 0);
      const auto slot = [&](int d) { return (d == 0 ? c + t0 * ldc : nodes[static_cast<std::size_t>(d - 1)].data()) + first; };
      const auto item = [&](std::int64_t i, int d) { compute(block, first, width, t, t0, mt, i, slot(d), false); };
      const auto merge = [&](int dst, int src) { add_rows(slot(dst), slot(src), mt, width, ldc); };
      if constexpr (AddsItems) {
        leaf_tree_sum(items, item, merge,
                      [&](std::int64_t i, int dst) { compute(block, first, width, t, t0, mt, i, slot(dst), true); });
      } else {
        leaf_tree_sum(items, item, merge);
      }
      t0 += mt;
    }
  });
}

/// gemm_tn_leaf_tree with groups of kGroupLeaves leaves summed in registers (nodes of level
/// kGroupLevels) and the tree over the groups in tiles of c's rows: group_tile's bits do not
/// depend on the tile's height.
void group_leaf_tree(const Blocks& s, std::int64_t m, std::int64_t rows, std::int64_t leaf_rows, MatrixOperand a,
                     MatrixOperand b, float* c, std::int64_t ldc) {
  const std::int64_t group_rows = kGroupLeaves * leaf_rows;
  const std::int64_t groups = (rows + group_rows - 1) / group_rows;
  tree_in_tiles<true>(s, RowTiles::of(m), groups, c, ldc,
                      [&](std::size_t, std::int64_t first, std::int64_t width, std::int64_t, std::int64_t t0,
                          std::int64_t mt, std::int64_t g, float* out, bool add) {
                        const std::int64_t r = g * group_rows;
                        group_tile(b.data + r * b.ld + first, b.ld, a.data + r * a.ld + t0, a.ld, leaf_rows,
                                   std::min(group_rows, rows - r), out, ldc, mt, width, add);
                      });
}

}  // namespace

bool available() {
  static const bool ok = libxsmm_get_target_archid() >= LIBXSMM_X86_AVX2;
  return ok;
}

namespace {

/// gemm()'s product and the per-leaf kernels of its column blocks (kernels[short last leaf][block]).
struct Product {
  std::int64_t m, n, k;
  MatrixOperand a, b;
  float beta;
  float* c;
  std::int64_t ldc;
  const float* bias;
  Leaves leaves;
  Blocks s;
  std::array<libxsmm_smmfunction, kMaxBlocks> kernels[2]{};

  /// Every leaf's kernels, make(height, width) for each block: false where one is missing.
  template <class Make>
  bool make_kernels(const Make& make) {
    return block_kernels(s, kernels[0], [&](std::int64_t width) { return make(leaves.rows, width); }) &&
           (!leaves.short_last() ||
            block_kernels(s, kernels[1], [&](std::int64_t width) { return make(leaves.last, width); }));
  }
  libxsmm_smmfunction kernel_of(std::int64_t leaf, std::size_t block) const {
    return kernels[leaves.is_short(leaf) ? 1 : 0][block];
  }
};

/// c = op(a) b: column-major c^T[n x m] = b^T[n x k] op(a)^T[k x m], nothing copied.
bool gemm_b_as_stored(Product& p) {
  const MatrixOperand& a = p.a;
  const MatrixOperand& b = p.b;
  const Leaves& lv = p.leaves;
  if (p.bias != nullptr || (a.trans ? p.k : lv.rows) > kMaxRows || std::max({lv.rows, p.n, p.k}) > kMaxInner) {
    return false;
  }
  if (!p.make_kernels([&](std::int64_t height, std::int64_t width) {
        return kernel(width, height, p.k, b.ld, a.ld, p.ldc, p.beta, a.trans);
      })) {
    return false;
  }
  for_column_blocks(p.s, [&](std::size_t i, std::int64_t first, std::int64_t) {
    for (std::int64_t l = 0; l < lv.count; ++l) {
      const std::int64_t r = l * lv.rows;
      p.kernel_of(l, i)(b.data + first, a.data + r * a.ld, p.c + r * p.ldc + first);
    }
    zero_upper();
  });
  return true;
}

bool gemm_b_transposed(Product& p) {
  const std::int64_t m = p.m, n = p.n, k = p.k, ldc = p.ldc;
  const MatrixOperand a = p.a, b = p.b;
  const float beta = p.beta;
  float* const c = p.c;
  const float* const bias = p.bias;
  const Leaves& leaves = p.leaves;
  const Blocks& s = p.s;
  // c = a b^T: column-major t[m x n] = at[m x k] (b as stored: column-major [k x n]). The kernel
  // reads a register block of b's rows at once; where their stride is a multiple of 1 KiB they
  // fall into a few L1 sets and evict each other (the MLP's 256 x 512 weight: 66 GFLOP/s at 16
  // rows against oneDNN's 81, which packs b), so those go to oneDNN, except in deterministic
  // training (held_kernel_threads() > 0), which holds oneDNN at one thread: there b's rows are
  // first copied, block by block on the block's thread, to a stride 16 floats longer (n x k
  // floats against the product's 2 m n k flops; 94 GFLOP/s against oneDNN's 106 on one thread
  // for the MLP's 128 x 256 x 512), and the kernels read the copy on the rank's threads. The
  // choice depends on whether training is deterministic, never on the thread count. With leaves
  // (deterministic training's grouped passes) each leaf has its own at and t, laid out as a call
  // with its rows alone lays them out, and b is copied once for all of them.
  if (leaves.rows > kMaxRows || std::max(n, k) > kMaxInner) return false;
  const bool aliasing = b.ld % kAliasingStride == 0;
  if (aliasing && held_kernel_threads() == 0) return false;
  const std::int64_t ldb = aliasing ? b.ld + kVector : b.ld;
  if (!p.make_kernels([&](std::int64_t height, std::int64_t width) {
        return kernel(height, width, k, height, ldb, height, 0.0F, false);
      })) {
    return false;
  }
  float* at_data = scratch(0, m * k);
  float* t_data = scratch(1, m * n);
  float* padded_data = aliasing ? scratch(2, n * ldb) : nullptr;
  // Leaf l's rows of a, row-major [h x k] (h its height), are column-major [k x h] with leading
  // dimension a.ld; its at: column-major [h x k], ld h, at at + r k. Transposed in slabs of a's
  // columns by the block threads before the blocks (every block reads all of it): on one thread
  // this was 26 us of the MLP's 500 us fc1 forward at 1 x 2. A copy: the same bits at any
  // thread count.
  const std::int64_t slabs = std::min<std::int64_t>(s.threads, k);
  const auto transpose_slab = [&](std::int64_t task) {
    const std::int64_t l = task / slabs, slab = task % slabs;
    const std::int64_t r = l * leaves.rows, h = leaves.height(l);
    const std::int64_t p0 = k * slab / slabs, p1 = k * (slab + 1) / slabs;
    libxsmm_otrans(at_data + r * k + p0 * h, a.data + r * a.ld + p0, sizeof(float), static_cast<libxsmm_blasint>(p1 - p0),
                   static_cast<libxsmm_blasint>(h), static_cast<libxsmm_blasint>(a.ld), static_cast<libxsmm_blasint>(h));
  };
  for_column_blocks_after(s, leaves.count * slabs, transpose_slab, [&](std::size_t block, std::int64_t first, std::int64_t count) {
    const float* rows = b.data + first * b.ld;
    if (aliasing) {
      for (std::int64_t j = first; j < first + count; ++j) {
        std::memcpy(padded_data + j * ldb, b.data + j * b.ld, static_cast<std::size_t>(k) * sizeof(float));
      }
      rows = padded_data + first * ldb;
    }
    for (std::int64_t l = 0; l < leaves.count; ++l) {
      const std::int64_t r = l * leaves.rows, h = leaves.height(l);
      float* tl = t_data + r * n;  // leaf l's t: column-major [h x n], ld h
      p.kernel_of(l, block)(at_data + r * k, rows, tl + first * h);
      float* cl = c + r * ldc;
      if (beta != 0.0F) {
        zero_upper();
        for (std::int64_t i = 0; i < h; ++i) {
          float* row = cl + i * ldc;
          const float* column = tl + i;
          for (std::int64_t j = first; j < first + count; ++j) row[j] += column[j * h];
        }
        continue;
      }
      // The block of t (column-major h x count) into c's rows by libxsmm's transpose (a strided
      // gather per element before), then the bias added along each row: one rounding, t + bias,
      // as before.
      libxsmm_otrans(cl + first, tl + first * h, sizeof(float), static_cast<libxsmm_blasint>(h),
                     static_cast<libxsmm_blasint>(count), static_cast<libxsmm_blasint>(h),
                     static_cast<libxsmm_blasint>(ldc));
      zero_upper();
      if (bias != nullptr) {
        for (std::int64_t i = 0; i < h; ++i) {
          float* row = cl + i * ldc;
          for (std::int64_t j = first; j < first + count; ++j) row[j] += bias[j];
        }
      }
    }
  });
  return true;
}

}  // namespace

bool gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatrixOperand a, MatrixOperand b,
          float beta, float* c, std::int64_t ldc, const float* bias, std::int64_t leaf_rows) {
  if (!available() || (beta != 0.0F && beta != 1.0F) || (bias != nullptr && beta != 0.0F)) return false;
  if (b.trans && a.trans) return false;
  const Leaves leaves = Leaves::of(m, leaf_rows);
  if (leaves.count > 1 && a.trans) return false;  // leaves are a's rows
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  // Every leaf runs the kernel a call with its rows alone runs, on the same operands and leading
  // dimensions: the same bits, one parallel region.
  Product p{m, n, k, a, b, beta, c, ldc, bias, leaves, column_blocks(n, flops)};
  return b.trans ? gemm_b_transposed(p) : gemm_b_as_stored(p);
}

bool gemm_tn_leaf_tree(std::int64_t m, std::int64_t n, std::int64_t rows, std::int64_t leaf_rows, MatrixOperand a,
                       MatrixOperand b, float* c, std::int64_t ldc) {
  // Decided on the leaf's shape alone, never on how many leaves this call has, so that a leaf's
  // bits do not depend on the pass it is in (deterministic training at any rank count).
  if (!available() || !a.trans || b.trans || leaf_rows < 1 || rows < 1) return false;
  if (leaf_rows > kMaxRows || std::max({m, n, leaf_rows}) > kMaxInner) return false;
  const std::int64_t leaves = (rows + leaf_rows - 1) / leaf_rows;
  const std::int64_t last_rows = rows - (leaves - 1) * leaf_rows;
  const bool short_leaf = last_rows != leaf_rows;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(rows);
  const Blocks s = column_blocks(n, flops);  // the cut depends on n only, as in gemm()
  const auto kernels_for = [&](std::int64_t height, std::int64_t k, std::array<libxsmm_smmfunction, kMaxBlocks>& out) {
    if (!block_kernels(s, out, [&](std::int64_t w) { return kernel(w, height, k, b.ld, a.ld, ldc, 0.0F, true); })) {
      // A fall-back here would depend on the leaves this call has: refuse instead.
      HPCTRAIN_FAIL("libxsmm generated no kernel for " + std::to_string(height) + " rows of a leaf of " +
                    std::to_string(k) + " rows (gemm_tn_leaf_tree); HPCTRAIN_GEMM_BACKEND=onednn avoids libxsmm");
    }
  };
  // What gemm() runs for each leaf alone: whole[short leaf][block].
  std::array<libxsmm_smmfunction, kMaxBlocks> whole[2]{};
  kernels_for(m, leaf_rows, whole[0]);
  if (short_leaf) kernels_for(m, last_rows, whole[1]);
  if (groups_keep_bits(s, m, n, leaf_rows, a.ld, b.ld, ldc, whole[0]) &&
      (!short_leaf || groups_keep_bits(s, m, n, last_rows, a.ld, b.ld, ldc, whole[1]))) {
    group_leaf_tree(s, m, rows, leaf_rows, a, b, c, ldc);
    return true;
  }
  // Every leaf's product by libxsmm's kernels, in tiles of c's rows so a block's nodes stay in
  // cache, where that keeps every element's bits (libxsmm's code for some widths sums differently
  // at other tile heights; tiles_keep_bits checks once per shape); else whole-height tiles.
  RowTiles tiles = RowTiles::of(m);
  std::array<libxsmm_smmfunction, kMaxBlocks> tiled[2]{};  // [wide tile][block]
  if (tiles.count > 1) {
    kernels_for(tiles.base, leaf_rows, tiled[0]);
    if (tiles.wide > 0) kernels_for(tiles.base + 1, leaf_rows, tiled[1]);
    if (!tiles_keep_bits(s, m, n, leaf_rows, a.ld, b.ld, ldc, tiles.count, whole[0], tiled)) tiles = RowTiles::one(m);
  }
  tree_in_tiles<false>(s, tiles, leaves, c, ldc,
                [&](std::size_t block, std::int64_t first, std::int64_t width, std::int64_t t, std::int64_t t0,
                    std::int64_t mt, std::int64_t l, float* to, bool) {
                  const std::int64_t r = l * leaf_rows;
                  if (!short_leaf || l != leaves - 1) {
                    const libxsmm_smmfunction k = tiles.count == 1 ? whole[0][block] : tiled[t < tiles.wide ? 1 : 0][block];
                    k(b.data + r * b.ld + first, a.data + r * a.ld + t0, to);
                    zero_upper();
                    return;
                  }
                  if (tiles.count == 1) {  // the short leaf as gemm() computes it
                    whole[1][block](b.data + r * b.ld + first, a.data + r * a.ld, to);
                    zero_upper();
                    return;
                  }
                  // With tiles, the short leaf is computed whole once per block (in the first
                  // tile, on the block's thread) and copied tile by tile.
                  std::vector<float>& w = short_leaf_scratch();
                  if (t == 0) {
                    if (w.size() < static_cast<std::size_t>(m * ldc)) w.resize(static_cast<std::size_t>(m * ldc));
                    whole[1][block](b.data + r * b.ld + first, a.data + r * a.ld, w.data() + first);
                    zero_upper();
                  }
                  for (std::int64_t i = 0; i < mt; ++i) {
                    std::memcpy(to + i * ldc, w.data() + (t0 + i) * ldc + first, static_cast<std::size_t>(width) * sizeof(float));
                  }
                });
  return true;
}

}  // namespace hpctrain::core::libxsmm
