#include "hpctrain/core/conv.hpp"

#include "hpctrain/collectives/error.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/core/gemm.hpp"

#include <string>

namespace hpctrain::core {

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

template <class T>
void im2col(const Conv2dGeometry& g, const Vec<T>& x, const Vec<T>& col) {
  const std::int64_t C = g.in_channels, H = g.height, W = g.width, K = g.kernel;
  const std::int64_t S = g.stride, P = g.pad, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t NP = g.col_cols();
  require_size(x, g.batch * C * H * W, "im2col input");
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(col.extent(0)) >= g.col_rows() * NP,
                   "im2col: column buffer too small");
  Kokkos::parallel_for(
      "hpctrain::im2col", Range(0, g.col_rows() * NP), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t r = i / NP, q = i % NP;
        const std::int64_t c = r / (K * K), kh = (r / K) % K, kw = r % K;
        const std::int64_t n = q / (Ho * Wo), oh = (q / Wo) % Ho, ow = q % Wo;
        const std::int64_t h = oh * S - P + kh, w = ow * S - P + kw;
        col(i) = (h >= 0 && h < H && w >= 0 && w < W) ? x(((n * C + c) * H + h) * W + w) : T(0);
      });
}

template <class T>
void col2im(const Conv2dGeometry& g, const Vec<T>& dcol, const Vec<T>& dx) {
  const std::int64_t C = g.in_channels, H = g.height, W = g.width, K = g.kernel;
  const std::int64_t S = g.stride, P = g.pad, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t NP = g.col_cols();
  require_size(dx, g.batch * C * H * W, "col2im output");
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(dcol.extent(0)) >= g.col_rows() * NP,
                   "col2im: column buffer too small");
  Kokkos::parallel_for(
      "hpctrain::col2im", Range(0, g.batch * C * H * W), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t w = i % W, h = (i / W) % H, c = (i / (H * W)) % C;
        const std::int64_t n = i / (C * H * W);
        T s = 0;
        for (std::int64_t kh = 0; kh < K; ++kh) {
          const std::int64_t hs = h + P - kh;  // = oh * S when (h, kh) feeds output row oh
          if (hs < 0 || hs % S != 0 || hs / S >= Ho) continue;
          for (std::int64_t kw = 0; kw < K; ++kw) {
            const std::int64_t ws = w + P - kw;
            if (ws < 0 || ws % S != 0 || ws / S >= Wo) continue;
            const std::int64_t r = (c * K + kh) * K + kw;
            const std::int64_t q = (n * Ho + hs / S) * Wo + ws / S;
            s += dcol(r * NP + q);
          }
        }
        dx(i) = s;
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
  ws.reserve(g);
  im2col(g, x, ws.col);
  gemm(Trans::no, Trans::no, T(1), as_matrix(w, F, g.col_rows()),
       as_matrix(ws.col, g.col_rows(), NP), T(0), as_matrix(ws.yt, F, NP));
  const Vec<T> yt = ws.yt;
  Kokkos::parallel_for(
      "hpctrain::conv2d_bias_to_nchw", Range(0, g.batch * F * HW),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t p = i % HW, f = (i / HW) % F, n = i / (F * HW);
        y(i) = yt(f * NP + n * HW + p) + b(f);
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
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(ws.col.extent(0)) >= CKK * NP,
                   "conv2d_backward before conv2d_forward");
  const Vec<T> dyt = ws.yt;  // the forward's yt is dead once y is written
  Kokkos::parallel_for(
      "hpctrain::conv2d_nchw_to_rows", Range(0, g.batch * F * HW),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t p = i % HW, f = (i / HW) % F, n = i / (F * HW);
        dyt(f * NP + n * HW + p) = dy(i);
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
  Kokkos::parallel_for(
      "hpctrain::maxpool2d_forward", Range(0, n_out), KOKKOS_LAMBDA(const std::int64_t o) {
        const std::int64_t ow = o % Wo, oh = (o / Wo) % Ho, nc = o / (Ho * Wo);
        const std::int64_t base = nc * H * W;
        std::int64_t best = base + (oh * S) * W + ow * S;
        for (std::int64_t kh = 0; kh < K; ++kh) {
          for (std::int64_t kw = 0; kw < K; ++kw) {
            const std::int64_t idx = base + (oh * S + kh) * W + ow * S + kw;
            if (x(idx) > x(best)) best = idx;
          }
        }
        y(o) = x(best);
        argmax(o) = best;
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
  template void maxpool2d_forward<T>(const Pool2dGeometry&, const Vec<T>&, const Vec<T>&,    \
                                     const Kokkos::View<std::int64_t*, MemSpace>&);          \
  template void maxpool2d_backward<T>(const Pool2dGeometry&, const Vec<T>&,                  \
                                      const Kokkos::View<std::int64_t*, MemSpace>&,          \
                                      const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
