#include "hpctrain/base/error.hpp"
#include "hpctrain/models/blocks.hpp"

#include "hpctrain/core/leaf_tree.hpp"

#include <algorithm>
#include <cmath>

namespace hpctrain::models {

namespace {
using Doubles = Kokkos::View<double*, core::MemSpace>;

// Parameter slots, in spec order.
constexpr std::size_t kGamma = 0, kBeta = 1, kRunningMean = 2, kRunningVar = 3, kTracked = 4;

/// The gradient slots backward() adds into (free functions: CUDA's extended lambdas may not sit
/// in a class's private member functions).
template <class T>
struct BatchNormGradients {
  core::Vec<T> dgamma, dbeta, dmean, dvar, tracked;
};

/// One batch (no leaves): the backward sums and moments as they are, `count` elements.
template <class T>
void add_batch_terms(const BatchNormGradients<T>& grads, const Doubles& sums, const Doubles& moments, std::int64_t c,
                     T count, bool train) {
  const core::Vec<T> dgamma = grads.dgamma, dbeta = grads.dbeta, dmean = grads.dmean, dvar = grads.dvar;
  const core::Vec<T> tracked = grads.tracked;
  Kokkos::parallel_for(
      "hpctrain::batchnorm::accumulate", Kokkos::RangePolicy<core::ExecSpace>(0, c),
      KOKKOS_LAMBDA(const std::int64_t i) {
        dgamma(i) += static_cast<T>(sums(c + i));
        dbeta(i) += static_cast<T>(sums(i));
        if (train) {
          dmean(i) += static_cast<T>(moments(i));
          dvar(i) += static_cast<T>(moments(c + i));
          if (i == 0) tracked(0) += count;
        }
      });
}

/// Leaves (training only). Leaf l's terms, as a pass of it alone adds them into zeroed
/// gradients: [dgamma | dbeta | dmean | dvar | count] into terms[l, 4C + 1], each T(0) + its
/// value (so never -0), then over the leaf tree in place, one thread per term, and added.
template <class T>
void add_leaf_terms(const BatchNormGradients<T>& grads, const Doubles& sums, const Doubles& moments, std::int64_t c,
                    const core::ChannelGeometry& g, std::int64_t leaf_rows, std::int64_t leaves,
                    const core::Vec<T>& terms) {
  const core::Vec<T> dgamma = grads.dgamma, dbeta = grads.dbeta, dmean = grads.dmean, dvar = grads.dvar;
  const core::Vec<T> tracked = grads.tracked;
  const std::int64_t width = 4 * c + 1, batch = g.batch, spatial = g.spatial;
  Kokkos::parallel_for(
      "hpctrain::batchnorm::accumulate_leaves", Kokkos::RangePolicy<core::ExecSpace>(0, width),
      KOKKOS_LAMBDA(const std::int64_t j) {
        const std::int64_t block = j / c, i = j % c;
        for (std::int64_t l = 0; l < leaves; ++l) {
          const std::int64_t o = l * 2 * c;
          const std::int64_t rows = leaf_rows < batch - l * leaf_rows ? leaf_rows : batch - l * leaf_rows;
          const double v = block == 0 ? sums(o + c + i)
                           : block == 1 ? sums(o + i)
                           : block == 2 ? moments(o + i)
                           : block == 3 ? moments(o + c + i)
                                        : static_cast<double>(rows * spatial);
          terms(l * width + j) = T(0) + static_cast<T>(v);
        }
        core::leaf_tree_sum_in_place(leaves, [&](std::int64_t l) -> T& { return terms(l * width + j); });
        const T total = terms(j);
        if (block == 0) dgamma(i) += total;
        if (block == 1) dbeta(i) += total;
        if (block == 2) dmean(i) += total;
        if (block == 3) dvar(i) += total;
        if (block == 4) tracked(0) += total;
      });
}

}  // namespace

template <class T>
BatchNorm2D<T>::BatchNorm2D(std::int64_t channels, double momentum, double eps, bool relu)
    : channels_(channels), momentum_(momentum), eps_(eps), relu_(relu) {
  HPCTRAIN_REQUIRE(channels > 0, "batchnorm2d: channels must be positive");
  HPCTRAIN_REQUIRE(momentum > 0 && momentum <= 1, "batchnorm2d: momentum must be in (0, 1]");
  HPCTRAIN_REQUIRE(eps > 0, "batchnorm2d: eps must be positive");
}

template <class T>
Shape BatchNorm2D<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(s.size() == 3 && s[0] == channels_,
                   "batchnorm2d(" + std::to_string(channels_) + "): sample shape must be [" +
                       std::to_string(channels_) + ", H, W], got " + core::shape_string(s));
  return s;
}

