#pragma once
/// @file
/// Evaluation on a test split, the same in every training mode and at any rank count.

#include <cstdint>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/io/dataset.hpp"
#include "hpctrain/models/sequential.hpp"

namespace hpctrain::train {

struct EvalResult {
  double loss = 0.0;      ///< mean softmax cross-entropy per sample
  double accuracy = 0.0;  ///< fraction of samples whose largest logit is at the label, in [0, 1]
  std::int64_t samples = 0;
};

/// Collective. The test set is cut into fixed batches of 256 samples in file order (as on one
/// rank); rank r evaluates batches r, r + P, ...; every batch's loss sum and correct count go
/// to its own slot, the slots are all-reduced (one non-zero term per slot: exact) and summed in
/// batch order, so loss and accuracy do not depend on P. Forward only (train = false).
EvalResult evaluate(models::Sequential<float>& model, const io::DatasetReader& reader, coll::Communicator& comm);

}  // namespace hpctrain::train
