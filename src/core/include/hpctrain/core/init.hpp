#pragma once
/// @file
/// Parameter initialisation from the counter-based RNG: element i of parameter p gets a value
/// that depends only on (seed, p, i) — not on the backend, thread count or rank count.

#include "hpctrain/core/tensor.hpp"

#include <cstdint>
#include <string>

namespace hpctrain::core {

enum class Init {
  zeros,
  ones,            ///< 1 everywhere (normalisation scales)
  he_normal,       ///< N(0, 2 / fan_in) (He et al. 2015), for ReLU networks
  xavier_uniform,  ///< U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010)
  fan_in_uniform,  ///< U(-a, a), a = 1 / sqrt(fan_in): PyTorch's default for Linear and Conv2d
};

Init parse_init(const std::string& name);  ///< "zeros", "he", "xavier", "fan_in_uniform"
std::string to_string(Init init);

template <class T>
void initialize(const Vec<T>& v, Init init, std::int64_t fan_in, std::int64_t fan_out,
                std::uint64_t seed, std::uint64_t parameter_id);

}  // namespace hpctrain::core
