#include "hpctrain/core/init.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/counter_rng.hpp"
#include "hpctrain/core/kokkos_compat.hpp"

#include <cmath>

namespace hpctrain::core {

Init parse_init(const std::string& name) {
  if (name == "zeros") return Init::zeros;
  if (name == "ones") return Init::ones;
  if (name == "he" || name == "he_normal") return Init::he_normal;
  if (name == "xavier" || name == "xavier_uniform") return Init::xavier_uniform;
  if (name == "fan_in_uniform" || name == "pytorch") return Init::fan_in_uniform;
  HPCTRAIN_FAIL("unknown initialisation '" + name + "' (expected zeros, ones, he, xavier or fan_in_uniform)");
}

std::string to_string(Init init) {
  switch (init) {
    case Init::zeros: return "zeros";
    case Init::ones: return "ones";
    case Init::he_normal: return "he";
    case Init::xavier_uniform: return "xavier";
    case Init::fan_in_uniform: return "fan_in_uniform";
  }
  return "?";
}

template <class T>
void initialize(const Vec<T>& v, Init init, std::int64_t fan_in, std::int64_t fan_out,
                std::uint64_t seed, std::uint64_t parameter_id) {
  const auto n = static_cast<std::int64_t>(v.extent(0));
  if (init == Init::zeros || init == Init::ones) {
    Kokkos::deep_copy(v, init == Init::zeros ? T(0) : T(1));
    return;
  }
  HPCTRAIN_REQUIRE(fan_in > 0 && fan_out > 0, "initialize: fans must be positive");
  const Vec<T> out = v;
  if (init == Init::he_normal) {
    const double std_dev = std::sqrt(2.0 / static_cast<double>(fan_in));
    Kokkos::parallel_for(
        "hpctrain::init_he_normal", Kokkos::RangePolicy<ExecSpace>(0, n),
        KOKKOS_LAMBDA(const std::int64_t i) {
          const auto idx = static_cast<std::uint64_t>(i);
          out(i) = static_cast<T>(std_dev * standard_normal(counter_hash(seed, parameter_id, idx, 0),
                                                            counter_hash(seed, parameter_id, idx, 1)));
        });
  } else {
    const double limit = init == Init::xavier_uniform ? std::sqrt(6.0 / static_cast<double>(fan_in + fan_out))
                                                      : 1.0 / std::sqrt(static_cast<double>(fan_in));
    Kokkos::parallel_for(
        "hpctrain::init_xavier_uniform", Kokkos::RangePolicy<ExecSpace>(0, n),
        KOKKOS_LAMBDA(const std::int64_t i) {
          const double u = uniform01(counter_hash(seed, parameter_id, static_cast<std::uint64_t>(i), 0));
          out(i) = static_cast<T>((2.0 * u - 1.0) * limit);
        });
  }
}

template void initialize<float>(const Vec<float>&, Init, std::int64_t, std::int64_t,
                                 std::uint64_t, std::uint64_t);
template void initialize<double>(const Vec<double>&, Init, std::int64_t, std::int64_t,
                                  std::uint64_t, std::uint64_t);

}  // namespace hpctrain::core
