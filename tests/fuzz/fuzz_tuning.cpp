// libFuzzer target: the tuning file parser (Tuning::from_file, HPCTRAIN_TUNING_FILE). Any input
// must either parse or throw hpctrain::Error; a parsed file must drive the cost model and
// survive a round trip (to_json, parsed again). Anything else (a crash, another exception, a
// sanitizer report, a round trip that fails) is a finding.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_files.hpp"
#include "hpctrain/collectives/error.hpp"
#include "hpctrain/collectives/tuning.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using hpctrain::coll::Tuning;
  const auto path = hpctrain::fuzz::scratch_dir() / "tuning.json";
  hpctrain::fuzz::write_file(path, data, size);
  Tuning t;
  try {
    t = Tuning::from_file(path.string());
  } catch (const hpctrain::Error&) {
    return 0;  // rejected with a message: fine
  }
  // What `auto` does with a parsed file: predictions for a few sizes and layouts.
  for (std::size_t bytes : {std::size_t{0}, std::size_t{4096}, std::size_t{1} << 24}) {
    for (int ranks : {1, 2, 3, 8}) {
      (void)t.choose_allreduce(bytes, ranks, ranks);
      (void)t.choose_allreduce(bytes, ranks, 2);
    }
  }
  const std::string text = t.to_json("{}");
  const auto again = hpctrain::fuzz::scratch_dir() / "tuning-again.json";
  hpctrain::fuzz::write_file(again, reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
  try {
    (void)Tuning::from_file(again.string());
  } catch (const hpctrain::Error& e) {
    std::fprintf(stderr, "round trip failed: %s\nwritten:\n%s\n", e.what(), text.c_str());
    std::abort();
  }
  return 0;
}
