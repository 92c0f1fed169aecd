#include "hpctrain/core/conv.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/core/leaf_tree.hpp"
#include "leaves_side_by_side.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <type_traits>

#ifdef HPCTRAIN_HAVE_ONEDNN
#include "conv_onednn.hpp"
#endif

namespace hpctrain::core {

bool onednn_available() {
#ifdef HPCTRAIN_HAVE_ONEDNN
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
#else
  return false;
#endif
}

bool onednn_from_environment(const char* variable, const char* other, const char* what) {
  const char* env = std::getenv(variable);
  if (env == nullptr || *env == '\0') return onednn_available();
  const std::string v(env);
  if (v == other) return false;
  HPCTRAIN_REQUIRE(v == "onednn", std::string(variable) + "='" + v + "': unknown " + what + " backend (expected onednn or " +
                                      other + ")");
  HPCTRAIN_REQUIRE(onednn_available(), std::string(variable) +
                                           "=onednn, but this build has no oneDNN "
                                           "(configure with -DHPCTRAIN_ENABLE_ONEDNN=ON and oneDNN installed)");
  return true;
}

const char* conv_backend_name(ConvBackend backend) {
  return backend == ConvBackend::onednn ? "onednn" : "portable";
}

namespace {

ConvBackend backend_from_environment() {
  return onednn_from_environment("HPCTRAIN_CONV_BACKEND", "portable", "convolution") ? ConvBackend::onednn
                                                                                     : ConvBackend::portable;
}

ConvBackend& selected_backend() {
  static ConvBackend backend = backend_from_environment();
  return backend;
}

}  // namespace

ConvBackend conv_backend() { return selected_backend(); }

void set_conv_backend(ConvBackend backend) {
  HPCTRAIN_REQUIRE(backend == ConvBackend::portable || onednn_available(),
                   "set_conv_backend(onednn): this build has no oneDNN");
  selected_backend() = backend;
}

namespace {

using Range = Kokkos::RangePolicy<ExecSpace>;

template <class V>
void require_size(const V& v, std::int64_t n, const char* what) {
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(v.extent(0)) == n,
                   std::string(what) + " has " + std::to_string(v.extent(0)) +
                       " elements, expected " + std::to_string(n));
}

template <class T>
void grow(Vec<T>& v, const char* label, std::int64_t n) {
  if (static_cast<std::int64_t>(v.extent(0)) < n) v = Vec<T>(std::string(label), static_cast<std::size_t>(n));
}

}  // namespace

void Conv2dGeometry::validate() const {
  HPCTRAIN_REQUIRE(batch >= 0 && in_channels > 0 && height > 0 && width > 0 &&
                       out_channels > 0 && kernel > 0 && stride > 0 && pad >= 0,
                   "conv2d: extents must be positive");
  HPCTRAIN_REQUIRE(height + 2 * pad >= kernel && width + 2 * pad >= kernel,
                   "conv2d: kernel " + std::to_string(kernel) + " larger than padded input " +
                       std::to_string(height + 2 * pad) + "x" + std::to_string(width + 2 * pad));
}

void Pool2dGeometry::validate() const {
  HPCTRAIN_REQUIRE(batch >= 0 && channels > 0 && height > 0 && width > 0 && kernel > 0 &&
                       stride > 0,
                   "maxpool2d: extents must be positive");
  HPCTRAIN_REQUIRE(height >= kernel && width >= kernel,
                   "maxpool2d: window " + std::to_string(kernel) + " larger than input " +
                       std::to_string(height) + "x" + std::to_string(width));
}

namespace {

/// The output columns [lo, hi) of a kernel tap at offset `tap` (kh or kw) whose input index
/// `o * S - P + tap` lies in [0, extent): the valid range, so the inner loops need no division.
KOKKOS_INLINE_FUNCTION void valid_outputs(std::int64_t tap, std::int64_t S, std::int64_t P,
                                          std::int64_t extent, std::int64_t out_extent,
                                          std::int64_t& lo, std::int64_t& hi) {
  // o * S >= P - tap  and  o * S <= extent - 1 + P - tap
  const std::int64_t first = P - tap;
  lo = first <= 0 ? 0 : (first + S - 1) / S;
  const std::int64_t last = extent - 1 + P - tap;
  hi = last < 0 ? 0 : last / S + 1;
  if (hi > out_extent) hi = out_extent;
  if (lo > hi) lo = hi;
}

}  // namespace

