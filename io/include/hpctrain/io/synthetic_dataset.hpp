#pragma once
/// @file
/// A synthetic hpctrain data set of any size, written block by block (memory stays bounded):
/// for tests and benchmarks of data larger than memory (`hpctrain data synth`).
///
/// Contents, a pure function of (seed, index, element), so the same options give the same
/// bytes on any machine: sample i has label hash(seed, i) mod classes; its value at element e
/// is its class's prototype value at e (a hash of (seed, class, e) in [0, 63]) plus noise
/// hash(seed, i, e) in [0, 191], so classes are separable over many elements and a model learns
/// them. uint8
/// files store that value (scale 1/255, as Fashion-MNIST); float32 files store value / 255
/// (scale 1).

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/io/dataset.hpp"

namespace hpctrain::io {

struct SynthOptions {
  std::int64_t samples = 0;                        ///< N >= 1
  std::vector<std::int64_t> shape{1, 28, 28};      ///< per-sample dims, each >= 1
  std::int32_t classes = 10;                       ///< >= 1
  std::uint64_t seed = 0;
  SampleType type = SampleType::uint8;
  std::int64_t block_samples = 4096;               ///< samples generated and written per block
};

/// Writes the data set to `out_path` (a temporary name, fsync, rename: never a partial file under
/// the final name). Throws hpctrain::Error naming the option or the file.
DatasetInfo synthesize_dataset(const SynthOptions& options, const std::string& out_path);

/// The bytes the data set's /samples take (N x sample size x element size).
std::uint64_t synthetic_sample_bytes(const SynthOptions& options) noexcept;

}  // namespace hpctrain::io
