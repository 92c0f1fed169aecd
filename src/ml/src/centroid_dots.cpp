// Float dots of sample rows with k-means centroids (centroid_dots_f32, kmeans.hpp).
//
// Why not the compute core's gemm: k-means' products are (rows x d) times (d x K) with K ~ 10,
// a shape where oneDNN and OpenBLAS spend more time packing and on edge tiles than in their
// kernels (Fashion-MNIST, K = 10: ~21 ms per Lloyd iteration at np 2, most of it there).
//
// Schedule: two rows at a time against a tile of five centroids, a row's dot with a centroid in
// 16 float lanes (lane l takes the features j = l mod 16, a product then a sum: no fused
// multiply-add, so every clone rounds alike), the 2 x 5 accumulators held in registers while the
// features stream by; then the tile's lanes are added by one fixed tree (lane_sums). A dot's bits
// are therefore a function of its row and centroid alone (not of the rows or centroids beside
// it, nor of the ISA clone), so any grouping of rows into calls gives the same dots.
// Cost per row: K d multiplies and adds (γ), the row read K / 5 times from L1, each centroid
// tile once per two rows (the centroids, K d floats, stay in L1/L2).
#include <cstring>
#include <utility>

#include "hpctrain/base/vector_clones.hpp"
#include "hpctrain/ml/kmeans.hpp"

// The 64-byte vectors below live only inside always-inline helpers of the cloned kernel: no
// vector crosses a call, so GCC's note that their ABI differs without AVX-512 does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace hpctrain::ml {

namespace {

constexpr std::int64_t kLanes = 16;
constexpr int kTileRows = 2;       // 2 x 5 accumulators + 2 row chunks + 1 centroid chunk: 13 of
constexpr int kTileCentroids = 5;  // AVX-512's 32 registers (AVX2 splits each in two)
using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));

inline HPCTRAIN_ALWAYS_INLINE Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// The first n < kLanes values at p, the other lanes 0.
inline HPCTRAIN_ALWAYS_INLINE Lanes load_tail(const float* p, std::int64_t n) {
  Lanes v = {};
  std::memcpy(&v, p, static_cast<std::size_t>(n) * sizeof(float));
  return v;
}

/// Lane i of fold<Width>'s lo (hi: plus Width): the lanes of a ++ b in groups of Width, group g
/// of the result taking group 2g (lo) and 2g + 1 (hi).
constexpr int fold_index(int width, int i) { return 2 * width * (i / width) + i % width; }

/// Lanes fold_index(Width, i) + Offset of a ++ b for i = 0..15 (__builtin_shufflevector: GCC >= 12
/// and clang alike).
template <int Width, int Offset, int... I>
inline HPCTRAIN_ALWAYS_INLINE Lanes pick(Lanes a, Lanes b, std::integer_sequence<int, I...> /*lanes*/) {
  return __builtin_shufflevector(a, b, (fold_index(Width, I) + Offset)...);
}

/// lo + hi of the concatenation a ++ b (fold_index): with Width 8 the result holds a's
/// s8[i] = v[i] + v[i + 8] in lanes 0..7 and b's in lanes 8..15.
template <int Width>
inline HPCTRAIN_ALWAYS_INLINE Lanes fold(Lanes a, Lanes b) {
  constexpr auto lanes = std::make_integer_sequence<int, kLanes>{};
  return pick<Width, 0>(a, b, lanes) + pick<Width, Width>(a, b, lanes);
}

/// out[m] = the lane sum of v[m] for m < 16, each by the tree s8[i] = v[i] + v[i+8],
/// s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2], s2[0] + s2[1]: four rounds of fold, which
/// reduce 16 vectors at once.
inline HPCTRAIN_ALWAYS_INLINE void lane_sums(const Lanes (&v)[kLanes], float* out) {
  Lanes a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) a[i] = fold<8>(v[2 * i], v[2 * i + 1]);
  for (int i = 0; i < 4; ++i) b[i] = fold<4>(a[2 * i], a[2 * i + 1]);
  for (int i = 0; i < 2; ++i) c[i] = fold<2>(b[2 * i], b[2 * i + 1]);
  const Lanes sums = fold<1>(c[0], c[1]);
  std::memcpy(out, &sums, sizeof sums);
}

/// Adds to acc[r * T + t] the products of the n <= kLanes features from j of the R rows x
/// (stride d) and T centroids c (stride d), lane l taking feature j + l.
template <int R, int T>
inline HPCTRAIN_ALWAYS_INLINE void accumulate(Lanes (&acc)[kLanes], const float* x, std::int64_t d, const float* c,
                                              std::int64_t j, std::int64_t n) {
  Lanes xv[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) xv[r] = n == kLanes ? load(x + r * d + j) : load_tail(x + r * d + j, n);
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const Lanes cv = n == kLanes ? load(c + t * d + j) : load_tail(c + t * d + j, n);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r * T + t] += xv[r] * cv;
  }
}

/// dots[r * k + t] = x_r . c_t for R rows x (stride d) and T centroids c (stride d).
template <int R, int T>
inline HPCTRAIN_ALWAYS_INLINE void dot_tile(const float* x, std::int64_t d, const float* c, std::int64_t k,
                                            float* dots) {
  static_assert(R * T <= kLanes, "lane_sums reduces at most 16 accumulators");
  Lanes acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes) accumulate<R, T>(acc, x, d, c, j, kLanes);
  if (j < d) accumulate<R, T>(acc, x, d, c, j, d - j);
  float sums[kLanes];
  lane_sums(acc, sums);
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) dots[r * k + t] = sums[r * T + t];
  }
}

/// R rows against all k centroids, kTileCentroids at a time.
template <int R>
inline HPCTRAIN_ALWAYS_INLINE void dot_rows(const float* x, std::int64_t d, const float* c, std::int64_t k,
                                            float* dots) {
  std::int64_t t = 0;
  for (; t + kTileCentroids <= k; t += kTileCentroids) dot_tile<R, kTileCentroids>(x, d, c + t * d, k, dots + t);
  static_assert(kTileCentroids == 5, "the switch below handles the 1..4 left");
  switch (k - t) {
    case 1: dot_tile<R, 1>(x, d, c + t * d, k, dots + t); break;
    case 2: dot_tile<R, 2>(x, d, c + t * d, k, dots + t); break;
    case 3: dot_tile<R, 3>(x, d, c + t * d, k, dots + t); break;
    case 4: dot_tile<R, 4>(x, d, c + t * d, k, dots + t); break;
    default: break;
  }
}

}  // namespace

HPCTRAIN_VECTOR_CLONES
void centroid_dots_f32(const float* x, std::int64_t rows, std::int64_t d, const float* centroids, std::int64_t k,
                       float* dots) noexcept {
  static_assert(kTileRows == 2, "one odd row left at most");
  std::int64_t i = 0;
  for (; i + kTileRows <= rows; i += kTileRows) dot_rows<kTileRows>(x + i * d, d, centroids, k, dots + i * k);
  if (i < rows) dot_rows<1>(x + i * d, d, centroids, k, dots + i * k);
}

}  // namespace hpctrain::ml
