#include "hpctrain/io/durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"

namespace hpctrain::io {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

void fsync_path(const std::string& path, bool directory, bool required) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) {
    HPCTRAIN_REQUIRE(!required, "cannot open '" + path + "' to fsync: " + errno_text());
    return;
  }
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : std::string();
  ::close(fd);
  HPCTRAIN_REQUIRE(rc == 0 || !required, "fsync of '" + path + "' failed: " + why);
}

StagedFile::StagedFile(std::string final_path, const std::string& what)
    : final_path_(std::move(final_path)), what_(what) {
  namespace fs = std::filesystem;
  const fs::path out(final_path_);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  HPCTRAIN_REQUIRE(fs::is_directory(dir, ec), what_ + ": output directory '" + dir.string() + "' does not exist");
  HPCTRAIN_REQUIRE(!fs::is_directory(out, ec), what_ + ": output '" + final_path_ + "' is a directory");
  directory_ = dir.string();
  temp_path_ = (dir / ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
}

StagedFile::~StagedFile() {
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove(temp_path_, ec);
}

void StagedFile::commit() {
  fsync_path(temp_path_, false);
  std::error_code ec;
  std::filesystem::rename(temp_path_, final_path_, ec);
  HPCTRAIN_REQUIRE(!ec, what_ + ": rename '" + temp_path_ + "' to '" + final_path_ + "': " + ec.message());
  committed_ = true;
  fsync_path(directory_, true);
}

void start_writeback(int fd) noexcept {
#if defined(__linux__)
  (void)::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
  (void)fd;
#endif
}

void start_writeback(int fd, std::uint64_t offset, std::uint64_t bytes) noexcept {
#if defined(__linux__)
  (void)::sync_file_range(fd, static_cast<off64_t>(offset), static_cast<off64_t>(bytes), SYNC_FILE_RANGE_WRITE);
#else
  (void)fd;
  (void)offset;
  (void)bytes;
#endif
}

void atomic_write_file(const std::string& path, const std::string& content) {
  const std::filesystem::path target(path);
  const std::string tmp = (target.parent_path() / ("." + target.filename().string() + ".tmp")).string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  HPCTRAIN_REQUIRE(fd >= 0, "cannot create '" + tmp + "': " + errno_text());
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      HPCTRAIN_FAIL("cannot write '" + tmp + "': " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    HPCTRAIN_FAIL("cannot flush '" + tmp + "' to disk: " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    HPCTRAIN_FAIL("cannot rename '" + tmp + "' to '" + path + "': " + why);
  }
  fsync_path(target.parent_path().empty() ? "." : target.parent_path().string(), true, true);
}

FileDigest digest_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  HPCTRAIN_REQUIRE(fd >= 0, "cannot open '" + path + "': " + errno_text());
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::vector<char> buffer(std::size_t{4} << 20);
  FileDigest d;
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errno_text();
      ::close(fd);
      HPCTRAIN_FAIL("cannot read '" + path + "': " + why);
    }
    if (n == 0) break;
    XXH3_64bits_update(state.get(), buffer.data(), static_cast<std::size_t>(n));
    d.bytes += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  d.xxh3 = XXH3_64bits_digest(state.get());
  return d;
}

}  // namespace hpctrain::io
