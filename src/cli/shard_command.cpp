#include "shard_command.hpp"

#include <chrono>
#include <cstdio>

namespace hpctrain::cli {

CLI::App* add_shard_command(CLI::App& data, ShardArgs& a) {
  CLI::App* c = data.add_subcommand(
      "shard",
      "Split a data set file into K shard files of contiguous samples plus an index.json, in a new directory. "
      "`train`, `predict` and `--eval-data` accept the directory wherever they accept a file; each rank then opens "
      "only the shards its batches need, and the samples keep their global indices (same epochs, same results)");
  c->add_option("--in", a.in, "Input data set file (hpctrain HDF5 format; with /labels, or /targets for regression)")->required();
  c->add_option("--shards", a.options.shards, "Number of shard files K (each holds N/K samples, +-1)")
      ->required()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  c->add_option("--out", a.out,
                "Output directory; must not exist (written under a temporary name, then renamed)")
      ->required();
  return c;
}

int run_shard(const ShardArgs& a, coll::Communicator& comm) {
  if (comm.rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    const io::ShardResult r = io::split_dataset(a.in, a.out, a.options);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Shards hold floor(N/K) or that + 1 samples; the first one the fewer.
    std::printf("hpctrain: wrote %s: %zu shards of %lld samples in all (%lld to %lld each), %.1f MiB, in %.1f s\n",
                a.out.c_str(), r.index.shards.size(), static_cast<long long>(r.index.info.count),
                static_cast<long long>(r.index.info.count / static_cast<std::int64_t>(r.index.shards.size())),
                static_cast<long long>(r.index.shards.back().count), static_cast<double>(r.bytes) / (1 << 20), s);
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

}  // namespace hpctrain::cli
