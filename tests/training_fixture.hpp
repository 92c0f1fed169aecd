#pragma once
// Shared by the MPI tests that train on real data: a Fashion-MNIST subset imported once per
// job by rank 0 into a fresh temporary directory, and a gtest environment that initialises
// Kokkos and removes the directory at the end.

#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "hpctrain/io/idx_import.hpp"

namespace hpctrain::testing {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// Directory (same on every rank) holding train.h5 (the first `train_samples` of the training
/// split) and, when `test_samples` > 0, test.h5. Collective on the first call.
inline std::string import_fashion_subsets(const char* prefix, std::int64_t train_samples,
                                          std::int64_t test_samples) {
  char buf[256] = {};
  if (world_rank() == 0) {
    std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
    std::snprintf(buf, sizeof buf, "%s", mkdtemp(tmpl.data()));
    auto options = io::IdxImportOptions::fashion_mnist();
    options.limit = train_samples;
    const auto tr = io::fashion_mnist_idx_files("train");
    io::import_idx(tr.images, tr.labels, std::string(buf) + "/train.h5", options);
    if (test_samples > 0) {
      options.limit = test_samples;
      const auto te = io::fashion_mnist_idx_files("test");
      io::import_idx(te.images, te.labels, std::string(buf) + "/test.h5", options);
    }
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  return buf;
}

/// Kokkos up for the whole test program; `dir()` removed by rank 0 at the end.
class KokkosDataEnvironment : public ::testing::Environment {
 public:
  explicit KokkosDataEnvironment(const std::string& (*dir)()) : dir_(dir) {}
  void SetUp() override { Kokkos::initialize(); }
  void TearDown() override {
    Kokkos::finalize();
    if (world_rank() == 0) std::filesystem::remove_all(dir_());
  }

 private:
  const std::string& (*dir_)();
};

}  // namespace hpctrain::testing
