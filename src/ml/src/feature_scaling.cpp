// --standardize and the data checksum of the fitters; see feature_scaling.hpp.
#include "hpctrain/ml/feature_scaling.hpp"

#include <xxhash.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/ml/exact_block_sum.hpp"

namespace hpctrain::ml {

Standardization feature_moments(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data) {
  const std::int64_t d = data.features;
  const auto width = static_cast<std::size_t>(d);
  const auto n = static_cast<double>(part.total_samples);
  Standardization s;
  std::vector<double> widened;
  s.mean = exact_sum_over_samples(comm, part, width, [&](std::int64_t first, std::int64_t count, double* term) {
    for_each_f64_block(data, first, count, kWidenBlockRows, widened, [&](const double* x, std::int64_t, std::int64_t rows) {
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < d; ++j) term[j] += x[i * d + j];
      }
    });
  });
  for (auto& m : s.mean) m /= n;
  s.std = exact_sum_over_samples(comm, part, width, [&](std::int64_t first, std::int64_t count, double* term) {
    for_each_f64_block(data, first, count, kWidenBlockRows, widened, [&](const double* x, std::int64_t, std::int64_t rows) {
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < d; ++j) {
          const double t = x[i * d + j] - s.mean[static_cast<std::size_t>(j)];
          term[j] += t * t;
        }
      }
    });
  });
  for (auto& v : s.std) v = std::sqrt(v / n);
  return s;
}

Standardization fit_standardization(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data) {
  Standardization s = feature_moments(comm, part, data);
  for (auto& v : s.std) {
    if (!(v > 0.0)) v = 1.0;  // a constant feature is centred only
  }
  return s;
}

void apply_standardization(const Standardization& s, DatasetSlice& data) {
  const std::int64_t d = data.features;
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(s.mean.size()) == d && static_cast<std::int64_t>(s.std.size()) == d,
                   fmt::format("standardize: {} means for samples of {} values (data set '{}')", s.mean.size(), d,
                               data.path));
  if (data.storage != SliceStorage::f64) {  // applied as the rows are widened, in the same arithmetic
    HPCTRAIN_REQUIRE(data.standardize_mean.empty(), fmt::format("standardize: data set '{}' is standardised already",
                                                                data.path));
    data.standardize_mean = s.mean;
    data.standardize_std = s.std;
    return;
  }
  for (std::int64_t i = 0; i < data.rows; ++i) {
    double* x = data.samples.data() + i * d;
    for (std::int64_t j = 0; j < d; ++j) {
      x[j] = (x[j] - s.mean[static_cast<std::size_t>(j)]) / s.std[static_cast<std::size_t>(j)];
    }
  }
}

std::string data_checksum(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data) {
  // One slot per block, written by its owner: the int64 all-reduce adds zeros only (exact).
  // A block's hash is of its f64 values; a uint8 slice's are hashed as widened, 64 rows at a
  // time, by XXH3's streaming interface (the same hash as of the block in one piece).
  std::vector<std::int64_t> hashes(static_cast<std::size_t>(part.total_blocks), 0);
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  HPCTRAIN_REQUIRE(state != nullptr, "data checksum: out of memory");
  std::vector<double> widened;
  for (std::int64_t b = 0; b < part.block_count; ++b) {
    XXH3_64bits_reset(state.get());
    for_each_f64_block(data, part.block_begin(b), part.block_length(b), kWidenBlockRows, widened,
                       [&](const double* x, std::int64_t, std::int64_t rows) {
                         XXH3_64bits_update(state.get(), x, static_cast<std::size_t>(rows * data.features) * sizeof(double));
                       });
    const std::uint64_t h = XXH3_64bits_digest(state.get());
    std::memcpy(&hashes[static_cast<std::size_t>(part.first_block + b)], &h, sizeof h);
  }
  comm.allreduce(hashes.data(), hashes.size(), coll::ReduceOp::sum);
  return fmt::format("xxh3:{:016x}", XXH3_64bits(hashes.data(), hashes.size() * sizeof(std::int64_t)));
}

}  // namespace hpctrain::ml