template <class T>
std::vector<ParameterSpec> BatchNorm2D<T>::parameter_specs() const {
  const Shape c{channels_};
  return {{"weight", c, core::Init::ones},
          {"bias", c, core::Init::zeros},
          {"running_mean", c, core::Init::zeros, 1, 1, /*trainable=*/false},
          {"running_var", c, core::Init::ones, 1, 1, false},
          {"batches_tracked", {1}, core::Init::zeros, 1, 1, false}};
}

template <class T>
core::ChannelGeometry BatchNorm2D<T>::geometry(const Tensor<T>& x) const {
  HPCTRAIN_REQUIRE(x.rank() == 4 && x.dim(1) == channels_,
                   "batchnorm2d(" + std::to_string(channels_) + "): input must be [N, " +
                       std::to_string(channels_) + ", H, W], got " + core::shape_string(x.shape));
  return {x.dim(0), channels_, x.dim(2) * x.dim(3)};
}

template <class T>
typename BatchNorm2D<T>::Doubles BatchNorm2D<T>::leaf_part(const Doubles& v, std::int64_t l, std::int64_t per_leaf) {
  return Kokkos::subview(v, std::make_pair(l * per_leaf, (l + 1) * per_leaf));
}

template <class T>
core::ChannelGeometry BatchNorm2D<T>::leaf_geometry(std::int64_t l) const {
  return {std::min(leaf_rows_, g_.batch - l * leaf_rows_), g_.channels, g_.spatial};
}

template <class T>
core::Vec<T> BatchNorm2D<T>::leaf_rows(const core::Vec<T>& v, std::int64_t l) const {
  if (leaves_ == 1) return v;
  const std::int64_t row = g_.channels * g_.spatial, first = l * leaf_rows_ * row;
  return Kokkos::subview(v, std::make_pair(first, first + leaf_geometry(l).batch * row));
}

template <class T>
void BatchNorm2D<T>::batch_statistics(const Tensor<T>& x) {
  const auto c = static_cast<std::size_t>(channels_);
  for (std::int64_t l = 0; l < leaves_; ++l) {
    core::channel_moments(leaf_geometry(l), leaf_rows(x.data, l), this->param(kRunningMean).data,
                          leaf_part(moments_, l, 2 * channels_));
  }
  // This rank's shifted sums (moments_ keeps them for backward) and element counts, every
  // leaf's in one copy to the host.
  const std::vector<double> moments = core::to_host(core::Vec<double>(moments_));
  const std::vector<T> shift = core::to_host(this->param(kRunningMean).data);
  std::vector<double> mean(moments.size() / 2), rstd(moments.size() / 2);
  for (std::size_t l = 0; l < static_cast<std::size_t>(leaves_); ++l) {
    std::vector<double> total(moments.begin() + static_cast<std::ptrdiff_t>(2 * c * l),
                              moments.begin() + static_cast<std::ptrdiff_t>(2 * c * (l + 1)));
    const core::ChannelGeometry g = leaf_geometry(static_cast<std::int64_t>(l));
    total.push_back(static_cast<double>(g.batch * g.spatial));
    if (reducer_) reducer_(total.data(), total.size());  // one leaf: forward() says so
    const double count = stat_counts_[l] = total[2 * c];
    for (std::size_t i = 0; i < c; ++i) {
      const double offset = count > 0 ? total[i] / count : 0.0;
      const double var = count > 0 ? std::max(0.0, total[c + i] / count - offset * offset) : 0.0;
      mean[l * c + i] = static_cast<double>(shift[i]) + offset;
      rstd[l * c + i] = 1.0 / std::sqrt(var + eps_);
    }
  }
  core::from_host(core::Vec<double>(mean_), mean);
  core::from_host(core::Vec<double>(rstd_), rstd);
}

