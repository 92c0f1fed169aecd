#include "hpctrain/core/gemm.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/core/leaf_tree.hpp"
#include "leaves_side_by_side.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// The vendor BLAS behind the blas backend, chosen at configure time (HPCTRAIN_GEMM_VENDOR):
// cuBLAS called directly, or KokkosBlas (Kokkos Kernels -> OpenBLAS, or its cuBLAS TPL).
#ifdef HPCTRAIN_GEMM_CUBLAS
#include "gemm_cublas.hpp"
#else
#include <KokkosBlas3_gemm.hpp>
#endif

#ifdef HPCTRAIN_HAVE_ONEDNN
#ifdef HPCTRAIN_ENABLE_CUDA
#error "oneDNN reads host memory; CMake turns HPCTRAIN_ENABLE_ONEDNN off in CUDA builds"
#endif
#include "gemm_onednn.hpp"
#endif

#ifdef HPCTRAIN_HAVE_LIBXSMM
#include "gemm_libxsmm.hpp"
#endif

namespace hpctrain::core {

bool libxsmm_available() {
#ifdef HPCTRAIN_HAVE_LIBXSMM
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible && libxsmm::available();
#else
  return false;
#endif
}

const char* gemm_backend_name(GemmBackend backend) {
  if (backend == GemmBackend::libxsmm) return "libxsmm";
  if (backend == GemmBackend::onednn) return "onednn";
#ifdef HPCTRAIN_GEMM_CUBLAS
  return "cublas";
#else
  return "blas";
#endif
}

namespace {

GemmBackend gemm_backend_from_environment() {
#ifdef HPCTRAIN_GEMM_CUBLAS
  // The name this build prints for its blas backend is accepted as well as "blas".
  if (const char* env = std::getenv("HPCTRAIN_GEMM_BACKEND"); env != nullptr && std::string(env) == "cublas") {
    return GemmBackend::blas;
  }
#endif
  const char* env = std::getenv("HPCTRAIN_GEMM_BACKEND");
  const std::string v = env == nullptr ? "" : env;
  if (v.empty()) {
    if (libxsmm_available()) return GemmBackend::libxsmm;
    return onednn_available() ? GemmBackend::onednn : GemmBackend::blas;
  }
  if (v == "blas") return GemmBackend::blas;
  if (v == "libxsmm") {
    HPCTRAIN_REQUIRE(libxsmm_available(),
                     "HPCTRAIN_GEMM_BACKEND=libxsmm, but this build has no libxsmm or this CPU no AVX2 "
                     "(configure with -DHPCTRAIN_ENABLE_LIBXSMM=ON and libxsmm installed)");
    return GemmBackend::libxsmm;
  }
  HPCTRAIN_REQUIRE(v == "onednn", "HPCTRAIN_GEMM_BACKEND='" + v +
                                      "': unknown gemm backend (expected libxsmm, onednn or blas)");
  // onednn: the convolutions' parser checks the build and says what to do (true here, or throws)
  return onednn_from_environment("HPCTRAIN_GEMM_BACKEND", "blas", "gemm") ? GemmBackend::onednn : GemmBackend::blas;
}

GemmBackend& selected_gemm_backend() {
  static GemmBackend backend = gemm_backend_from_environment();
  return backend;
}

std::string dims(std::int64_t r, std::int64_t c) {
  return "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
}

/// Whether a float product goes to oneDNN: the onednn backend, or the libxsmm backend for what
/// libxsmm does not take, in a build with oneDNN.
template <class T>
bool use_onednn(T alpha) {
  if constexpr (std::is_same_v<T, float>) {
    return alpha == T(1) && float_products_on_onednn();
  } else {
    return false;
  }
}

/// Whether a float product is offered to libxsmm first.
template <class T>
bool use_libxsmm(T alpha) {
  if constexpr (std::is_same_v<T, float>) {
    return alpha == T(1) && selected_gemm_backend() == GemmBackend::libxsmm;
  } else {
    return false;
  }
}

template <class T>
std::int64_t leading_dimension(const Matrix<T>& x) {
  // LayoutRight: stride(0) is the leading dimension; a 1-column matrix may report stride 1.
  const auto ld = std::max<std::int64_t>(static_cast<std::int64_t>(x.stride(0)),
                                         static_cast<std::int64_t>(x.extent(1)));
  return std::max<std::int64_t>(ld, 1);
}

#if defined(HPCTRAIN_HAVE_ONEDNN) || defined(HPCTRAIN_HAVE_LIBXSMM)
detail::MatrixOperand operand(const Matrix<float>& x, bool trans) {
  return {x.data(), leading_dimension(x), trans};
}
#endif

/// to += from, element by element (same-shape contiguous matrices). A named function: nvcc takes
/// no device lambda inside another lambda.
template <class T>
void add_into(const Matrix<T>& to, const Matrix<T>& from) {
  Kokkos::parallel_for(
      "hpctrain::gemm_tn_leaf_tree_add", Kokkos::RangePolicy<ExecSpace>(0, static_cast<std::int64_t>(to.size())),
      KOKKOS_LAMBDA(const std::int64_t i) { to.data()[i] += from.data()[i]; });
}

/// C = alpha op(A) op(B) + beta C through the build's vendor BLAS; shapes checked, k > 0.
template <class T>
void vendor_gemm(bool ta, bool tb, [[maybe_unused]] std::int64_t m, [[maybe_unused]] std::int64_t n,
                 [[maybe_unused]] std::int64_t k, T alpha, const Matrix<T>& a, const Matrix<T>& b, T beta,
                 const Matrix<T>& c) {
#ifdef HPCTRAIN_GEMM_CUBLAS
  static_assert(Kokkos::SpaceAccessibility<Kokkos::Cuda, MemSpace>::accessible,
                "HPCTRAIN_GEMM_CUBLAS: core's matrices must be CUDA device memory");
  cublas::gemm(m, n, k, alpha, {a.data(), leading_dimension(a), ta}, {b.data(), leading_dimension(b), tb}, beta,
               c.data(), leading_dimension(c));
#else
  KokkosBlas::gemm(ta ? "T" : "N", tb ? "T" : "N", alpha, a, b, beta, c);
#endif
}

/// op(x)'s rows and columns.
template <class T>
std::pair<std::int64_t, std::int64_t> op_dims(const Matrix<T>& x, bool trans) {
  const auto r = static_cast<std::int64_t>(x.extent(0)), c = static_cast<std::int64_t>(x.extent(1));
  return trans ? std::pair{c, r} : std::pair{r, c};
}

/// Throws, naming the shapes, where op(a) op(b) does not give c.
template <class T>
void require_gemm_shapes(bool ta, bool tb, const Matrix<T>& a, const Matrix<T>& b, const Matrix<T>& c) {
  const auto [a_rows, a_cols] = op_dims(a, ta);
  const auto [b_rows, b_cols] = op_dims(b, tb);
  HPCTRAIN_REQUIRE(a_cols == b_rows && static_cast<std::int64_t>(c.extent(0)) == a_rows &&
                       static_cast<std::int64_t>(c.extent(1)) == b_cols,
                   "gemm: op(A) " + dims(a_rows, a_cols) + " x op(B) " + dims(b_rows, b_cols) +
                       " does not give C " +
                       dims(static_cast<std::int64_t>(c.extent(0)), static_cast<std::int64_t>(c.extent(1))));
}

/// Whether linear_forward's operands fit each other with no empty extent (else its gemm() fall-back
/// says what is wrong).
template <class T>
bool linear_shapes_fit(const Matrix<T>& x, const Matrix<T>& w, const Vec<T>& bias, const Matrix<T>& y) {
  return x.extent(0) > 0 && x.extent(1) > 0 && w.extent(0) > 0 && y.extent(0) == x.extent(0) &&
         y.extent(1) == w.extent(0) && w.extent(1) == x.extent(1) && bias.extent(0) == w.extent(0);
}

/// c = op(a) op(b) (+ c where beta is 1) (+ bias on every row) on libxsmm, where the backend and
/// libxsmm take it; leaf_rows > 0: a's and c's rows in leaves (libxsmm::gemm). Shapes already
/// checked and non-empty. False, nothing touched, where libxsmm is not used.
template <class T>
bool on_libxsmm([[maybe_unused]] bool ta, [[maybe_unused]] bool tb, [[maybe_unused]] T alpha,
                [[maybe_unused]] const Matrix<T>& a, [[maybe_unused]] const Matrix<T>& b, [[maybe_unused]] T beta,
                [[maybe_unused]] const Matrix<T>& c, [[maybe_unused]] const T* bias,
                [[maybe_unused]] std::int64_t leaf_rows) {
#ifdef HPCTRAIN_HAVE_LIBXSMM
  if constexpr (std::is_same_v<T, float>) {
    if (use_libxsmm(alpha)) {
      ExecSpace().fence();
      return libxsmm::gemm(op_dims(a, ta).first, op_dims(b, tb).second, op_dims(a, ta).second, operand(a, ta),
                           operand(b, tb), beta, c.data(), leading_dimension(c), bias, leaf_rows);
    }
  }
#endif
  return false;
}

/// The same product on oneDNN, where the backend uses it (float, a build with oneDNN); false
/// otherwise.
template <class T>
bool on_onednn([[maybe_unused]] bool ta, [[maybe_unused]] bool tb, [[maybe_unused]] T alpha,
               [[maybe_unused]] const Matrix<T>& a, [[maybe_unused]] const Matrix<T>& b, [[maybe_unused]] T beta,
               [[maybe_unused]] const Matrix<T>& c, [[maybe_unused]] const T* bias) {
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (use_onednn(alpha)) {
      ExecSpace().fence();
      onednn::gemm(op_dims(a, ta).first, op_dims(b, tb).second, op_dims(a, ta).second, operand(a, ta), operand(b, tb),
                   beta, c.data(), leading_dimension(c), bias);
      return true;
    }
  }
#endif
  return false;
}

}  // namespace