// im2col: col[r][q], r = (c, kh, kw), q = (n, oh, ow). One work item per (r, n, oh): a
// contiguous run of Wo columns, the divisions done once per run rather than per element
// (per-element index arithmetic cost more than the gemm it feeds).
template <class T>
void im2col(const Conv2dGeometry& g, const Vec<T>& x, const Vec<T>& col) {
  const std::int64_t C = g.in_channels, H = g.height, W = g.width, K = g.kernel;
  const std::int64_t S = g.stride, P = g.pad, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t N = g.batch, NP = g.col_cols();
  require_size(x, g.batch * C * H * W, "im2col input");
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(col.extent(0)) >= g.col_rows() * NP,
                   "im2col: column buffer too small");
  Kokkos::parallel_for(
      "hpctrain::im2col", Range(0, g.col_rows() * N * Ho), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t oh = i % Ho, n = (i / Ho) % N, r = i / (Ho * N);
        const std::int64_t c = r / (K * K), kh = (r / K) % K, kw = r % K;
        const std::int64_t h = oh * S - P + kh;
        const std::int64_t out = r * NP + (n * Ho + oh) * Wo;
        if (h < 0 || h >= H) {
          for (std::int64_t ow = 0; ow < Wo; ++ow) col(out + ow) = T(0);
          return;
        }
        std::int64_t lo = 0, hi = 0;
        valid_outputs(kw, S, P, W, Wo, lo, hi);
        const std::int64_t in = ((n * C + c) * H + h) * W - P + kw;  // + ow * S
        for (std::int64_t ow = 0; ow < lo; ++ow) col(out + ow) = T(0);
        if (S == 1) {  // contiguous: vectorises
          for (std::int64_t ow = lo; ow < hi; ++ow) col(out + ow) = x(in + ow);
        } else {
          for (std::int64_t ow = lo; ow < hi; ++ow) col(out + ow) = x(in + ow * S);
        }
        for (std::int64_t ow = hi; ow < Wo; ++ow) col(out + ow) = T(0);
      });
}

// col2im: dx[n][c][h][w] = sum over the (kh, kw, oh, ow) with oh * S - P + kh = h and
// ow * S - P + kw = w of dcol[(c, kh, kw)][(n, oh, ow)]. One work item per input row (n, c, h):
// it alone writes that row, so the scatter over w needs no atomics.
template <class T>
void col2im(const Conv2dGeometry& g, const Vec<T>& dcol, const Vec<T>& dx) {
  const std::int64_t C = g.in_channels, H = g.height, W = g.width, K = g.kernel;
  const std::int64_t S = g.stride, P = g.pad, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t NP = g.col_cols();
  require_size(dx, g.batch * C * H * W, "col2im output");
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(dcol.extent(0)) >= g.col_rows() * NP,
                   "col2im: column buffer too small");
  Kokkos::parallel_for(
      "hpctrain::col2im", Range(0, g.batch * C * H), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t h = i % H, c = (i / H) % C, n = i / (C * H);
        const std::int64_t row = i * W;
        for (std::int64_t w = 0; w < W; ++w) dx(row + w) = T(0);
        for (std::int64_t kh = 0; kh < K; ++kh) {
          const std::int64_t hs = h + P - kh;  // = oh * S when (h, kh) feeds output row oh
          if (hs < 0 || hs % S != 0 || hs / S >= Ho) continue;
          const std::int64_t oh = hs / S;
          for (std::int64_t kw = 0; kw < K; ++kw) {
            std::int64_t lo = 0, hi = 0;
            valid_outputs(kw, S, P, W, Wo, lo, hi);
            const std::int64_t src = ((c * K + kh) * K + kw) * NP + (n * Ho + oh) * Wo;
            const std::int64_t dst = row - P + kw;  // + ow * S
            if (S == 1) {  // contiguous: vectorises
              for (std::int64_t ow = lo; ow < hi; ++ow) dx(dst + ow) += dcol(src + ow);
            } else {
              for (std::int64_t ow = lo; ow < hi; ++ow) dx(dst + ow * S) += dcol(src + ow);
            }
          }
        }
      });
}

template <class T>
void Conv2dWorkspace<T>::reserve(const Conv2dGeometry& g) {
  const std::int64_t cols = g.col_cols();
  grow(col, "hpctrain::conv2d::col", g.col_rows() * cols);
  grow(yt, "hpctrain::conv2d::yt", g.out_channels * cols);
  grow(dcol, "hpctrain::conv2d::dcol", g.col_rows() * cols);
}

