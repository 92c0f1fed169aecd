#include "hpctrain/core/elementwise.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/vector_clones.hpp"
#include "hpctrain/core/counter_rng.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/kokkos_compat.hpp"
#include "hpctrain/core/leaf_tree.hpp"
#include "host_parallel.hpp"
#include "leaves_side_by_side.hpp"

#ifdef HPCTRAIN_HAVE_ONEDNN
#include "eltwise_onednn.hpp"
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace hpctrain::core {

namespace {

using Range = Kokkos::RangePolicy<ExecSpace>;

template <class T>
std::int64_t same_size(const Vec<T>& a, const Vec<T>& b, const char* what) {
  HPCTRAIN_REQUIRE(a.extent(0) == b.extent(0),
                   std::string(what) + ": sizes " + std::to_string(a.extent(0)) + " and " +
                       std::to_string(b.extent(0)) + " differ");
  return static_cast<std::int64_t>(a.extent(0));
}

}  // namespace

template <class T>
void add_row_bias(const Matrix<T>& y, const Vec<T>& b) {
  HPCTRAIN_REQUIRE(y.extent(1) == b.extent(0), "add_row_bias: bias size mismatch");
  const auto cols = static_cast<std::int64_t>(y.extent(1));
  const auto n = static_cast<std::int64_t>(y.size());
  const Matrix<T> yy = y;
  const Vec<T> bb = b;
  detail::host_parallel_for(
      "hpctrain::add_row_bias", n, KOKKOS_LAMBDA(const std::int64_t i) { yy(i / cols, i % cols) += bb(i % cols); });
}

namespace {

/// out(o) += sum_i m[o * outer_stride + i * inner_stride] for o < outer, i < inner: row sums
/// (strides cols, 1) or column sums (strides 1, cols) of a row-major matrix.
template <class T>
void accumulate_strided_sums(const char* label, const Matrix<T>& m, std::int64_t outer,
                             std::int64_t inner, std::int64_t outer_stride,
                             std::int64_t inner_stride, const Vec<T>& out) {
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(out.extent(0)) == outer,
                   std::string(label) + ": size mismatch");
  T* const d = m.data();
  Kokkos::parallel_for(
      label, Range(0, outer), KOKKOS_LAMBDA(const std::int64_t o) {
        T s = 0;
        for (std::int64_t i = 0; i < inner; ++i) s += d[o * outer_stride + i * inner_stride];
        out(o) += s;
      });
}

}  // namespace

template <class T>
void accumulate_column_sums(const Matrix<T>& dy, const Vec<T>& db) {
  const auto rows = static_cast<std::int64_t>(dy.extent(0));
  const auto cols = static_cast<std::int64_t>(dy.extent(1));
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(db.extent(0)) == cols,
                   "hpctrain::accumulate_column_sums: size mismatch");
  // Blocks of kWidth columns, rows in order inside a block: each column's sum still adds its
  // rows first to last (the same bits as one column at a time), but the inner loop runs along
  // a row's contiguous columns, so it vectorises instead of striding (the strided form was 3 %
  // of an MLP step in perf; the bias gradients of the dense layers).
  constexpr std::int64_t kWidth = 16;
  // The blocks are independent, so they run on the rank's threads (detail::host_parallel_for)
  // with the same bits at any thread count.
  const T* const d = dy.data();
  detail::host_parallel_for(
      "hpctrain::accumulate_column_sums", (cols + kWidth - 1) / kWidth,
      KOKKOS_LAMBDA(const std::int64_t block) {
        const std::int64_t c0 = block * kWidth;
        const std::int64_t w = cols - c0 < kWidth ? cols - c0 : kWidth;
        T s[kWidth] = {};
        if (w == kWidth) {
          for (std::int64_t i = 0; i < rows; ++i) {
            const T* r = d + i * cols + c0;
            for (std::int64_t j = 0; j < kWidth; ++j) s[j] += r[j];
          }
        } else {
          for (std::int64_t i = 0; i < rows; ++i) {
            const T* r = d + i * cols + c0;
            for (std::int64_t j = 0; j < w; ++j) s[j] += r[j];
          }
        }
        for (std::int64_t j = 0; j < w; ++j) db(c0 + j) += s[j];
      },
      rows * kWidth);
}