GemmBackend gemm_backend() { return selected_gemm_backend(); }

bool float_products_on_onednn() { return selected_gemm_backend() != GemmBackend::blas && onednn_available(); }

void set_gemm_backend(GemmBackend backend) {
  HPCTRAIN_REQUIRE(backend != GemmBackend::onednn || onednn_available(),
                   "set_gemm_backend(onednn): this build has no oneDNN");
  HPCTRAIN_REQUIRE(backend != GemmBackend::libxsmm || libxsmm_available(),
                   "set_gemm_backend(libxsmm): this build has no libxsmm, or this CPU no AVX2");
  selected_gemm_backend() = backend;
}

template <class T>
void gemm(Trans trans_a, Trans trans_b, T alpha, const Matrix<T>& a, const Matrix<T>& b, T beta,
          const Matrix<T>& c) {
  const bool ta = trans_a == Trans::yes;
  const bool tb = trans_b == Trans::yes;
  require_gemm_shapes(ta, tb, a, b, c);
  const auto [a_rows, a_cols] = op_dims(a, ta);
  const std::int64_t b_cols = op_dims(b, tb).second;
  if (a_rows == 0 || b_cols == 0) return;
  if (a_cols == 0) {  // BLAS would leave C untouched; the product is beta * C
    if (beta == T(0)) {
      Kokkos::deep_copy(c, T(0));
    } else {
      const Matrix<T> cc = c;
      const T bb = beta;
      Kokkos::parallel_for(
          "hpctrain::gemm_scale_c",
          Kokkos::RangePolicy<ExecSpace>(0, static_cast<std::int64_t>(c.size())),
          KOKKOS_LAMBDA(const std::int64_t i) { cc.data()[i] *= bb; });
    }
    return;
  }
  if (on_libxsmm(ta, tb, alpha, a, b, beta, c, static_cast<const T*>(nullptr), 0)) return;
  if (on_onednn(ta, tb, alpha, a, b, beta, c, static_cast<const T*>(nullptr))) return;
  vendor_gemm(ta, tb, a_rows, b_cols, a_cols, alpha, a, b, beta, c);
}

