// Command-line access to the io library for tests driven from Python (h5py, numpy):
//   io_test_tool import <images> <labels> <out.h5> [uint8|float32] [limit]
//   io_test_tool read <data.h5> <index>...        one line per index: label, then the values
//   io_test_tool permutation <N> <seed> <epoch>   the epoch permutation, space-separated
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpctrain/io/epoch_plan.hpp"
#include "hpctrain/io/idx_import.hpp"

namespace io = hpctrain::io;

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "import" && argc >= 5) {
      io::IdxImportOptions opts = io::IdxImportOptions::fashion_mnist();
      if (argc > 5) opts.sample_type = std::string(argv[5]) == "float32" ? io::SampleType::float32
                                                                          : io::SampleType::uint8;
      if (argc > 6) opts.limit = std::atoll(argv[6]);
      auto r = io::import_idx(argv[2], argv[3], argv[4], opts);
      std::printf("%lld\n", static_cast<long long>(r.count));
      return 0;
    }
    if (cmd == "read" && argc >= 3) {
      io::DatasetReader reader(argv[2]);
      std::vector<std::int64_t> idx;
      for (int i = 3; i < argc; ++i) idx.push_back(std::atoll(argv[i]));
      std::vector<float> s;
      std::vector<std::int32_t> l;
      reader.read(idx, s, l);
      const auto n = static_cast<std::size_t>(reader.info().sample_size);
      for (std::size_t k = 0; k < idx.size(); ++k) {
        std::printf("%d", l[k]);
        for (std::size_t e = 0; e < n; ++e) std::printf(" %.9g", static_cast<double>(s[k * n + e]));
        std::printf("\n");
      }
      return 0;
    }
    if (cmd == "permutation" && argc == 5) {
      auto p = io::epoch_permutation(std::atoll(argv[2]), std::strtoull(argv[3], nullptr, 10),
                                     std::atoll(argv[4]));
      for (std::size_t i = 0; i < p.size(); ++i) {
        std::printf(i ? " %lld" : "%lld", static_cast<long long>(p[i]));
      }
      std::printf("\n");
      return 0;
    }
    std::fprintf(stderr, "usage: io_test_tool import|read|permutation ...\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
