#pragma once
/// @file
/// What the fitters do to the samples besides reading them: `--standardize` and the data
/// checksum recorded in model files.
///
/// Standardisation: every feature j becomes (x_j - mean_j) / std_j with the mean and the
/// population standard deviation (divided by N) over all N samples, both from exact
/// P-independent sums (exact_block_sum.hpp: the means, then the centred squares). A constant
/// feature (std_j = 0) is centred only (divided by 1). The model is then fitted, and its
/// coefficients expressed, in standardised units; the model file stores `/standardize_mean`
/// and `/standardize_std` (d, float64) and `ml predict` applies them to its input.
///
/// Data checksum: XXH3-64 of the sequence of the XXH3-64s of every sum block's samples (as
/// the f64 values the fitter uses, before standardisation), so it is the same at any P:
/// "xxh3:<16 hex digits>".

#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/sample_partition.hpp"

namespace hpctrain::ml {

struct Standardization {
  std::vector<double> mean;  ///< d
  std::vector<double> std;   ///< d; 1 where the feature is constant
};

/// Collective: the means and (population) standard deviations of all samples of `data` as the
/// fitters see them (after a recorded standardisation), by exact sums: the same bits at any P.
/// A constant feature has std 0 here.
Standardization feature_moments(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data);

/// Collective: feature_moments with std 1 for a constant feature (it is centred only), the
/// scaling --standardize applies.
Standardization fit_standardization(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data);

/// x_j = (x_j - mean_j) / std_j for every row of `data` (local): in place for SliceStorage::f64,
/// else recorded in the slice and applied as its rows are widened (dataset_slice.hpp), with the
/// same bits. A slice is standardised once.
void apply_standardization(const Standardization& s, DatasetSlice& data);

/// Collective: the data checksum described above.
std::string data_checksum(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data);

}  // namespace hpctrain::ml