template <class T>
void linear_forward(const Matrix<T>& x, const Matrix<T>& w, const Vec<T>& bias,
                    const Matrix<T>& y) {
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(bias.extent(0)) ==
                       static_cast<std::int64_t>(w.extent(0)),
                   "linear_forward: bias has " + std::to_string(bias.extent(0)) +
                       " elements for " + std::to_string(w.extent(0)) + " outputs");
  if (linear_shapes_fit(x, w, bias, y)) {
    if (on_libxsmm(false, true, T(1), x, w, T(0), y, bias.data(), 0)) return;
    if (on_onednn(false, true, T(1), x, w, T(0), y, bias.data())) return;
  }
  gemm(Trans::no, Trans::yes, T(1), x, w, T(0), y);
  add_row_bias(y, bias);
}

namespace {

/// The calling thread's buffer for gemm_tn_leaf_tree's leaf products side by side, at least
/// `elements` long (grown, never shrunk).
template <class T>
std::vector<T>& leaf_product_scratch(std::size_t elements) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < elements) buffer.resize(elements);
  return buffer;
}

/// Rows [first, first + count) of a contiguous row-major matrix.
template <class T>
Matrix<T> row_range(const Matrix<T>& x, std::int64_t first, std::int64_t count) {
  const auto cols = static_cast<std::int64_t>(x.extent(1));
  return Matrix<T>(x.data() + first * cols, static_cast<std::size_t>(count), static_cast<std::size_t>(cols));
}

