#pragma once
/// @file
/// Making file-system changes durable: fsync of files and directories, and atomic replacement
/// of a small file (temporary name, fsync, rename, fsync of the directory).

#include <cstdint>
#include <string>

namespace hpctrain::io {

/// fsync(2) of a file or directory. Throws hpctrain::Error naming the path when `required`;
/// otherwise best effort.
void fsync_path(const std::string& path, bool directory, bool required = false);

/// Asks the kernel to start writing the file's dirty pages to the device now, without waiting
/// (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`; a no-op elsewhere and on failure). A later
/// fsync then has less left to wait for, and work done meanwhile overlaps the device's.
void start_writeback(int fd) noexcept;
/// The same for the bytes [offset, offset + bytes) only.
void start_writeback(int fd, std::uint64_t offset, std::uint64_t bytes) noexcept;

/// Replaces `path` with `content` atomically: readers see the old or the new file, never a mix.
void atomic_write_file(const std::string& path, const std::string& content);

/// A file written under a temporary name in its final directory (".<name>.tmp-<pid>") and
/// renamed into place by commit() after an fsync, so a crash or an error never leaves a partial
/// file under the final name; removed by the destructor unless committed. Checks up front that
/// the directory exists and the final path is not a directory (errors name `what`, e.g.
/// "import-csv").
class StagedFile {
 public:
  StagedFile(std::string final_path, const std::string& what);
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;

  /// Where to write (the temporary name).
  const std::string& path() const noexcept { return temp_path_; }
  /// fsync of the file, rename to the final path, fsync of the directory.
  void commit();

 private:
  std::string final_path_, temp_path_, directory_, what_;
  bool committed_ = false;
};

/// XXH3-64 of a file's bytes and its size; throws naming the file when it cannot be read.
struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};
FileDigest digest_file(const std::string& path);

}  // namespace hpctrain::io
