#include "synth_command.hpp"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "hpctrain/base/error.hpp"

namespace hpctrain::cli {

CLI::App* add_synth_command(CLI::App& data, SynthArgs& a) {
  CLI::App* c = data.add_subcommand(
      "synth", "Write a synthetic data set of any size, block by block (bounded memory): labelled samples near "
               "per-class prototypes, the same bytes for the same options (for out-of-core tests and benchmarks)");
  c->add_option("--samples", a.options.samples, "Number of samples N")->required()->check(CLI::Range(1LL, 1LL << 40));
  c->add_option("--shape", a.shape, "Per-sample dimensions, comma-separated (784, or 1,28,28 for the CNN)")
      ->capture_default_str();
  c->add_option("--classes", a.options.classes, "Number of classes")->check(CLI::Range(1, 65536))->capture_default_str();
  c->add_option("--seed", a.options.seed, "Seed: the contents are a function of (seed, index, element)")
      ->capture_default_str();
  c->add_option("--dtype", a.dtype, "Stored type of /samples: uint8 (1 byte per value) or float32")
      ->check(CLI::IsMember({"uint8", "float32"}))
      ->capture_default_str();
  c->add_option("--out", a.out, "Output HDF5 file (written under a temporary name, then renamed)")->required();
  return c;
}

namespace {

std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    HPCTRAIN_REQUIRE(used == item.size() && !item.empty(),
                     "data synth: --shape '" + text + "': '" + item + "' is not an integer");
    dims.push_back(v);
  }
  return dims;
}

}  // namespace

int run_synth(SynthArgs& a, coll::Communicator& comm) {
  if (comm.rank() == 0) {
    a.options.shape = parse_shape(a.shape);
    a.options.type = a.dtype == "float32" ? io::SampleType::float32 : io::SampleType::uint8;
    const auto start = std::chrono::steady_clock::now();
    const auto info = io::synthesize_dataset(a.options, a.out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double mib = static_cast<double>(io::synthetic_sample_bytes(a.options)) / (1 << 20);
    std::printf("hpctrain: wrote %s: %lld samples of shape %s (%s), %d classes, %.1f MiB of samples in %.1f s\n",
                a.out.c_str(), static_cast<long long>(info.count), a.shape.c_str(), a.dtype.c_str(), info.classes, mib,
                s);
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

}  // namespace hpctrain::cli
