// --standardize and the data checksum of the fitters; see feature_scaling.hpp.
#include "hpctrain/ml/feature_scaling.hpp"

#include <xxhash.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/ml/exact_block_sum.hpp"

namespace hpctrain::ml {

Standardization fit_standardization(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data) {
  const std::int64_t d = data.features;
  const auto width = static_cast<std::size_t>(d);
  const auto n = static_cast<double>(part.total_samples);
  Standardization s;
  s.mean = exact_sum_over_samples(comm, part, width, [&](std::int64_t first, std::int64_t count, double* term) {
    for (std::int64_t i = first; i < first + count; ++i) {
      for (std::int64_t j = 0; j < d; ++j) term[j] += data.row(i)[j];
    }
  });
  for (auto& m : s.mean) m /= n;
  s.std = exact_sum_over_samples(comm, part, width, [&](std::int64_t first, std::int64_t count, double* term) {
    for (std::int64_t i = first; i < first + count; ++i) {
      for (std::int64_t j = 0; j < d; ++j) {
        const double t = data.row(i)[j] - s.mean[static_cast<std::size_t>(j)];
        term[j] += t * t;
      }
    }
  });
  for (auto& v : s.std) {
    v = std::sqrt(v / n);
    if (!(v > 0.0)) v = 1.0;  // a constant feature is centred only
  }
  return s;
}

void apply_standardization(const Standardization& s, DatasetSlice& data) {
  const std::int64_t d = data.features;
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(s.mean.size()) == d && static_cast<std::int64_t>(s.std.size()) == d,
                   fmt::format("standardize: {} means for samples of {} values (data set '{}')", s.mean.size(), d,
                               data.path));
  for (std::int64_t i = 0; i < data.rows; ++i) {
    double* x = data.samples.data() + i * d;
    for (std::int64_t j = 0; j < d; ++j) {
      x[j] = (x[j] - s.mean[static_cast<std::size_t>(j)]) / s.std[static_cast<std::size_t>(j)];
    }
  }
}

std::string data_checksum(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data) {
  // One slot per block, written by its owner: the int64 all-reduce adds zeros only (exact).
  std::vector<std::int64_t> hashes(static_cast<std::size_t>(part.total_blocks), 0);
  for (std::int64_t b = 0; b < part.block_count; ++b) {
    const std::uint64_t h = XXH3_64bits(data.row(part.block_begin(b)),
                                        static_cast<std::size_t>(part.block_length(b) * data.features) * sizeof(double));
    std::memcpy(&hashes[static_cast<std::size_t>(part.first_block + b)], &h, sizeof h);
  }
  comm.allreduce(hashes.data(), hashes.size(), coll::ReduceOp::sum);
  return fmt::format("xxh3:{:016x}", XXH3_64bits(hashes.data(), hashes.size() * sizeof(std::int64_t)));
}

}  // namespace hpctrain::ml
