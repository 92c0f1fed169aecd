#include "hpctrain/io/synthetic_dataset.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "appended_dataset.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/h5.hpp"

namespace hpctrain::io {

namespace {

/// splitmix64's finaliser over a chained key: a stateless hash, so any sample can be generated
/// alone and the result does not depend on the block size.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
std::uint64_t hash3(std::uint64_t a, std::uint64_t b, std::uint64_t c) { return mix(mix(mix(a) ^ b) ^ c); }

std::int64_t sample_size(const SynthOptions& o) {
  std::int64_t n = 1;
  for (const std::int64_t d : o.shape) n *= d;
  return n;
}

void check(const SynthOptions& o) {
  HPCTRAIN_REQUIRE(o.samples >= 1, fmt::format("data synth: --samples {} must be at least 1", o.samples));
  HPCTRAIN_REQUIRE(!o.shape.empty() && o.shape.size() <= 3,
                   fmt::format("data synth: --shape has {} dimensions; give 1 to 3 (e.g. 784 or 1,28,28)",
                               o.shape.size()));
  for (const std::int64_t d : o.shape) {
    HPCTRAIN_REQUIRE(d >= 1 && d <= (1 << 20), fmt::format("data synth: --shape dimension {} is not in [1, 2^20]", d));
  }
  HPCTRAIN_REQUIRE(sample_size(o) <= (std::int64_t{1} << 26),
                   fmt::format("data synth: a sample of {} values is too large", sample_size(o)));
  HPCTRAIN_REQUIRE(o.classes >= 1 && o.classes <= 65536,
                   fmt::format("data synth: --classes {} is not in [1, 65536]", o.classes));
  HPCTRAIN_REQUIRE(o.block_samples >= 1, "data synth: block_samples must be at least 1");
}

}  // namespace

std::uint64_t synthetic_sample_bytes(const SynthOptions& o) noexcept {
  return static_cast<std::uint64_t>(o.samples) * static_cast<std::uint64_t>(sample_size(o)) *
         (o.type == SampleType::uint8 ? 1U : 4U);
}

DatasetInfo synthesize_dataset(const SynthOptions& o, const std::string& out_path) {
  check(o);
  const std::int64_t size = sample_size(o);
  StagedFile staged(out_path, "data synth");
  const std::string where = fmt::format("data synth: write '{}'", staged.path());
  // Class prototypes: a hash in [0, 63], so prototype + noise (< 192) stays <= 254; noise is
  // three times the prototype's range, so single pixels say little and a model must combine many.
  std::vector<std::uint8_t> prototype(static_cast<std::size_t>(o.classes * size));
  for (std::int64_t c = 0; c < o.classes; ++c) {
    for (std::int64_t e = 0; e < size; ++e) {
      prototype[static_cast<std::size_t>(c * size + e)] =
          static_cast<std::uint8_t>((hash3(o.seed ^ 0x5eedc1a55ULL, static_cast<std::uint64_t>(c),
                                           static_cast<std::uint64_t>(e)) & 63U));
    }
  }
  {
    H5Lock lock;
    H5File file(HPCTRAIN_CHECK_H5(H5Fcreate(staged.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                  where + ": create file"));
    std::vector<hsize_t> dims(o.shape.begin(), o.shape.end());
    // Chunks of 1024 samples whatever the block size, so the file bytes depend only on the contents.
    const auto chunk = static_cast<hsize_t>(std::min<std::int64_t>(1024, o.samples));
    AppendedDataset samples(file.get(), DatasetFormat::samples,
                            o.type == SampleType::uint8 ? H5T_STD_U8LE : H5T_IEEE_F32LE, dims,
                            chunk, where);
    AppendedDataset labels(file.get(), DatasetFormat::labels, H5T_STD_I32LE, {}, chunk, where);
    std::vector<std::uint8_t> bytes;
    std::vector<float> floats;
    std::vector<std::int32_t> block_labels;
    for (std::int64_t first = 0; first < o.samples; first += o.block_samples) {
      const std::int64_t n = std::min(o.block_samples, o.samples - first);
      bytes.resize(static_cast<std::size_t>(n * size));
      block_labels.resize(static_cast<std::size_t>(n));
      for (std::int64_t k = 0; k < n; ++k) {
        const auto i = static_cast<std::uint64_t>(first + k);
        const auto label = static_cast<std::int32_t>(mix(o.seed ^ mix(i)) % static_cast<std::uint64_t>(o.classes));
        block_labels[static_cast<std::size_t>(k)] = label;
        const std::uint8_t* proto = prototype.data() + static_cast<std::size_t>(label) * static_cast<std::size_t>(size);
        std::uint8_t* out = bytes.data() + static_cast<std::size_t>(k * size);
        for (std::int64_t e = 0; e < size; ++e) {
          out[e] = static_cast<std::uint8_t>(proto[e] + hash3(o.seed, i, static_cast<std::uint64_t>(e)) % 192U);
        }
      }
      if (o.type == SampleType::uint8) {
        samples.append(H5T_NATIVE_UINT8, bytes.data(), static_cast<hsize_t>(n));
      } else {
        floats.resize(bytes.size());
        std::transform(bytes.begin(), bytes.end(), floats.begin(), [](std::uint8_t v) { return v / 255.0f; });
        samples.append(H5T_NATIVE_FLOAT, floats.data(), static_cast<hsize_t>(n));
      }
      labels.append(H5T_NATIVE_INT32, block_labels.data(), static_cast<hsize_t>(n));
    }
    h5_write_attribute(samples.get(), "scale", o.type == SampleType::uint8 ? 1.0 / 255.0 : 1.0);
    const hid_t root = file.get();
    h5_write_attribute(root, "format", std::string(DatasetFormat::format_name));
    h5_write_attribute(root, "format_version", DatasetFormat::version);
    h5_write_attribute(root, "count", o.samples);
    h5_write_attribute(root, "shape", o.shape);
    h5_write_attribute(root, "classes", std::int64_t{o.classes});
    h5_write_attribute(root, "source", fmt::format("hpctrain data synth (seed {}, {} classes, {})", o.seed, o.classes,
                                                   to_string(o.type)));
    HPCTRAIN_CHECK_H5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), where + ": flush");
  }
  staged.commit();
  DatasetInfo info;
  info.path = out_path;
  info.count = o.samples;
  info.sample_shape = o.shape;
  info.sample_size = size;
  info.classes = o.classes;
  info.stored_type = o.type;
  info.scale = o.type == SampleType::uint8 ? 1.0 / 255.0 : 1.0;
  return info;
}

}  // namespace hpctrain::io