template <class T>
void column_sums_leaf_tree(std::int64_t leaf_rows, const Matrix<T>& dy, const Vec<T>& db) {
  const auto rows = static_cast<std::int64_t>(dy.extent(0));
  const auto cols = static_cast<std::int64_t>(dy.extent(1));
  HPCTRAIN_REQUIRE(leaf_rows >= 1 && static_cast<std::int64_t>(db.extent(0)) == cols,
                   "column_sums_leaf_tree: " + std::to_string(leaf_rows) + " rows per leaf, " +
                       std::to_string(db.extent(0)) + " sums for " + std::to_string(cols) + " columns");
  if (rows == 0) {
    set_zero(db);
    return;
  }
  const std::int64_t leaves = (rows + leaf_rows - 1) / leaf_rows;
  if constexpr (detail::host_loops_on_openmp()) {
    // One parallel region: every block of kWidth columns sums its leaves and adds them over the
    // tree in its own registers, each leaf's sum as accumulate_column_sums gives it into zeros
    // (rows first to last, then 0 + s), each merge dst + src as axpy(1, src, dst). Before, each
    // leaf and each merge was a kernel on a whole vector (24 + 21 calls and an allocation per
    // step of the MLP's deterministic grouped pass).
    constexpr std::int64_t kWidth = 16;
    const T* const d = dy.data();
    T* const out = db.data();
    detail::host_parallel_for(
        "hpctrain::column_sums_leaf_tree", (cols + kWidth - 1) / kWidth,
        [&](const std::int64_t block) {
          const std::int64_t c0 = block * kWidth;
          const std::int64_t w = std::min(kWidth, cols - c0);
          T slots[64][kWidth];
          leaf_tree_sum(
              leaves,
              [&](std::int64_t l, int slot) {
                T sum[kWidth] = {};
                const std::int64_t end = std::min(rows, (l + 1) * leaf_rows);
                for (std::int64_t i = l * leaf_rows; i < end; ++i) {
                  const T* r = d + i * cols + c0;
                  for (std::int64_t j = 0; j < w; ++j) sum[j] += r[j];
                }
                for (std::int64_t j = 0; j < w; ++j) slots[slot][j] = T(0) + sum[j];
              },
              [&](int dst, int src) {
                for (std::int64_t j = 0; j < w; ++j) slots[dst][j] += slots[src][j];
              });
          for (std::int64_t j = 0; j < w; ++j) out[c0 + j] = slots[0][j];
        },
        rows * kWidth);
    return;
  }
  set_zero(db);
  const Vec<T> nodes(Kokkos::view_alloc(Kokkos::WithoutInitializing, "hpctrain::column_sums_leaf_tree"),
                     static_cast<std::size_t>((leaf_tree_depth(leaves) - 1) * cols));
  const auto slot = [&](int d) {
    return d == 0 ? db : slice(nodes, (d - 1) * cols, cols);
  };
  leaf_tree_sum(
      leaves,
      [&](std::int64_t l, int d) {
        const std::int64_t first = l * leaf_rows;
        const Vec<T> to = slot(d);
        if (d != 0) set_zero(to);
        accumulate_column_sums(Matrix<T>(dy.data() + first * cols, static_cast<std::size_t>(std::min(leaf_rows, rows - first)),
                                         static_cast<std::size_t>(cols)),
                               to);
      },
      [&](int dst, int src) { axpy(T(1), slot(src), slot(dst)); });
}

template <class T>
void accumulate_row_sums(const Matrix<T>& m, const Vec<T>& db) {
  const auto rows = static_cast<std::int64_t>(m.extent(0));
  const auto cols = static_cast<std::int64_t>(m.extent(1));
  accumulate_strided_sums("hpctrain::accumulate_row_sums", m, rows, cols, cols, 1, db);
}

