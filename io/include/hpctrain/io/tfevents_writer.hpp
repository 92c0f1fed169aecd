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

namespace hpctrain::io {

/// The masked CRC-32C of `size` bytes at `data`, as TFRecord framing stores it.
std::uint32_t tfrecord_masked_crc32c(const void* data, std::size_t size) noexcept;

/// Writes one event file in `directory` (created if missing). Not thread-safe; one writer per
/// process and directory (the file name carries the pid). The first record is the file-version
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
  /// The file written.
  const std::string& path() const noexcept { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_, option_;
  std::ofstream out_;
};

}  // namespace hpctrain::io
