#pragma once
/// @file
/// The output file of `hpctrain predict`, written by all ranks with parallel HDF5.
///
/// Layout:
///   /predictions    int32, N: the class with the largest logit
///   /probabilities  float32, N x classes: softmax of the logits
///   root attributes: `format` = "hpctrain-predictions", `format_version` = 1,
///     `checkpoint` (the step directory), `checkpoint_step`, `checkpoint_checksum`
///     ("xxh3:..." of the parameters, as `hpctrain train` prints it), `model` (the model config
///     as JSON text), `data` (the input file), `normalize_mean`, `normalize_std`, `batch`.
/// Both datasets are contiguous (no filters), so every rank writes its rows collectively.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/h5.hpp"

namespace hpctrain::serve {

/// Where the predictions came from (written as root attributes).
struct PredictionProvenance {
  std::string checkpoint;
  std::int64_t checkpoint_step = 0;
  std::string checkpoint_checksum;
  std::string model;  ///< JSON text
  std::string data;
  double normalize_mean = 0.0, normalize_std = 1.0;
  std::int64_t batch = 0;
};

/// A predictions file being written. The ranks write into a temporary file next to `path`
/// (".<name>.tmp-<pid of rank 0>"); commit() closes it, lets rank 0 add the attributes, fsync
/// and rename it to `path` and fsync the directory, so `path` is either the old file or the
/// complete new one. Without commit() (an error) rank 0 removes the temporary file.
class PredictionFile {
 public:
  /// Collective over `comm` and `mpi_comm` (the same ranks). Rank 0 checks the output
  /// directory; every rank learns its verdict (errors name `path`).
  PredictionFile(coll::Communicator& comm, MPI_Comm mpi_comm, const std::string& path, std::int64_t rows,
                 std::int64_t classes);
  ~PredictionFile();
  PredictionFile(const PredictionFile&) = delete;
  PredictionFile& operator=(const PredictionFile&) = delete;

  /// Collective: this rank's rows [first_row, first_row + rows) (rows may be 0).
  void write(std::int64_t first_row, std::int64_t rows, const std::int32_t* predictions, const float* probabilities);
  /// Collective: closes, stamps `provenance`, commits atomically.
  void commit(const PredictionProvenance& provenance);

 private:
  coll::Communicator& comm_;
  std::string path_, temp_path_;
  std::int64_t rows_ = 0, classes_ = 0;
  int uncaught_at_start_ = 0;
  std::unique_ptr<io::StagedFile> staged_;  ///< rank 0 only
  io::H5File file_;
  io::H5Dataset predictions_, probabilities_;
};

}  // namespace hpctrain::serve