template <class T>
void conv2d_forward(const Conv2dGeometry& g, const Vec<T>& x, const Vec<T>& w, const Vec<T>& b,
                    Conv2dWorkspace<T>& ws, const Vec<T>& y) {
  g.validate();
  const std::int64_t F = g.out_channels, HW = g.out_height() * g.out_width();
  const std::int64_t NP = g.col_cols();
  require_size(w, F * g.col_rows(), "conv2d weight");
  require_size(b, F, "conv2d bias");
  require_size(y, g.batch * F * HW, "conv2d output");
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (conv_backend() == ConvBackend::onednn && g.batch > 0) {
      ExecSpace().fence();
      onednn::conv2d_forward(g, x.data(), w.data(), b.data(), ws.onednn, y.data());
      ws.forward_backend = ConvBackend::onednn;
      return;
    }
  }
#endif
  ws.forward_backend = ConvBackend::portable;
  ws.reserve(g);
  im2col(g, x, ws.col);
  gemm(Trans::no, Trans::no, T(1), as_matrix(w, F, g.col_rows()),
       as_matrix(ws.col, g.col_rows(), NP), T(0), as_matrix(ws.yt, F, NP));
  const Vec<T> yt = ws.yt;
  Kokkos::parallel_for(  // one (n, f) plane per work item: no per-element division
      "hpctrain::conv2d_bias_to_nchw", Range(0, g.batch * F), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t f = i % F, n = i / F;
        const std::int64_t src = f * NP + n * HW, dst = i * HW;
        const T bias = b(f);
        for (std::int64_t p = 0; p < HW; ++p) y(dst + p) = yt(src + p) + bias;
      });
}

template <class T>
void conv2d_backward(const Conv2dGeometry& g, const Vec<T>& w, const Vec<T>& dy,
                     Conv2dWorkspace<T>& ws, const Vec<T>& dw, const Vec<T>& db,
                     const Vec<T>& dx) {
  g.validate();
  const std::int64_t F = g.out_channels, HW = g.out_height() * g.out_width();
  const std::int64_t NP = g.col_cols(), CKK = g.col_rows();
  require_size(dy, g.batch * F * HW, "conv2d output gradient");
  require_size(dw, F * CKK, "conv2d weight gradient");
  require_size(db, F, "conv2d bias gradient");
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (ws.forward_backend == ConvBackend::onednn) {
      if (dx.extent(0) != 0) require_size(dx, g.batch * g.in_channels * g.height * g.width, "conv2d input gradient");
      ExecSpace().fence();
      onednn::conv2d_backward(g, w.data(), dy.data(), *ws.onednn, dw.data(), db.data(),
                              dx.extent(0) != 0 ? dx.data() : nullptr);
      return;
    }
  }
#endif
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(ws.col.extent(0)) >= CKK * NP,
                   "conv2d_backward before conv2d_forward");
  const Vec<T> dyt = ws.yt;  // the forward's yt is dead once y is written
  Kokkos::parallel_for(  // one (n, f) plane per work item
      "hpctrain::conv2d_nchw_to_rows", Range(0, g.batch * F), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t f = i % F, n = i / F;
        const std::int64_t dst = f * NP + n * HW, src = i * HW;
        for (std::int64_t p = 0; p < HW; ++p) dyt(dst + p) = dy(src + p);
      });
  const Matrix<T> dyt_m = as_matrix(dyt, F, NP);
  gemm(Trans::no, Trans::yes, T(1), dyt_m, as_matrix(ws.col, CKK, NP), T(1),
       as_matrix(dw, F, CKK));
  accumulate_row_sums(dyt_m, db);
  if (dx.extent(0) == 0) return;
  gemm(Trans::yes, Trans::no, T(1), as_matrix(w, F, CKK), dyt_m, T(0),
       as_matrix(ws.dcol, CKK, NP));
  col2im(g, ws.dcol, dx);
}

