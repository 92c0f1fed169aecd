// Every rank opens the data set and prefetches its shares of an epoch; the gathered shares
// (sample indices in order, labels, a checksum of each sample's values) equal what rank 0 reads
// alone with a one-rank plan. Run at np 1..4.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "hpctrain/io/idx_import.hpp"
#include "hpctrain/io/prefetcher.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Position-weighted sum: a permutation of a sample's values changes it.
double checksum(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t e = 0; e < n; ++e) s += static_cast<double>(x[e]) * static_cast<double>(e % 13 + 1);
  return s;
}

/// Gathers every rank's vector on all ranks, concatenated in rank order.
template <class T>
std::vector<T> allgatherv(const std::vector<T>& mine, MPI_Datatype type) {
  const int p = world_size();
  int n = static_cast<int>(mine.size());
  std::vector<int> counts(p), displs(p, 0);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 1; r < p; ++r) displs[r] = displs[r - 1] + counts[r - 1];
  std::vector<T> all(static_cast<std::size_t>(displs[p - 1] + counts[p - 1]));
  MPI_Allgatherv(mine.data(), n, type, all.data(), counts.data(), displs.data(), type,
                 MPI_COMM_WORLD);
  return all;
}

/// A data set made by rank 0 (the first 1000 Fashion-MNIST test images), path on every rank.
class SharedDataset {
 public:
  SharedDataset() {
    char buf[4096] = {0};
    if (world_rank() == 0) {
      // Failures become an empty path on every rank, so no rank waits in MPI_Bcast forever.
      try {
        dir_ = std::make_unique<io::test::TempDir>();
        auto files = io::fashion_mnist_idx_files("test", HPCTRAIN_FASHION_MNIST_DIR);
        io::IdxImportOptions opts = io::IdxImportOptions::fashion_mnist();
        opts.limit = 1000;
        io::import_idx(files.images, files.labels, dir_->file("fm.h5"), opts);
        std::snprintf(buf, sizeof buf, "%s", dir_->file("fm.h5").c_str());
      } catch (const std::exception& e) {
        ADD_FAILURE() << "import on rank 0: " << e.what();
      }
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = buf;
  }
  ~SharedDataset() { MPI_Barrier(MPI_COMM_WORLD); }  // nobody reads when rank 0 deletes it
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<io::test::TempDir> dir_;
  std::string path_;
};

}  // namespace

TEST(ShardedRead, GatheredSharesEqualTheSingleRankEpoch) {
  SharedDataset data;
  ASSERT_FALSE(data.path().empty());  // the same on every rank
  io::DatasetReader reader(data.path());
  EXPECT_EQ(reader.info().count, 1000);
  const int rank = world_rank(), world = world_size();
  const std::size_t ss = static_cast<std::size_t>(reader.info().sample_size);

  for (const std::int64_t global_batch : {64, 10}) {
    for (const bool drop_last : {false, true}) {
      const io::EpochPlan plan(1000, global_batch, rank, world, 2024, drop_last);
      const io::EpochPlan single(1000, global_batch, 0, 1, 2024, drop_last);
      for (const std::int64_t epoch : {0, 3}) {
        SCOPED_TRACE(::testing::Message() << "B=" << global_batch << " drop_last=" << drop_last
                                          << " epoch=" << epoch);
        io::Prefetcher pf(reader, plan, epoch, 0, 2);
        std::int64_t batches = 0;
        std::vector<std::int64_t> seen;
        while (auto b = pf.next()) {
          std::vector<double> sums(b->count);
          for (std::size_t k = 0; k < b->count; ++k) sums[k] = checksum(&b->samples[k * ss], ss);
          auto all_idx = allgatherv(b->sample_indices, MPI_INT64_T);
          auto all_lab = allgatherv(b->labels, MPI_INT32_T);
          auto all_sum = allgatherv(sums, MPI_DOUBLE);
          if (rank == 0) {
            io::Batch ref = io::read_batch(reader, single, epoch, b->global_batch_index);
            // EXPECT, not ASSERT: returning early on one rank would leave the others waiting
            // in the next collective.
            EXPECT_EQ(all_idx, ref.sample_indices) << "batch " << b->global_batch_index;
            EXPECT_EQ(all_lab, ref.labels) << "batch " << b->global_batch_index;
            std::size_t bad = 0;
            for (std::size_t k = 0; k < ref.count && k < all_sum.size(); ++k) {
              bad += all_sum[k] != checksum(&ref.samples[k * ss], ss);
            }
            EXPECT_EQ(all_sum.size(), ref.count);
            EXPECT_EQ(bad, 0u) << "samples whose values differ in batch " << b->global_batch_index;
          }
          seen.insert(seen.end(), all_idx.begin(), all_idx.end());
          ++batches;
        }
        EXPECT_EQ(batches, single.batches_per_epoch());
        std::sort(seen.begin(), seen.end());
        EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "a repeat";
        EXPECT_EQ(static_cast<std::int64_t>(seen.size()), single.samples_per_epoch());
      }
    }
  }
}

TEST(ShardedRead, EveryRankReportsAMissingFile) {
  const std::string path = "/nonexistent/hpctrain/fm.h5";
  try {
    io::DatasetReader reader(path);
    ADD_FAILURE() << "no exception on rank " << world_rank();
  } catch (const hpctrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data set '" + path + "': no such file"),
              std::string::npos)
        << e.what();
  }
}