template <class T>
void relu_forward(const Vec<T>& x, const Vec<T>& y) {
  const std::int64_t n = same_size(x, y, "relu_forward");
  // On the rank's threads (element-wise: the same bits at any count); on one thread this was
  // 1.5 % of an MLP step at 1 rank x 2 threads with the second thread spinning (perf, stop 47).
  detail::host_parallel_for(
      "hpctrain::relu_forward", n,
      KOKKOS_LAMBDA(const std::int64_t i) {
        const T v = x(i);  // loaded unconditionally: the select then vectorises (no branch)
        y(i) = v > T(0) ? v : T(0);
      });
}

template <class T>
void relu_backward(const Vec<T>& y, const Vec<T>& dy, const Vec<T>& dx) {
  const std::int64_t n = same_size(y, dy, "relu_backward");
  same_size(dy, dx, "relu_backward");
  detail::host_parallel_for(
      "hpctrain::relu_backward", n,
      KOKKOS_LAMBDA(const std::int64_t i) {
        const T g = dy(i);  // loaded unconditionally: the select then vectorises (no branch)
        dx(i) = y(i) > T(0) ? g : T(0);
      });
}

namespace {
// sqrt(2 / pi) and the cubic coefficient of the tanh approximation of GELU.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;
}  // namespace

/// Whether float GELU goes to oneDNN's eltwise kernel: when built with oneDNN, the tensors are in
/// host memory and HPCTRAIN_CONV_BACKEND does not ask for the portable kernels (it picks the
/// backend of every kernel oneDNN implements besides gemm: convolutions and this).
template <class T>
bool gelu_on_onednn() {
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float> && Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    return conv_backend() == ConvBackend::onednn;
  }
#endif
  return false;
}

template <class T>
void gelu_forward(const Vec<T>& x, const Vec<T>& y) {
  const std::int64_t n = same_size(x, y, "gelu_forward");
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (gelu_on_onednn<T>()) {
      ExecSpace().fence();
      onednn::gelu_tanh_forward(x.data(), y.data(), n);
      return;
    }
  }
#endif
  Kokkos::parallel_for(
      "hpctrain::gelu_forward", Range(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
        const T v = x(i);
        const T u = T(kGeluScale) * (v + T(kGeluCubic) * v * v * v);
        y(i) = T(0.5) * v * (T(1) + kmath::tanh(u));
      });
}

template <class T>
void gelu_backward(const Vec<T>& x, const Vec<T>& dy, const Vec<T>& dx) {
  const std::int64_t n = same_size(x, dy, "gelu_backward");
  same_size(dy, dx, "gelu_backward");
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (gelu_on_onednn<T>()) {
      ExecSpace().fence();
      onednn::gelu_tanh_backward(x.data(), dy.data(), dx.data(), n);
      return;
    }
  }
#endif
  Kokkos::parallel_for(
      "hpctrain::gelu_backward", Range(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
        const T v = x(i);
        const T u = T(kGeluScale) * (v + T(kGeluCubic) * v * v * v);
        const T t = kmath::tanh(u);
        const T du = T(kGeluScale) * (T(1) + T(3 * kGeluCubic) * v * v);
        dx(i) = dy(i) * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
      });
}

namespace {
/// call(first, count) for each leaf of `leaf` of the `n` elements; on_team(first, count)
/// instead, side by side, where float GELU runs on oneDNN and the held team has several threads.
template <class T, class Call, class OnTeam>
void gelu_leaves(std::int64_t leaf, std::int64_t n, const Call& call, [[maybe_unused]] const OnTeam& on_team) {
  const std::int64_t leaves = leaf_count(n, leaf);
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (const int team = detail::side_by_side_team(leaves, gelu_on_onednn<T>()); team > 1) {
      detail::leaves_on_team(leaves, team, [&](std::int64_t l) { on_team(l * leaf, std::min(leaf, n - l * leaf)); });
      return;
    }
  }
#endif
  for_each_leaf(leaf, n, call);
}
}  // namespace

template <class T>
void gelu_forward_in_leaves(std::int64_t leaf, const Vec<T>& x, const Vec<T>& y) {
  const std::int64_t n = same_size(x, y, "gelu_forward_in_leaves");
  if (leaf <= 0 || leaf >= n) return gelu_forward(x, y);
  [[maybe_unused]] const T* const xp = x.data();
  [[maybe_unused]] T* const yp = y.data();
  gelu_leaves<T>(
      leaf, n, [&](std::int64_t first, std::int64_t count) { gelu_forward(slice(x, first, count), slice(y, first, count)); },
      [&]([[maybe_unused]] std::int64_t first, [[maybe_unused]] std::int64_t count) {
#ifdef HPCTRAIN_HAVE_ONEDNN
        if constexpr (std::is_same_v<T, float>) onednn::gelu_tanh_forward(xp + first, yp + first, count);
#endif
      });
}