namespace {

/// Leaf l's geometry: g with the leaf's rows.
Conv2dGeometry leaf_geometry(const Conv2dGeometry& g, std::int64_t leaf_rows, std::int64_t l) {
  Conv2dGeometry leaf = g;
  leaf.batch = std::min(leaf_rows, g.batch - l * leaf_rows);
  return leaf;
}

/// The threads the leaves run on side by side on the oneDNN path; 1 (one after another) otherwise.
template <class T>
int leaf_team(std::int64_t leaves) {
  return detail::side_by_side_team(leaves, std::is_same_v<T, float> && conv_backend() == ConvBackend::onednn);
}

using detail::leaves_on_team;

/// The oneDNN calls of conv2d_forward_in_leaves / conv2d_backward_in_leaves on `team` threads
/// (float, builds with oneDNN: where leaf_team() > 1).
struct OnednnLeaves {
  const Conv2dGeometry& g;
  std::int64_t leaf_rows, leaves, in_row, out_row;
  int team;

  template <class T>
  void forward(const T* x, const T* w, const T* b, Conv2dLeaves<T>& ws, T* y) const {
#ifdef HPCTRAIN_HAVE_ONEDNN
    if constexpr (std::is_same_v<T, float>) {
      leaves_on_team(leaves, team, [&](std::int64_t l) {
        Conv2dWorkspace<T>& leaf = ws.leaf[static_cast<std::size_t>(l)];
        onednn::conv2d_forward(leaf_geometry(g, leaf_rows, l), x + l * leaf_rows * in_row, w, b, leaf.onednn,
                               y + l * leaf_rows * out_row);
        leaf.forward_backend = ConvBackend::onednn;
      });
      return;
    }
#endif
    HPCTRAIN_FAIL("conv2d in leaves: side by side only on oneDNN (float)");
  }

  /// Leaf l's weight gradient into grads + l * per_leaf, its bias gradient after it.
  template <class T>
  void backward(const T* w, const T* dy, Conv2dLeaves<T>& ws, T* grads, std::int64_t per_leaf, T* dx) const {
#ifdef HPCTRAIN_HAVE_ONEDNN
    if constexpr (std::is_same_v<T, float>) {
      const std::int64_t nw = per_leaf - g.out_channels;
      leaves_on_team(leaves, team, [&](std::int64_t l) {
        Conv2dWorkspace<T>& leaf = ws.leaf[static_cast<std::size_t>(l)];
        HPCTRAIN_REQUIRE(leaf.forward_backend == ConvBackend::onednn && leaf.onednn,
                         "conv2d_backward_in_leaves: leaf " + std::to_string(l) + " had no oneDNN forward");
        T* const gl = grads + l * per_leaf;
        onednn::conv2d_backward(leaf_geometry(g, leaf_rows, l), w, dy + l * leaf_rows * out_row, *leaf.onednn, gl,
                                gl + nw, dx != nullptr ? dx + l * leaf_rows * in_row : nullptr);
      });
      return;
    }
#endif
    HPCTRAIN_FAIL("conv2d in leaves: side by side only on oneDNN (float)");
  }
};

}  // namespace

template <class T>
void conv2d_forward_in_leaves(std::int64_t leaf_rows, const Conv2dGeometry& g, const Vec<T>& x, const Vec<T>& w,
                              const Vec<T>& b, Conv2dLeaves<T>& ws, const Vec<T>& y) {
  g.validate();
  HPCTRAIN_REQUIRE(leaf_rows > 0, "conv2d in leaves: " + std::to_string(leaf_rows) + " rows per leaf");
  const std::int64_t leaves = leaf_count(g.batch, leaf_rows);
  const std::int64_t in_row = g.in_channels * g.height * g.width;
  const std::int64_t out_row = g.out_channels * g.out_height() * g.out_width();
  require_size(x, g.batch * in_row, "conv2d input");
  require_size(y, g.batch * out_row, "conv2d output");
  require_size(w, g.out_channels * g.col_rows(), "conv2d weight");
  require_size(b, g.out_channels, "conv2d bias");
  if (static_cast<std::int64_t>(ws.leaf.size()) < leaves) ws.leaf.resize(static_cast<std::size_t>(leaves));
  if (const int team = leaf_team<T>(leaves); team > 1) {
    OnednnLeaves{g, leaf_rows, leaves, in_row, out_row, team}.forward(x.data(), w.data(), b.data(), ws, y.data());
    return;
  }
  for_each_leaf(leaf_rows, g.batch, [&](std::int64_t first, std::int64_t rows) {
    const Conv2dGeometry lg = leaf_geometry(g, leaf_rows, first / leaf_rows);
    conv2d_forward(lg, slice(x, first * in_row, rows * in_row), w, b, ws.leaf[static_cast<std::size_t>(first / leaf_rows)],
                   slice(y, first * out_row, rows * out_row));
  });
}

