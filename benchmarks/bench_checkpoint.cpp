// bench_checkpoint: write and read bandwidth of hpctrain's sharded HDF5 checkpoints
// (io/checkpoint.hpp) at the launcher's rank count, next to the bound — a plain write()+fsync()
// (and read()) loop over the same bytes per rank — in the same run. See docs/checkpoints.md.
//
//   mpirun -n P build/bin/bench_checkpoint [--sizes=64M,256M] [--dir=/tmp] [--iters=3]
//          [--tensors=16] [--cold=1] [Google Benchmark flags]
//
// Per total state size S (model-like: --tensors float32 tensors of uneven sizes summing to S,
// replicated on every rank, so each rank writes about S/P), four benchmarks, in this order:
//   bound_write/S/P:p       each rank writes S/P bytes to a new file with write() in 8 MiB calls,
//                           then fsync()s it (what dd conv=fsync does)
//   checkpoint_write/S/P:p  io::write_checkpoint: shards, fsync, checksums, agreement,
//                           manifest, renames, directory fsyncs, `latest`
//   bound_read/S/P:p        each rank reads all P bound files (S bytes: a resume needs the
//                           whole replicated state on every rank) with read() in 8 MiB calls
//   checkpoint_read/S/P:p   io::read_checkpoint_tensors of every tensor on every rank
// With --cold=1 (default) the files are dropped from the page cache (fsync, then
// posix_fadvise DONTNEED) before each read iteration, untimed, so reads come from the device.
// Old steps and bound files are deleted between iterations, untimed.
//
// Counters: GB_per_s = bytes / time (writes: S, all ranks together; reads: S per rank, as a
// resume reads it), time = max over ranks, median of the iterations (GB_per_s_best: the best
// one); vs_bound = the checkpoint's GB_per_s over the bound's from the same run (median).
// Knobs: the flags, or HPCTRAIN_BENCH_CKPT_{SIZES,DIR,ITERS,TENSORS,COLD}. 1 GiB:
// --sizes=64M,1G (slow on a small machine, hence not the default).

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "mpi_benchmark.hpp"

namespace {

namespace fs = std::filesystem;
namespace bench = hpctrain::bench;
using hpctrain::coll::Communicator;

struct Options {
  std::vector<std::size_t> sizes{std::size_t{64} << 20, std::size_t{256} << 20};
  std::string dir = "/tmp";
  std::int64_t iters = 3;
  int tensors = 16;
  bool cold = true;
};

constexpr std::size_t kChunkBytes = std::size_t{8} << 20;  // per write()/read() call

std::string size_label(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 30) == 0) return std::to_string(bytes >> 30) + "GiB";
  return std::to_string(bytes >> 20) + "MiB";
}

/// `count` tensors whose sizes follow a model's mix (a few large weight matrices, small
/// biases), summing to `bytes`; deterministic values.
struct State {
  std::vector<std::vector<float>> values;
  std::vector<hpctrain::io::CheckpointTensor> tensors;
  std::vector<hpctrain::io::CheckpointDestination> destinations;
  std::vector<std::vector<float>> read_back;
};

State make_state(std::size_t bytes, int count) {
  State s;
  const std::size_t total = bytes / sizeof(float);
  std::vector<double> weight(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) weight[static_cast<std::size_t>(i)] = i % 2 == 0 ? 1.0 + i : 1e-3;
  double sum = 0;
  for (double w : weight) sum += w;
  std::size_t used = 0;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int i = 0; i < count; ++i) {
    std::size_t n = i + 1 == count ? total - used : static_cast<std::size_t>(weight[static_cast<std::size_t>(i)] / sum * static_cast<double>(total));
    used += n;
    std::vector<float> v(n);
    for (std::size_t k = 0; k < n; k += 997) v[k] = dist(gen);  // touched, not all random: fast setup
    s.values.push_back(std::move(v));
    s.read_back.emplace_back(n);
  }
  for (int i = 0; i < count; ++i) {
    const auto n = static_cast<std::int64_t>(s.values[static_cast<std::size_t>(i)].size());
    const std::string name = "params/" + std::to_string(i / 2) + (i % 2 == 0 ? ".dense.weight" : ".dense.bias");
    s.tensors.push_back({name, {n}, s.values[static_cast<std::size_t>(i)].data()});
    s.destinations.push_back({name, {n}, s.read_back[static_cast<std::size_t>(i)].data()});
  }
  return s;
}

