#pragma once
/// @file
/// TensorBoard event files: `events.out.tfevents.<seconds>.<host>.<pid>` holding scalar
/// summaries that `tensorboard --logdir` (and its EventAccumulator) reads.
///
/// Record format (TensorBoard's, the TFRecord framing): for every serialized Event,
/// `uint64 length` (little endian), `uint32 masked_crc32c(length bytes)`, the Event bytes,
/// `uint32 masked_crc32c(event bytes)`, where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
/// The Event message is serialized by libprotobuf from io/proto/tfevents.proto (hpctrain's own
/// minimal .proto with TensorBoard's field numbers); CRC-32C (Castagnoli) comes from Boost.CRC.

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hpctrain::io {

/// The masked CRC-32C of `size` bytes at `data`, as TFRecord framing stores it.
std::uint32_t tfrecord_masked_crc32c(const void* data, std::size_t size) noexcept;

/// Writes one event file in `directory` (created if missing). Not thread-safe. The file name
/// carries the pid and, for a process's second and later writers, a sequence number, so several
/// writers may share a directory. The first record is the file-version
/// event; every record is flushed to the OS when written, so a reader sees it at once and a
/// killed run keeps what it wrote. Errors (directory not creatable, write failed) throw
/// hpctrain::Error naming the path and `option` (the flag the directory came from).
class TfEventsWriter {
 public:
  TfEventsWriter(const std::string& directory, const std::string& option = "--tensorboard");
  TfEventsWriter(const TfEventsWriter&) = delete;
  TfEventsWriter& operator=(const TfEventsWriter&) = delete;

  /// One scalar `value` under `tag` ("train/loss": TensorBoard groups by the part before '/')
  /// at `step`, stamped with the current wall time (seconds since the epoch).
  void add_scalar(const std::string& tag, std::int64_t step, double value);
  /// TensorBoard's HParams plugin: the experiment — the hyperparameters by name with their kind
  /// (a JSON value of that kind: number, string or boolean) and the metric tags — written once
  /// into the directory above the runs (the trials).
  void add_hparams_experiment(const std::vector<std::pair<std::string, nlohmann::json>>& hparams,
                              const std::vector<std::string>& metric_tags);
  /// One run's (trial's) hyperparameter values (a JSON object of numbers, strings, booleans).
  void add_hparams_session_start(const nlohmann::json& values, const std::string& group);
  /// The end of the run: succeeded or failed.
  void add_hparams_session_end(bool success);
  /// The file written.
  const std::string& path() const noexcept { return path_; }

 private:
  void write_record(const std::string& bytes);
  void write_plugin_summary(const std::string& tag, const std::string& plugin, const std::string& content);
  std::string path_, option_;
  std::ofstream out_;
};

}  // namespace hpctrain::io