template <class T>
void conv2d_backward_in_leaves(std::int64_t leaf_rows, const Conv2dGeometry& g, const Vec<T>& w, const Vec<T>& dy,
                               Conv2dLeaves<T>& ws, const Vec<T>& dw, const Vec<T>& db, const Vec<T>& dx) {
  g.validate();
  HPCTRAIN_REQUIRE(leaf_rows > 0, "conv2d in leaves: " + std::to_string(leaf_rows) + " rows per leaf");
  const std::int64_t leaves = leaf_count(g.batch, leaf_rows);
  const std::int64_t in_row = g.in_channels * g.height * g.width;
  const std::int64_t out_row = g.out_channels * g.out_height() * g.out_width();
  const std::int64_t nw = g.out_channels * g.col_rows(), per_leaf = nw + g.out_channels;
  require_size(dy, g.batch * out_row, "conv2d output gradient");
  require_size(dw, nw, "conv2d weight gradient");
  require_size(db, g.out_channels, "conv2d bias gradient");
  const bool input_grad = dx.extent(0) != 0;
  if (input_grad) require_size(dx, g.batch * in_row, "conv2d input gradient");
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(ws.leaf.size()) >= leaves,
                   "conv2d_backward_in_leaves before conv2d_forward_in_leaves");
  grow(ws.grads, "hpctrain::conv2d::leaf_grads", leaves * per_leaf);
  const auto leaf_grads = [&](std::int64_t l) { return slice(ws.grads, l * per_leaf, per_leaf); };
  set_zero(slice(ws.grads, 0, leaves * per_leaf));  // each leaf's gradient is added into zeros
  if (const int team = leaf_team<T>(leaves); team > 1) {
    OnednnLeaves{g, leaf_rows, leaves, in_row, out_row, team}.backward(w.data(), dy.data(), ws, ws.grads.data(),
                                                                        per_leaf, input_grad ? dx.data() : nullptr);
  } else {
    for_each_leaf(leaf_rows, g.batch, [&](std::int64_t first, std::int64_t rows) {
      const std::int64_t l = first / leaf_rows;
      const Vec<T> grads = leaf_grads(l);
      conv2d_backward(leaf_geometry(g, leaf_rows, l), w, slice(dy, first * out_row, rows * out_row),
                      ws.leaf[static_cast<std::size_t>(l)], slice(grads, 0, nw), slice(grads, nw, g.out_channels),
                      input_grad ? slice(dx, first * in_row, rows * in_row) : Vec<T>());
    });
  }
  // The leaves' gradients over the tree, in their own buffers.
  leaf_tree_add_in_place(leaves, [&](std::int64_t i, std::int64_t j) {
    const Vec<T> d = leaf_grads(i);
    add(d, leaf_grads(j), false, d);
  });
  const Vec<T> sum = leaf_grads(0);
  add(dw, slice(sum, 0, nw), false, dw);
  add(db, slice(sum, nw, g.out_channels), false, db);
}

template <class T>
void maxpool2d_forward(const Pool2dGeometry& g, const Vec<T>& x, const Vec<T>& y,
                       const Kokkos::View<std::int64_t*, MemSpace>& argmax) {
  g.validate();
  const std::int64_t H = g.height, W = g.width, K = g.kernel, S = g.stride;
  const std::int64_t Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t n_out = g.batch * g.channels * Ho * Wo;
  require_size(x, g.batch * g.channels * H * W, "maxpool2d input");
  require_size(y, n_out, "maxpool2d output");
  require_size(argmax, n_out, "maxpool2d argmax");
  if (K == 2 && S == 2) {  // the CNN's pooling: four loads, no inner loops, vectorisable
    Kokkos::parallel_for(
        "hpctrain::maxpool2d_forward_2x2", Range(0, g.batch * g.channels * Ho),
        KOKKOS_LAMBDA(const std::int64_t i) {
          const std::int64_t oh = i % Ho, nc = i / Ho;
          const std::int64_t top = nc * H * W + oh * 2 * W;
          for (std::int64_t ow = 0; ow < Wo; ++ow) {
            // Window (a, a+1; a+W, a+W+1) as a tree of max and integer arithmetic, no
            // branches (random data mispredicts them; GCC branches on float selects): the
            // first maximum in row-major order wins ties, as in the general loop below.
            const std::int64_t a = top + 2 * ow;
            const T v0 = x(a), v1 = x(a + 1), v2 = x(a + W), v3 = x(a + W + 1);
            const T m_top = v0 < v1 ? v1 : v0, m_bottom = v2 < v3 ? v3 : v2;
            const std::int64_t i_top = a + static_cast<std::int64_t>(v1 > v0);
            const std::int64_t i_bottom = a + W + static_cast<std::int64_t>(v3 > v2);
            const std::int64_t bottom = static_cast<std::int64_t>(m_bottom > m_top);
            y(i * Wo + ow) = m_top < m_bottom ? m_bottom : m_top;
            argmax(i * Wo + ow) = i_top + bottom * (i_bottom - i_top);
          }
        });
    return;
  }
  Kokkos::parallel_for(  // one output row (n, c, oh) per work item: divisions once per row
      "hpctrain::maxpool2d_forward", Range(0, g.batch * g.channels * Ho),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t oh = i % Ho, nc = i / Ho;
        const std::int64_t top = nc * H * W + oh * S * W;
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          const std::int64_t corner = top + ow * S;
          std::int64_t best = corner;
          for (std::int64_t kh = 0; kh < K; ++kh) {
            for (std::int64_t kw = 0; kw < K; ++kw) {
              const std::int64_t idx = corner + kh * W + kw;
              if (x(idx) > x(best)) best = idx;
            }
          }
          const std::int64_t o = i * Wo + ow;
          y(o) = x(best);
          argmax(o) = best;
        }
      });
}

