// libFuzzer target: the checkpoint manifest reader and validator (read_manifest and
// verify_checkpoint in io/src/checkpoint.cpp; `hpctrain ckpt inspect` and resume run them on
// every candidate step). The input is a step directory's manifest.json; verify_checkpoint must
// report problems, never crash, throw or allocate what the manifest claims. The step directory
// also holds one small file, "shard-00000-of-00001.h5", so manifests naming it reach the size
// and checksum checks.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "fuzz_files.hpp"
#include "hpctrain/collectives/error.hpp"
#include "hpctrain/io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  static const fs::path step = [] {
    fs::path d = hpctrain::fuzz::scratch_dir() / "step-1";
    fs::create_directories(d);
    const std::uint8_t shard[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    hpctrain::fuzz::write_file(d / "shard-00000-of-00001.h5", shard, sizeof shard);
    return d;
  }();
  hpctrain::fuzz::write_file(step / "manifest.json", data, size);
  // verify_checkpoint promises to turn every problem into a CheckpointProblem: an exception
  // escaping it is a finding (std::terminate through libFuzzer).
  const auto problems = hpctrain::io::verify_checkpoint(step.string(), std::int64_t{1} << 20);
  if (problems.empty()) {
    // A manifest that verifies is then used: its warning and its tensor list.
    const auto m = hpctrain::io::read_manifest(step.string());
    (void)hpctrain::io::manifest_warning(m);
    (void)hpctrain::io::checkpoint_tensor_list(m);
  }
  return 0;
}
