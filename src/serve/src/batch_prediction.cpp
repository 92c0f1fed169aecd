#include "hpctrain/serve/batch_prediction.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/agreement.hpp"
#include "hpctrain/io/dataset.hpp"
#include "hpctrain/serve/inference_model.hpp"
#include "hpctrain/serve/prediction_file.hpp"
#include "hpctrain/serve/rank_workers.hpp"

namespace hpctrain::serve {

namespace {

/// Rank 0: the options and the checkpoint, checked; throws naming the flag.
CheckpointSource check_options(const PredictOptions& o) {
  HPCTRAIN_REQUIRE(!o.checkpoint.empty(), "--checkpoint: no checkpoint given");
  HPCTRAIN_REQUIRE(!o.data.empty(), "--data: no input data set given");
  HPCTRAIN_REQUIRE(!o.out.empty(), "--out: no output file given");
  HPCTRAIN_REQUIRE(o.batch >= 1, "--batch must be at least 1, got " + std::to_string(o.batch));
  std::error_code ec;
  HPCTRAIN_REQUIRE(std::filesystem::weakly_canonical(o.out, ec) != std::filesystem::weakly_canonical(o.data, ec),
                   "--out '" + o.out + "' is the input --data file");
  CheckpointSource source = resolve_checkpoint(o.checkpoint);
  // Opening the model and the data here names the problem once, before every rank does it.
  const InferenceModel model(source);
  const io::DatasetReader reader(o.data);
  reader.require_compatible(model.input_shape(), model.classes());
  return source;
}

CheckpointSource agree_on_source(coll::Communicator& comm, const PredictOptions& o) {
  CheckpointSource source;
  coll::rank0_decides(comm, [&] { source = check_options(o); });
  return source_from_json_text(coll::broadcast_string(comm, to_json_text(source)));
}

}  // namespace

PredictSummary run_batch_prediction(coll::Communicator& comm, MPI_Comm mpi_comm, const PredictOptions& o) {
  const CheckpointSource source = agree_on_source(comm, o);
  InferenceModel model(source);
  io::DatasetReaderOptions read_options;
  read_options.mean = model.normalization().mean;
  read_options.stddev = model.normalization().std;
  read_options.validate_labels = false;  // rank 0 validated them (check_options)
  const io::DatasetReader reader(o.data, read_options);
  const std::int64_t n = reader.info().count;
  const std::int64_t classes = model.classes();
  const std::int64_t batches = (n + o.batch - 1) / o.batch;
  const std::int64_t P = comm.size(), r = comm.rank();
  const std::int64_t first_batch = batches * r / P, end_batch = batches * (r + 1) / P;
  const std::int64_t rounds = (batches + P - 1) / P;  // the most batches any rank has

  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  PredictionFile file(comm, mpi_comm, o.out, n, classes);
  std::vector<std::int64_t> indices;
  std::vector<float> samples, probabilities;
  std::vector<std::int32_t> labels, predictions;
  std::int64_t correct = 0;
  for (std::int64_t round = 0; round < rounds; ++round) {
    const std::int64_t b = first_batch + round;
    const std::int64_t first = b < end_batch ? b * o.batch : 0;
    const std::int64_t rows = b < end_batch ? std::min(o.batch, n - first) : 0;
    indices.resize(static_cast<std::size_t>(rows));
    std::iota(indices.begin(), indices.end(), first);
    probabilities.resize(static_cast<std::size_t>(rows * classes));
    predictions.resize(static_cast<std::size_t>(rows));
    if (rows > 0) {
      reader.read(indices, samples, labels);
      model.predict_normalized(samples.data(), rows, probabilities.data(), predictions.data());
      for (std::int64_t i = 0; i < rows; ++i) correct += predictions[static_cast<std::size_t>(i)] == labels[static_cast<std::size_t>(i)];
    }
    file.write(first, rows, predictions.data(), probabilities.data());
  }
  PredictionProvenance p;
  p.checkpoint = source.step_dir;
  p.checkpoint_step = source.step;
  p.checkpoint_checksum = source.parameter_checksum;
  p.model = model.config().dump();
  p.data = o.data;
  p.normalize_mean = model.normalization().mean;
  p.normalize_std = model.normalization().std;
  p.batch = o.batch;
  file.commit(p);

  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  comm.allreduce(&seconds, 1, coll::ReduceOp::max);
  comm.allreduce(&correct, 1, coll::ReduceOp::sum);
  PredictSummary s;
  s.samples = n;
  s.step = source.step;
  s.step_dir = source.step_dir;
  s.seconds = seconds;
  s.samples_per_s = seconds > 0 ? static_cast<double>(n) / seconds : 0.0;
  s.accuracy = n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
  return s;
}

}  // namespace hpctrain::serve