/// The threads a float product's leaves run on side by side: where each leaf's call goes to
/// libxsmm or oneDNN (use_onednn: then a leaf's call runs on its thread as a call on that leaf
/// alone does, oneDNN held at one thread); 1 otherwise (the vendor BLAS: one leaf after another).
template <class T>
int leaf_team(T alpha, std::int64_t leaves) {
  return detail::side_by_side_team(leaves, use_onednn(alpha));
}

/// leaf(first, count) for each leaf of `leaf_rows` of `rows` rows: side by side on the rank's
/// held threads where leaf_team() says so, else in order. `leaf` must touch unmanaged views or
/// raw pointers only (Kokkos' reference counts are not made for other threads).
template <class T, class Leaf>
void for_each_leaf_on_team(T alpha, std::int64_t leaf_rows, std::int64_t rows, const Leaf& leaf) {
  const std::int64_t leaves = leaf_count(rows, leaf_rows);
  if (const int team = leaf_team(alpha, leaves); team > 1) {
    detail::leaves_on_team(leaves, team, [&](std::int64_t l) {
      const std::int64_t first = l * leaf_rows;
      leaf(first, std::min(leaf_rows, rows - first));
    });
    return;
  }
  for_each_leaf(leaf_rows, rows, leaf);
}

void require_leaves(const char* what, std::int64_t leaf_rows, std::int64_t a_rows, std::int64_t c_rows) {
  HPCTRAIN_REQUIRE(leaf_rows >= 1, std::string(what) + ": " + std::to_string(leaf_rows) + " rows per leaf");
  HPCTRAIN_REQUIRE(a_rows == c_rows, std::string(what) + ": " + std::to_string(a_rows) + " input rows for " +
                                         std::to_string(c_rows) + " output rows");
}

}  // namespace

template <class T>
void gemm_in_leaves(std::int64_t leaf_rows, Trans trans_b, T alpha, const Matrix<T>& a, const Matrix<T>& b, T beta,
                    const Matrix<T>& c) {
  const auto rows = static_cast<std::int64_t>(a.extent(0));
  require_leaves("gemm_in_leaves", leaf_rows, rows, static_cast<std::int64_t>(c.extent(0)));
  const bool tb = trans_b == Trans::yes;
  require_gemm_shapes(false, tb, a, b, c);
  const bool some_leaves = rows > leaf_rows && a.extent(1) > 0 && c.extent(1) > 0;
  if (some_leaves && on_libxsmm(false, tb, alpha, a, b, beta, c, static_cast<const T*>(nullptr), leaf_rows)) return;
  for_each_leaf_on_team(alpha, leaf_rows, rows, [&](std::int64_t first, std::int64_t count) {
    gemm(Trans::no, trans_b, alpha, row_range(a, first, count), b, beta, row_range(c, first, count));
  });
}

template <class T>
void linear_forward_in_leaves(std::int64_t leaf_rows, const Matrix<T>& x, const Matrix<T>& w, const Vec<T>& bias,
                              const Matrix<T>& y) {
  const auto rows = static_cast<std::int64_t>(x.extent(0));
  require_leaves("linear_forward_in_leaves", leaf_rows, rows, static_cast<std::int64_t>(y.extent(0)));
  if (rows > leaf_rows && linear_shapes_fit(x, w, bias, y) &&
      on_libxsmm(false, true, T(1), x, w, T(0), y, bias.data(), leaf_rows)) {
    return;
  }
  for_each_leaf_on_team(T(1), leaf_rows, rows, [&](std::int64_t first, std::int64_t count) {
    linear_forward(row_range(x, first, count), w, bias, row_range(y, first, count));
  });
}

template <class T>
void gemm_tn_leaf_tree(std::int64_t leaf_rows, const Matrix<T>& a, const Matrix<T>& b, const Matrix<T>& c) {
  const auto rows = static_cast<std::int64_t>(a.extent(0));
  const auto m = static_cast<std::int64_t>(a.extent(1));
  const auto n = static_cast<std::int64_t>(b.extent(1));
  HPCTRAIN_REQUIRE(leaf_rows >= 1, "gemm_tn_leaf_tree: " + std::to_string(leaf_rows) + " rows per leaf");
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(b.extent(0)) == rows && static_cast<std::int64_t>(c.extent(0)) == m &&
                       static_cast<std::int64_t>(c.extent(1)) == n,
                   "gemm_tn_leaf_tree: A^T " + dims(m, rows) + " x B " +
                       dims(static_cast<std::int64_t>(b.extent(0)), n) + " does not give C " +
                       dims(static_cast<std::int64_t>(c.extent(0)), static_cast<std::int64_t>(c.extent(1))));
  if (m == 0 || n == 0) return;
  if (rows == 0) {
    Kokkos::deep_copy(c, T(0));
    return;
  }