template <class T>
void gelu_backward_in_leaves(std::int64_t leaf, const Vec<T>& x, const Vec<T>& dy, const Vec<T>& dx) {
  const std::int64_t n = same_size(x, dy, "gelu_backward_in_leaves");
  same_size(dy, dx, "gelu_backward_in_leaves");
  if (leaf <= 0 || leaf >= n) return gelu_backward(x, dy, dx);
  [[maybe_unused]] const T* const xp = x.data();
  [[maybe_unused]] const T* const dyp = dy.data();
  [[maybe_unused]] T* const dxp = dx.data();
  gelu_leaves<T>(
      leaf, n,
      [&](std::int64_t first, std::int64_t count) {
        gelu_backward(slice(x, first, count), slice(dy, first, count), slice(dx, first, count));
      },
      [&]([[maybe_unused]] std::int64_t first, [[maybe_unused]] std::int64_t count) {
#ifdef HPCTRAIN_HAVE_ONEDNN
        if constexpr (std::is_same_v<T, float>) onednn::gelu_tanh_backward(xp + first, dyp + first, dxp + first, count);
#endif
      });
}

template <class T>
void dropout_apply(const DropoutKey& key, double rate, std::int64_t elements_per_sample,
                   const Vec<T>& in, const Vec<T>& out) {
  const std::int64_t n = same_size(in, out, "dropout_apply");
  HPCTRAIN_REQUIRE(rate >= 0.0 && rate < 1.0, "dropout rate must be in [0, 1)");
  HPCTRAIN_REQUIRE(elements_per_sample > 0 && n % elements_per_sample == 0,
                   "dropout_apply: size is not a multiple of the sample size");
  const std::uint64_t stream = key.stream;
  const std::uint64_t step = key.step;
  const std::int64_t first = key.first_sample;
  const std::int64_t per = elements_per_sample;
  const T keep_scale = T(1.0 / (1.0 - rate));
  detail::host_parallel_for(
      "hpctrain::dropout_apply", n, KOKKOS_LAMBDA(const std::int64_t i) {
        const auto sample = static_cast<std::uint64_t>(first + i / per);
        const auto element = static_cast<std::uint64_t>(i % per);
        const bool keep = uniform01(counter_hash(stream, step, sample, element)) >= rate;
        out(i) = keep ? in(i) * keep_scale : T(0);
      });
}

template <class T>
void add(const Vec<T>& a, const Vec<T>& b, bool relu, const Vec<T>& out) {
  const std::int64_t n = same_size(a, b, "add");
  same_size(a, out, "add");
  // Two kernels, not a flag inside one: a run-time flag in the loop keeps it scalar.
  if (relu) {
    detail::host_parallel_for(
        "hpctrain::add_relu", n, KOKKOS_LAMBDA(const std::int64_t i) {
          const T v = a(i) + b(i);
          out(i) = v > T(0) ? v : T(0);
        });
  } else {
    detail::host_parallel_for(
        "hpctrain::add", n, KOKKOS_LAMBDA(const std::int64_t i) { out(i) = a(i) + b(i); });
  }
}

template <class T>
void axpy(T alpha, const Vec<T>& x, const Vec<T>& y) {
  const std::int64_t n = same_size(x, y, "axpy");
  detail::host_parallel_for(
      "hpctrain::axpy", n, KOKKOS_LAMBDA(const std::int64_t i) { y(i) += alpha * x(i); });
}