template <class T>
void maxpool2d_backward(const Pool2dGeometry& g, const Vec<T>& dy,
                        const Kokkos::View<std::int64_t*, MemSpace>& argmax, const Vec<T>& dx) {
  g.validate();
  const std::int64_t n_out = g.batch * g.channels * g.out_height() * g.out_width();
  require_size(dy, n_out, "maxpool2d output gradient");
  require_size(argmax, n_out, "maxpool2d argmax");
  require_size(dx, g.batch * g.channels * g.height * g.width, "maxpool2d input gradient");
  Kokkos::deep_copy(dx, T(0));
  if (g.stride >= g.kernel) {  // windows do not overlap: every input has at most one writer
    Kokkos::parallel_for(
        "hpctrain::maxpool2d_backward_disjoint", Range(0, n_out),
        KOKKOS_LAMBDA(const std::int64_t o) { dx(argmax(o)) = dy(o); });
    return;
  }
  Kokkos::parallel_for(
      "hpctrain::maxpool2d_backward", Range(0, n_out),
      KOKKOS_LAMBDA(const std::int64_t o) { Kokkos::atomic_add(&dx(argmax(o)), dy(o)); });
}

#define HPCTRAIN_INSTANTIATE(T)                                                              \
  template void im2col<T>(const Conv2dGeometry&, const Vec<T>&, const Vec<T>&);              \
  template void col2im<T>(const Conv2dGeometry&, const Vec<T>&, const Vec<T>&);              \
  template struct Conv2dWorkspace<T>;                                                        \
  template void conv2d_forward<T>(const Conv2dGeometry&, const Vec<T>&, const Vec<T>&,       \
                                  const Vec<T>&, Conv2dWorkspace<T>&, const Vec<T>&);        \
  template void conv2d_backward<T>(const Conv2dGeometry&, const Vec<T>&, const Vec<T>&,      \
                                   Conv2dWorkspace<T>&, const Vec<T>&, const Vec<T>&,        \
                                   const Vec<T>&);                                           \
  template struct Conv2dLeaves<T>;                                                           \
  template void conv2d_forward_in_leaves<T>(std::int64_t, const Conv2dGeometry&, const Vec<T>&, \
                                            const Vec<T>&, const Vec<T>&, Conv2dLeaves<T>&,     \
                                            const Vec<T>&);                                     \
  template void conv2d_backward_in_leaves<T>(std::int64_t, const Conv2dGeometry&, const Vec<T>&, \
                                             const Vec<T>&, Conv2dLeaves<T>&, const Vec<T>&,     \
                                             const Vec<T>&, const Vec<T>&);                      \
  template void maxpool2d_forward<T>(const Pool2dGeometry&, const Vec<T>&, const Vec<T>&,    \
                                     const Kokkos::View<std::int64_t*, MemSpace>&);          \
  template void maxpool2d_backward<T>(const Pool2dGeometry&, const Vec<T>&,                  \
                                      const Kokkos::View<std::int64_t*, MemSpace>&,          \
                                      const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