template <class T>
void BatchNorm2D<T>::running_statistics() {
  const std::vector<T> mean = core::to_host(this->param(kRunningMean).data);
  const std::vector<T> var = core::to_host(this->param(kRunningVar).data);
  std::vector<double> m(mean.begin(), mean.end()), r(var.size());
  for (std::size_t i = 0; i < var.size(); ++i) r[i] = 1.0 / std::sqrt(static_cast<double>(var[i]) + eps_);
  core::from_host(core::Vec<double>(leaf_part(mean_, 0, channels_)), m);
  core::from_host(core::Vec<double>(leaf_part(rstd_, 0, channels_)), r);
  stat_counts_.assign(1, 0.0);
}

template <class T>
Tensor<T> BatchNorm2D<T>::forward(const Tensor<T>& x, bool train) {
  g_ = geometry(x);
  train_ = train;
  // Leaves in training only: evaluation normalises every row with the running statistics.
  const std::int64_t leaf = train ? this->gradient_leaf_rows() : 0;
  leaf_rows_ = leaf > 0 && leaf < g_.batch ? leaf : std::max<std::int64_t>(g_.batch, 1);
  leaves_ = core::leaf_count(std::max<std::int64_t>(g_.batch, 1), leaf_rows_);
  HPCTRAIN_REQUIRE(leaves_ == 1 || !reducer_, "batchnorm2d: synchronised statistics cannot run in leaves");
  const auto per_leaf = [&](Doubles& v, std::int64_t n, const char* label) {
    if (static_cast<std::int64_t>(v.extent(0)) != leaves_ * n) v = Doubles(std::string(label), static_cast<std::size_t>(leaves_ * n));
  };
  per_leaf(moments_, 2 * channels_, "hpctrain::batchnorm::moments");
  per_leaf(mean_, channels_, "hpctrain::batchnorm::mean");
  per_leaf(rstd_, channels_, "hpctrain::batchnorm::rstd");
  per_leaf(sums_, 2 * channels_, "hpctrain::batchnorm::sums");
  stat_counts_.assign(static_cast<std::size_t>(leaves_), 0.0);
  core::ensure_shape(xhat_, "hpctrain::batchnorm::xhat", x.shape);
  core::ensure_shape(y_, "hpctrain::batchnorm::y", x.shape);
  if (train) {
    batch_statistics(x);
  } else {
    running_statistics();
  }
  for (std::int64_t l = 0; l < leaves_; ++l) {
    core::batch_norm_forward(leaf_geometry(l), leaf_rows(x.data, l), leaf_part(mean_, l, channels_),
                             leaf_part(rstd_, l, channels_), this->param(kGamma).data, this->param(kBeta).data,
                             relu_, leaf_rows(xhat_.data, l), leaf_rows(y_.data, l));
  }
  return y_;
}

template <class T>
void BatchNorm2D<T>::accumulate_gradients() {
  const BatchNormGradients<T> grads{this->grad(kGamma).data, this->grad(kBeta).data, this->grad(kRunningMean).data,
                                    this->grad(kRunningVar).data, this->grad(kTracked).data};
  if (leaves_ == 1) {
    add_batch_terms(grads, sums_, moments_, channels_, static_cast<T>(g_.batch * g_.spatial), train_);
    return;
  }
  const std::int64_t width = 4 * channels_ + 1;
  if (static_cast<std::int64_t>(leaf_terms_.extent(0)) < leaves_ * width) {
    leaf_terms_ = core::Vec<T>("hpctrain::batchnorm::leaf_terms", static_cast<std::size_t>(leaves_ * width));
  }
  add_leaf_terms(grads, sums_, moments_, channels_, g_, leaf_rows_, leaves_, leaf_terms_);
}