namespace {

/// How many of data[first, last) have an all-ones exponent (Inf or NaN), counted in integer
/// lanes. At most 2^32 - 1 elements per call (a lane cannot overflow).
template <class Bits, class T>
HPCTRAIN_ALWAYS_INLINE inline std::int64_t count_all_ones_exponent(const T* data, std::int64_t first, std::int64_t last) {
  constexpr Bits exponent = static_cast<Bits>(sizeof(T) == 4 ? 0x7f800000ull : 0x7ff0000000000000ull);
  Bits count = 0;
  for (std::int64_t i = first; i < last; ++i) {
    Bits b;
    std::memcpy(&b, data + i, sizeof(Bits));
    count += (b & exponent) == exponent ? 1 : 0;
  }
  return static_cast<std::int64_t>(count);
}

// The scan runs over the whole gradient before every optimiser step: AVX-512 and AVX2 clones
// (vector_clones.hpp), 16 lanes a compare instead of the baseline's SSE2 four.
[[maybe_unused]] HPCTRAIN_VECTOR_CLONES std::int64_t count_nonfinite_range(const float* data, std::int64_t first, std::int64_t last) {
  return count_all_ones_exponent<std::uint32_t>(data, first, last);
}
[[maybe_unused]] HPCTRAIN_VECTOR_CLONES std::int64_t count_nonfinite_range(const double* data, std::int64_t first, std::int64_t last) {
  return count_all_ones_exponent<std::uint64_t>(data, first, last);
}

}  // namespace

template <class T>
std::int64_t count_nonfinite(const Vec<T>& v) {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    // On the host, the exponent field of the bit pattern, all ones exactly for Inf and NaN,
    // counted with 32- or 64-bit integer lanes: a loop the compiler vectorises (Kokkos' int64
    // reduce over a float comparison did not, and this pass runs over the whole gradient every
    // step, between backward and the optimiser).
    static_assert(std::is_floating_point_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
    ExecSpace().fence();
    const T* data = v.data();
    // Chunks of 2^14: a lane cannot overflow in one, and the team's shares stay within a chunk
    // of each other.
    return detail::host_parallel_count(static_cast<std::int64_t>(v.extent(0)), std::int64_t{1} << 14,
                                       [=](std::int64_t first, std::int64_t last) {
                                         return count_nonfinite_range(data, first, last);
                                       });
  }
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "hpctrain::count_nonfinite", Range(0, static_cast<std::int64_t>(v.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& sum) { sum += (v(i) - v(i)) == T(0) ? 0 : 1; }, bad);
  return bad;
}

template <class T>
void set_zero(const Vec<T>& v) {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    ExecSpace().fence();
    if (v.extent(0) > 0) std::memset(v.data(), 0, v.extent(0) * sizeof(T));  // all-zero bytes: +0.0
  } else {
    Kokkos::deep_copy(v, T(0));
  }
}

#define HPCTRAIN_INSTANTIATE(T)                                                             \
  template void add_row_bias<T>(const Matrix<T>&, const Vec<T>&);                           \
  template void accumulate_column_sums<T>(const Matrix<T>&, const Vec<T>&);                 \
  template void column_sums_leaf_tree<T>(std::int64_t, const Matrix<T>&, const Vec<T>&);    \
  template void accumulate_row_sums<T>(const Matrix<T>&, const Vec<T>&);                    \
  template void relu_forward<T>(const Vec<T>&, const Vec<T>&);                              \
  template void relu_backward<T>(const Vec<T>&, const Vec<T>&, const Vec<T>&);              \
  template void gelu_forward<T>(const Vec<T>&, const Vec<T>&);                              \
  template void gelu_backward<T>(const Vec<T>&, const Vec<T>&, const Vec<T>&);              \
  template void gelu_forward_in_leaves<T>(std::int64_t, const Vec<T>&, const Vec<T>&);      \
  template void gelu_backward_in_leaves<T>(std::int64_t, const Vec<T>&, const Vec<T>&,      \
                                           const Vec<T>&);                                  \
  template void dropout_apply<T>(const DropoutKey&, double, std::int64_t, const Vec<T>&,    \
                                 const Vec<T>&);                                            \
  template void axpy<T>(T, const Vec<T>&, const Vec<T>&);                                   \
  template void add<T>(const Vec<T>&, const Vec<T>&, bool, const Vec<T>&);                  \
  template void set_zero<T>(const Vec<T>&);                                                 \
  template std::int64_t count_nonfinite<T>(const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
