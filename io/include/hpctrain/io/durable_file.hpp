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

/// Replaces `path` with `content` atomically: readers see the old or the new file, never a mix.
void atomic_write_file(const std::string& path, const std::string& content);

/// XXH3-64 of a file's bytes and its size; throws naming the file when it cannot be read.
struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint64_t xxh3 = 0;
};
FileDigest digest_file(const std::string& path);

}  // namespace hpctrain::io
