#pragma once
/// @file
/// Models built by name from a JSON config.
///
/// Config keys (all optional but "name"):
///   name         "mlp" | "cnn" | anything registered
///   input_shape  per-sample shape, default [1, 28, 28]
///   classes      default 10
///   hidden       dense hidden sizes: mlp default [512, 256], cnn default [256]
///   channels     cnn conv channels, default [32, 64]
///   kernel       cnn kernel size, default 5 (padding kernel/2, "same")
///   pool         cnn max-pool window and stride, default 2
///   activation   "relu" (default) | "gelu"
///   dropout      rate after each hidden dense activation, default 0 (none)
///   init         "he" (default) | "xavier" for weights; biases start at zero
///   seed         parameter initialisation seed, default 0
/// Unknown keys are errors, so typos do not silently change a model.

#include "hpctrain/models/sequential.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hpctrain::models {

template <class T>
using ModelFactory = std::function<std::unique_ptr<Sequential<T>>(const nlohmann::json& config)>;

/// Adds (or replaces) a factory; builtins "mlp" and "cnn" are always present.
template <class T>
void register_model(const std::string& name, ModelFactory<T> factory);

/// Builds, finalises and initialises the model named by config["name"]: plan_model, then
/// Sequential::finalize(model_seed(config)).
template <class T>
std::unique_ptr<Sequential<T>> build_model(const nlohmann::json& config);

/// The model named by config["name"] with its layers but, unless its factory finalised it
/// itself, no parameter buffers yet: its shapes and parameter_count() are known, so the memory
/// a run needs can be checked before the parameters are allocated; finalize(model_seed(config))
/// then makes it what build_model returns. (The builtin factories leave models unfinalised.)
template <class T>
std::unique_ptr<Sequential<T>> plan_model(const nlohmann::json& config);

/// The parameter initialisation seed of a model config ("seed", default 0).
std::uint64_t model_seed(const nlohmann::json& config);

/// Names of the registered models for scalar type T, sorted.
template <class T>
std::vector<std::string> registered_models();

}  // namespace hpctrain::models
