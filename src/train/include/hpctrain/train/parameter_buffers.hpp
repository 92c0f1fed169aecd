#pragma once
/// @file
/// ParameterBuffers: a model's trainable state as the gradient strategies see it, two
/// contiguous float buffers of equal length and a table of where each tensor lies in them.
/// Any model whose parameters and gradients live in two such buffers can be trained with
/// DataParallel; models::Sequential is one.

#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/models/sequential.hpp"

namespace hpctrain::train {

struct ParameterBuffers {
  core::Vec<float> parameters;
  core::Vec<float> gradients;  ///< same length: element i is dL/d parameters(i)
  /// Where each tensor lies, in registration order; `layer` is the index a backward hook
  /// reports once that tensor's gradient is final (layers finish last to first).
  std::vector<models::ParameterInfo> tensors;

  /// Views of `model`'s buffers (no copy: Kokkos views share the storage).
  static ParameterBuffers of(const models::Sequential<float>& model);
  std::int64_t count() const noexcept { return static_cast<std::int64_t>(parameters.extent(0)); }
};

/// Collective. Checks every rank holds the same tensors (count and a hash of names, offsets and
/// sizes; a mismatch throws naming the counts), then copies rank 0's parameters to every rank.
void broadcast_parameters(coll::Communicator& comm, const ParameterBuffers& buffers);

}  // namespace hpctrain::train