template <class T>
Tensor<T> BatchNorm2D<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  HPCTRAIN_REQUIRE(dy.size() == g_.size(), "batchnorm2d: output gradient shape " +
                                               core::shape_string(dy.shape) + " does not match");
  for (std::int64_t l = 0; l < leaves_; ++l) {
    core::batch_norm_backward_sums(leaf_geometry(l), leaf_rows(dy.data, l), leaf_rows(xhat_.data, l), relu_,
                                   leaf_rows(y_.data, l), leaf_part(sums_, l, 2 * channels_));
  }
  accumulate_gradients();
  if (reducer_ && train_) {
    std::vector<double> total = core::to_host(core::Vec<double>(sums_));
    reducer_(total.data(), total.size());
    core::from_host(core::Vec<double>(sums_), total);
  }
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::batchnorm::dx", xhat_.shape);
  for (std::int64_t l = 0; l < leaves_; ++l) {
    core::batch_norm_backward_input(leaf_geometry(l), leaf_rows(dy.data, l), leaf_rows(xhat_.data, l), relu_,
                                    leaf_rows(y_.data, l), this->param(kGamma).data, leaf_part(rstd_, l, channels_),
                                    leaf_part(sums_, l, 2 * channels_),
                                    train_ ? stat_counts_[static_cast<std::size_t>(l)] : 0.0, leaf_rows(dx_.data, l));
  }
  return dx_;
}

template <class T>
void BatchNorm2D<T>::skip_stat_reductions(bool backward) {
  if (!reducer_) return;
  std::vector<double> zeros(static_cast<std::size_t>(2 * channels_ + (backward ? 0 : 1)), 0.0);
  reducer_(zeros.data(), zeros.size());
}

template <class T>
void BatchNorm2D<T>::update_state() {
  const core::Vec<T> rm = this->param(kRunningMean).data, rv = this->param(kRunningVar).data;
  const core::Vec<T> tracked = this->param(kTracked).data;
  const core::Vec<T> s1 = this->grad(kRunningMean).data, s2 = this->grad(kRunningVar).data;
  const core::Vec<T> count = this->grad(kTracked).data;
  const double m = momentum_;
  Kokkos::parallel_for(
      "hpctrain::batchnorm::update_state", Kokkos::RangePolicy<core::ExecSpace>(0, channels_),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const double n = static_cast<double>(count(0));
        if (n > 1) {
          const double offset = static_cast<double>(s1(i)) / n;
          double var = static_cast<double>(s2(i)) / n - offset * offset;
          var = var > 0 ? var : 0.0;
          rm(i) = static_cast<T>(static_cast<double>(rm(i)) + m * offset);
          rv(i) = static_cast<T>((1 - m) * static_cast<double>(rv(i)) + m * var * n / (n - 1));
        }
        s1(i) = T(0);
        s2(i) = T(0);
      });
  Kokkos::parallel_for(
      "hpctrain::batchnorm::count_update", Kokkos::RangePolicy<core::ExecSpace>(0, 1),
      KOKKOS_LAMBDA(const std::int64_t) {
        if (count(0) > T(1)) tracked(0) += T(1);
        count(0) = T(0);
      });
}

template <class T>
Shape GlobalAvgPool2D<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(s.size() == 3, "globalavgpool2d: sample shape must be [C, H, W], got " + core::shape_string(s));
  return {s[0]};
}

template <class T>
Tensor<T> GlobalAvgPool2D<T>::forward(const Tensor<T>& x, bool /*train*/) {
  HPCTRAIN_REQUIRE(x.rank() == 4, "globalavgpool2d: input must be [N, C, H, W], got " + core::shape_string(x.shape));
  g_ = {x.dim(0), x.dim(1), x.dim(2) * x.dim(3)};
  x_shape_ = x.shape;
  core::ensure_shape(y_, "hpctrain::globalavgpool::y", {g_.batch, g_.channels});
  core::global_avg_pool_forward(g_, x.data, y_.data);
  return y_;
}

template <class T>
Tensor<T> GlobalAvgPool2D<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::globalavgpool::dx", x_shape_);
  core::global_avg_pool_backward(g_, dy.data, dx_.data);
  return dx_;
}

template class BatchNorm2D<float>;
template class BatchNorm2D<double>;
template class GlobalAvgPool2D<float>;
template class GlobalAvgPool2D<double>;

}  // namespace hpctrain::models