#ifdef HPCTRAIN_HAVE_LIBXSMM
  if constexpr (std::is_same_v<T, float>) {
    if (use_libxsmm(T(1))) {
      ExecSpace().fence();
      if (libxsmm::gemm_tn_leaf_tree(m, n, rows, leaf_rows, operand(a, true), operand(b, false), c.data(),
                                     leading_dimension(c))) {
        return;
      }
    }
  }
#endif
  const std::int64_t leaves = (rows + leaf_rows - 1) / leaf_rows;
  const auto leaf_product = [&](std::int64_t l, const Matrix<T>& to) {
    const std::int64_t first = l * leaf_rows;
    const auto r = static_cast<std::size_t>(std::min(leaf_rows, rows - first));
    gemm(Trans::yes, Trans::no, T(1), Matrix<T>(a.data() + first * m, r, static_cast<std::size_t>(m)),
         Matrix<T>(b.data() + first * n, r, static_cast<std::size_t>(n)), T(0), to);
  };
  if (const int team = leaf_team(T(1), leaves); team > 1) {
    // Side by side: every leaf's product in a matrix of its own (leaf 0's in c), then the tree's
    // additions over them in place -- the additions leaf_tree_sum below makes, in its order.
    std::vector<T>& nodes = leaf_product_scratch<T>(static_cast<std::size_t>((leaves - 1) * m * n));
    T* const c_data = c.data();
    T* const node_data = nodes.data();
    const auto node = [&](std::int64_t l) { return l == 0 ? c_data : node_data + (l - 1) * m * n; };
    detail::leaves_on_team(leaves, team, [&](std::int64_t l) {
      leaf_product(l, Matrix<T>(node(l), static_cast<std::size_t>(m), static_cast<std::size_t>(n)));
    });
    leaf_tree_add_in_place(leaves, [&](std::int64_t i, std::int64_t j) {
      T* const to = node(i);
      const T* const from = node(j);
      for (std::int64_t e = 0; e < m * n; ++e) to[e] += from[e];
    });
    return;
  }
  // Each leaf's product in a whole matrix (the first in c), added over the tree.
  const Vec<T> nodes(Kokkos::view_alloc(Kokkos::WithoutInitializing, "hpctrain::gemm_tn_leaf_tree"),
                     static_cast<std::size_t>((leaf_tree_depth(leaves) - 1) * m * n));
  const auto slot = [&](int d) { return d == 0 ? c : Matrix<T>(nodes.data() + (d - 1) * m * n, m, n); };
  leaf_tree_sum(
      leaves,
      [&](std::int64_t l, int d) { leaf_product(l, slot(d)); },
      [&](int dst, int src) { add_into(slot(dst), slot(src)); });
}

template void gemm<float>(Trans, Trans, float, const Matrix<float>&, const Matrix<float>&, float,
                          const Matrix<float>&);
template void gemm<double>(Trans, Trans, double, const Matrix<double>&, const Matrix<double>&,
                           double, const Matrix<double>&);
template void gemm_tn_leaf_tree<float>(std::int64_t, const Matrix<float>&, const Matrix<float>&,
                                       const Matrix<float>&);
template void gemm_tn_leaf_tree<double>(std::int64_t, const Matrix<double>&, const Matrix<double>&,
                                        const Matrix<double>&);
template void gemm_in_leaves<float>(std::int64_t, Trans, float, const Matrix<float>&, const Matrix<float>&, float,
                                    const Matrix<float>&);
template void gemm_in_leaves<double>(std::int64_t, Trans, double, const Matrix<double>&, const Matrix<double>&, double,
                                     const Matrix<double>&);
template void linear_forward_in_leaves<float>(std::int64_t, const Matrix<float>&, const Matrix<float>&,
                                              const Vec<float>&, const Matrix<float>&);
template void linear_forward_in_leaves<double>(std::int64_t, const Matrix<double>&, const Matrix<double>&,
                                               const Vec<double>&, const Matrix<double>&);
template void linear_forward<float>(const Matrix<float>&, const Matrix<float>&, const Vec<float>&,
                                    const Matrix<float>&);
template void linear_forward<double>(const Matrix<double>&, const Matrix<double>&,
                                     const Vec<double>&, const Matrix<double>&);

}  // namespace hpctrain::core
