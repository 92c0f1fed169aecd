#include "hpctrain/io/fashion_mnist_cache.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/idx_import.hpp"

namespace hpctrain::io {

std::string default_data_dir() {
  if (const char* d = std::getenv("HPCTRAIN_DATA_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/hpctrain";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/hpctrain";
  return "hpctrain-data";
}

std::string ensure_fashion_mnist(const std::string& split, coll::Communicator& comm) {
  const std::string dir = default_data_dir();
  const std::string path = dir + "/fashion-mnist-" + split + ".h5";
  int failed = 0;
  std::string why;
  if (comm.rank() == 0 && !std::filesystem::exists(path)) {
    try {
      std::filesystem::create_directories(dir);
      const auto files = fashion_mnist_idx_files(split);
      std::printf("hpctrain: importing Fashion-MNIST %s split from %s into %s\n", split.c_str(),
                  files.images.c_str(), path.c_str());
      std::fflush(stdout);
      import_idx(files.images, files.labels, path, IdxImportOptions::fashion_mnist());
    } catch (const std::exception& e) {
      failed = 1;
      why = e.what();
    }
  }
  comm.allreduce(&failed, 1, coll::ReduceOp::max);  // the other ranks wait here
  HPCTRAIN_REQUIRE(!failed, comm.rank() == 0 ? "default data set: " + why +
                                                   " (install Debian's dataset-fashion-mnist or pass --data FILE)"
                                             : std::string("default data set: import failed on rank 0"));
  return path;
}

}  // namespace hpctrain::io
