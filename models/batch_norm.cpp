#include "hpctrain/base/error.hpp"
#include "hpctrain/models/blocks.hpp"

#include <algorithm>
#include <cmath>

namespace hpctrain::models {

namespace {
using Doubles = Kokkos::View<double*, core::MemSpace>;
// Parameter slots, in spec order.
constexpr std::size_t kGamma = 0, kBeta = 1, kRunningMean = 2, kRunningVar = 3, kTracked = 4;
}  // namespace

template <class T>
BatchNorm2D<T>::BatchNorm2D(std::int64_t channels, double momentum, double eps, bool relu)
    : channels_(channels), momentum_(momentum), eps_(eps), relu_(relu),
      moments_("hpctrain::batchnorm::moments", static_cast<std::size_t>(2 * channels)),
      mean_("hpctrain::batchnorm::mean", static_cast<std::size_t>(channels)),
      rstd_("hpctrain::batchnorm::rstd", static_cast<std::size_t>(channels)),
      sums_("hpctrain::batchnorm::sums", static_cast<std::size_t>(2 * channels)) {
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
void BatchNorm2D<T>::batch_statistics(const Tensor<T>& x) {
  const auto c = static_cast<std::size_t>(channels_);
  core::channel_moments(g_, x.data, this->param(kRunningMean).data, moments_);
  // This rank's shifted sums and element count; moments_ keeps the local sums for backward.
  std::vector<double> total = core::to_host(core::Vec<double>(moments_));
  total.push_back(static_cast<double>(g_.batch * g_.spatial));
  if (reducer_) reducer_(total.data(), total.size());
  stat_count_ = total[2 * c];
  const std::vector<T> shift = core::to_host(this->param(kRunningMean).data);
  std::vector<double> mean(c), rstd(c);
  for (std::size_t i = 0; i < c; ++i) {
    const double offset = stat_count_ > 0 ? total[i] / stat_count_ : 0.0;
    const double var = stat_count_ > 0 ? std::max(0.0, total[c + i] / stat_count_ - offset * offset) : 0.0;
    mean[i] = static_cast<double>(shift[i]) + offset;
    rstd[i] = 1.0 / std::sqrt(var + eps_);
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
  core::from_host(core::Vec<double>(mean_), m);
  core::from_host(core::Vec<double>(rstd_), r);
  stat_count_ = 0;
}

template <class T>
Tensor<T> BatchNorm2D<T>::forward(const Tensor<T>& x, bool train) {
  g_ = geometry(x);
  train_ = train;
  core::ensure_shape(xhat_, "hpctrain::batchnorm::xhat", x.shape);
  core::ensure_shape(y_, "hpctrain::batchnorm::y", x.shape);
  if (train) {
    batch_statistics(x);
  } else {
    running_statistics();
  }
  core::batch_norm_forward(g_, x.data, mean_, rstd_, this->param(kGamma).data, this->param(kBeta).data, relu_,
                           xhat_.data, y_.data);
  return y_;
}

template <class T>
Tensor<T> BatchNorm2D<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  HPCTRAIN_REQUIRE(dy.size() == g_.size(), "batchnorm2d: output gradient shape " +
                                               core::shape_string(dy.shape) + " does not match");
  core::batch_norm_backward_sums(g_, dy.data, xhat_.data, relu_, y_.data, sums_);
  const std::int64_t c = channels_;
  const Doubles sums = sums_, moments = moments_;
  const core::Vec<T> dgamma = this->grad(kGamma).data, dbeta = this->grad(kBeta).data;
  const core::Vec<T> dmean = this->grad(kRunningMean).data, dvar = this->grad(kRunningVar).data;
  const core::Vec<T> tracked = this->grad(kTracked).data;
  const auto count = static_cast<T>(g_.batch * g_.spatial);
  const bool train = train_;
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
  if (reducer_ && train) {
    std::vector<double> total = core::to_host(core::Vec<double>(sums_));
    reducer_(total.data(), total.size());
    core::from_host(core::Vec<double>(sums_), total);
  }
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::batchnorm::dx", xhat_.shape);
  core::batch_norm_backward_input(g_, dy.data, xhat_.data, relu_, y_.data, this->param(kGamma).data, rstd_,
                                  sums_, train ? stat_count_ : 0.0, dx_.data);
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
