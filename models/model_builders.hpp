#pragma once
// The registry's built-in model builders that live in their own files, and what they share.

#include "hpctrain/models/sequential.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <set>
#include <string>

namespace hpctrain::models::detail {

/// Throws unless `config` is an object whose keys are all in `allowed`.
void check_keys(const nlohmann::json& config, const std::set<std::string>& allowed);

/// `resnet`: see docs/models.md and resnet.cpp.
template <class T>
std::unique_ptr<Sequential<T>> build_resnet(const nlohmann::json& config);
/// `transformer`: see docs/models.md and transformer.cpp.
template <class T>
std::unique_ptr<Sequential<T>> build_transformer(const nlohmann::json& config);

}  // namespace hpctrain::models::detail