/// Writes `bytes` of `data` to a new file `path` and fsyncs it.
void plain_write(const std::string& path, const char* data, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  HPCTRAIN_REQUIRE(fd >= 0, "cannot create '" + path + "'");
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, data + done, std::min(kChunkBytes, bytes - done));
    HPCTRAIN_REQUIRE(n > 0, "write to '" + path + "' failed");
    done += static_cast<std::size_t>(n);
  }
  HPCTRAIN_REQUIRE(::fsync(fd) == 0 && ::close(fd) == 0, "fsync of '" + path + "' failed");
}

std::size_t plain_read(const std::string& path, char* buffer, std::size_t capacity) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  HPCTRAIN_REQUIRE(fd >= 0, "cannot open '" + path + "'");
  std::size_t done = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buffer + done, std::min(kChunkBytes, capacity - done));
    HPCTRAIN_REQUIRE(n >= 0, "read of '" + path + "' failed");
    if (n == 0 || done + static_cast<std::size_t>(n) >= capacity) {
      done += static_cast<std::size_t>(n);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return done;
}

/// Drops every regular file under `dir` from the page cache (after writing back any dirty
/// pages): the next read comes from the device.
void evict(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

/// The bound's median GB/s per (kind, size), for the checkpoint benchmarks' vs_bound.
std::map<std::string, double>& bound_rates() {
  static std::map<std::string, double> r;
  return r;
}

void report(benchmark::State& state, const std::vector<double>& times_s, double bytes, const std::string& bound_key,
            bool is_bound, int ranks) {
  const bench::TimeStats t = bench::summarize(times_s);
  const double rate = t.median_s > 0 ? bytes / t.median_s / 1e9 : 0.0;
  state.counters["GB_per_s"] = rate;
  state.counters["GB_per_s_best"] = t.min_s > 0 ? bytes / t.min_s / 1e9 : 0.0;
  state.counters["bytes"] = bytes;
  state.counters["ranks"] = ranks;
  if (is_bound) {
    bound_rates()[bound_key] = rate;
  } else if (auto it = bound_rates().find(bound_key); it != bound_rates().end() && it->second > 0) {
    state.counters["vs_bound"] = rate / it->second;
  }
}

void register_size(const Options& o, std::size_t bytes, Communicator& comm) {
  const int P = comm.size(), rank = comm.rank();
  const std::string label = size_label(bytes) + "/P:" + std::to_string(P);
  const std::string root = o.dir + "/hpctrain-bench-ckpt-" + size_label(bytes);
  auto* comm_ptr = &comm;
  const Options* opt = &o;

  benchmark::RegisterBenchmark(("bound_write/" + label).c_str(), [=](benchmark::State& state) {
    const std::size_t mine = bytes * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(P) -
                             bytes * static_cast<std::size_t>(rank) / static_cast<std::size_t>(P);
    std::vector<char> data(mine, 1);
    const std::string path = root + "/bound-" + std::to_string(rank);
    if (rank == 0) fs::create_directories(root);
    comm_ptr->barrier();
    const auto times = bench::timed_loop(
        state, MPI_COMM_WORLD, [&] { plain_write(path, data.data(), mine); },
        [&](benchmark::IterationCount, benchmark::IterationCount) { ::unlink(path.c_str()); });
    report(state, times, static_cast<double>(bytes), "write/" + label, true, P);
  })->Iterations(o.iters)->UseManualTime()->Unit(benchmark::kMillisecond);

  benchmark::RegisterBenchmark(("checkpoint_write/" + label).c_str(), [=](benchmark::State& state) {
    State s = make_state(bytes, opt->tensors);
    const std::string dir = root + "/ckpt";
    std::int64_t step = 0;
    const auto times = bench::timed_loop(
        state, MPI_COMM_WORLD,
        [&] { hpctrain::io::write_checkpoint(*comm_ptr, dir, ++step, {{"bench", true}}, s.tensors, 1000); },
        [&](benchmark::IterationCount, benchmark::IterationCount) {
          if (rank == 0 && step > 0) fs::remove_all(dir + "/step-" + std::to_string(step));
        });
    report(state, times, static_cast<double>(bytes), "write/" + label, false, P);
  })->Iterations(o.iters)->UseManualTime()->Unit(benchmark::kMillisecond);

  benchmark::RegisterBenchmark(("bound_read/" + label).c_str(), [=](benchmark::State& state) {
    // The files the bound_write benchmark leaves (written again here in case it was filtered out).
    const std::size_t mine = bytes * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(P) -
                             bytes * static_cast<std::size_t>(rank) / static_cast<std::size_t>(P);
    if (rank == 0) fs::create_directories(root);
    comm_ptr->barrier();
    {
      std::vector<char> data(mine, 1);
      plain_write(root + "/bound-" + std::to_string(rank), data.data(), mine);
    }
    comm_ptr->barrier();
    std::vector<char> buffer(bytes / static_cast<std::size_t>(P) + 4096);
    std::size_t got = 0;
    const auto times = bench::timed_loop(
        state, MPI_COMM_WORLD,
        [&] {
          got = 0;
          for (int r = 0; r < P; ++r) got += plain_read(root + "/bound-" + std::to_string(r), buffer.data(), buffer.size());
        },
        [&](benchmark::IterationCount, benchmark::IterationCount) {
          comm_ptr->barrier();
          if (opt->cold && rank == 0) evict(root);
          comm_ptr->barrier();
        });
    HPCTRAIN_REQUIRE(got == bytes, "bound_read read " + std::to_string(got) + " bytes, expected " + std::to_string(bytes));
    report(state, times, static_cast<double>(bytes), "read/" + label, true, P);
    comm_ptr->barrier();
    ::unlink((root + "/bound-" + std::to_string(rank)).c_str());
  })->Iterations(o.iters)->UseManualTime()->Unit(benchmark::kMillisecond);

  benchmark::RegisterBenchmark(("checkpoint_read/" + label).c_str(), [=](benchmark::State& state) {
    State s = make_state(bytes, opt->tensors);
    const std::string dir = root + "/ckpt-read";
    const auto written = hpctrain::io::write_checkpoint(*comm_ptr, dir, 1, {}, s.tensors, 1);
    const auto times = bench::timed_loop(
        state, MPI_COMM_WORLD, [&] { hpctrain::io::read_checkpoint_tensors(written.path, s.destinations); },
        [&](benchmark::IterationCount, benchmark::IterationCount) {
          comm_ptr->barrier();
          if (opt->cold && rank == 0) evict(dir);
          comm_ptr->barrier();
        });
    for (std::size_t i = 0; i < s.values.size(); ++i) {
      HPCTRAIN_REQUIRE(s.values[i] == s.read_back[i], "checkpoint_read: tensor " + std::to_string(i) + " differs");
    }
    report(state, times, static_cast<double>(bytes), "read/" + label, false, P);
    comm_ptr->barrier();
    if (rank == 0) fs::remove_all(root);
  })->Iterations(o.iters)->UseManualTime()->Unit(benchmark::kMillisecond);
}

std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(bench::parse_bytes(item, "--sizes"));
  }
  HPCTRAIN_REQUIRE(!out.empty(), "--sizes: no size given");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::MpiSession mpi(argc, argv);
  Options o;
  try {
    if (auto v = bench::flag_or_env(bench::take_flag(argc, argv, "sizes"), "HPCTRAIN_BENCH_CKPT_SIZES")) o.sizes = parse_sizes(*v);
    if (auto v = bench::flag_or_env(bench::take_flag(argc, argv, "dir"), "HPCTRAIN_BENCH_CKPT_DIR")) o.dir = *v;
    if (auto v = bench::flag_or_env(bench::take_flag(argc, argv, "iters"), "HPCTRAIN_BENCH_CKPT_ITERS")) o.iters = std::stoll(*v);
    if (auto v = bench::flag_or_env(bench::take_flag(argc, argv, "tensors"), "HPCTRAIN_BENCH_CKPT_TENSORS")) o.tensors = std::stoi(*v);
    if (auto v = bench::flag_or_env(bench::take_flag(argc, argv, "cold"), "HPCTRAIN_BENCH_CKPT_COLD")) o.cold = *v != "0";
    HPCTRAIN_REQUIRE(o.iters >= 1 && o.tensors >= 1, "--iters and --tensors must be at least 1");
  } catch (const std::exception& e) {
    if (bench::rank_of(MPI_COMM_WORLD) == 0) std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    return 2;
  }
  try {
    // Per size S, one at a time: the state and its read-back copy (2 S on every rank: the state
    // is replicated) and the bound's buffers (2 S / P).
    const std::size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
    const double ranks = bench::size_of(MPI_COMM_WORLD);
    bench::require_memory_for("--sizes=" + hpctrain::io::format_bytes(static_cast<double>(largest)),
                              "the replicated state and its read-back copy",
                              2.0 * static_cast<double>(largest) * (1.0 + 1.0 / ranks), MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    hpctrain::abort_job(e, 2);
  }
  Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
  for (std::size_t bytes : o.sizes) register_size(o, bytes, comm);
  const bool ok = bench::run_benchmarks(argc, argv, MPI_COMM_WORLD);
  comm.barrier();
  if (comm.rank() == 0) {  // what a --benchmark_filter run left behind
    std::error_code ec;
    for (std::size_t bytes : o.sizes) fs::remove_all(o.dir + "/hpctrain-bench-ckpt-" + size_label(bytes), ec);
  }
  return ok ? 0 : 1;
}
