// --standardize and the data checksum of the fitters; see feature_scaling.hpp.
#include "hpctrain/ml/feature_scaling.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/ml/exact_block_sum.hpp"

namespace hpctrain::ml {

namespace {

/// f(row) for each row of `data` in [first, first + count), in order, as f64 (widened
/// kWidenBlockRows at a time into `widened`, kWidenBlockRows x d).
template <typename F>
void for_widened_rows(const DatasetSlice& data, std::int64_t first, std::int64_t count, std::vector<double>& widened,
                      F&& f) {
  const std::int64_t d = data.features;
  for (std::int64_t at = first; at < first + count; at += kWidenBlockRows) {
    const std::int64_t n = std::min(kWidenBlockRows, first + count - at);
    const double* x = data.rows_f64(at, n, widened.data());
    for (std::int64_t i = 0; i < n; ++i) f(x + i * d);
  }
}

}  // namespace

Standardization fit_standardization(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data) {
  const std::int64_t d = data.features;
  const auto width = static_cast<std::size_t>(d);
  const auto n = static_cast<double>(part.total_samples);
  Standardization s;
  std::vector<double> widened(static_cast<std::size_t>(kWidenBlockRows * d));
  s.mean = exact_sum_over_samples(comm, part, width, [&](std::int64_t first, std::int64_t count, double* term) {
    for_widened_rows(data, first, count, widened, [&](const double* x) {
      for (std::int64_t j = 0; j < d; ++j) term[j] += x[j];
    });
  });
  for (auto& m : s.mean) m /= n;
  s.std = exact_sum_over_samples(comm, part, width, [&](std::int64_t first, std::int64_t count, double* term) {
    for_widened_rows(data, first, count, widened, [&](const double* x) {
      for (std::int64_t j = 0; j < d; ++j) {
        const double t = x[j] - s.mean[static_cast<std::size_t>(j)];
        term[j] += t * t;
      }
    });
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
  std::vector<double> widened(static_cast<std::size_t>(kWidenBlockRows * data.features));
  for (std::int64_t b = 0; b < part.block_count; ++b) {
    XXH3_64bits_reset(state.get());
    const std::int64_t first = part.block_begin(b), count = part.block_length(b);
    for (std::int64_t at = first; at < first + count; at += kWidenBlockRows) {
      const std::int64_t n = std::min(kWidenBlockRows, first + count - at);
      XXH3_64bits_update(state.get(), data.rows_f64(at, n, widened.data()),
                         static_cast<std::size_t>(n * data.features) * sizeof(double));
    }
    const std::uint64_t h = XXH3_64bits_digest(state.get());
    std::memcpy(&hashes[static_cast<std::size_t>(part.first_block + b)], &h, sizeof h);
  }
  comm.allreduce(hashes.data(), hashes.size(), coll::ReduceOp::sum);
  return fmt::format("xxh3:{:016x}", XXH3_64bits(hashes.data(), hashes.size() * sizeof(std::int64_t)));
}

}  // namespace hpctrain::ml
