#include "direct_sample_reads.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"

namespace hpctrain::io::detail {

namespace {
/// Above this many chunks the address table is not built (asking HDF5 for each chunk's address
/// walks its index once per chunk); such files are read through HDF5.
constexpr hsize_t kMaxChunks = hsize_t{1} << 20;
}  // namespace

std::optional<RowLayout> plan_row_layout(hid_t dset, hid_t native_type, std::size_t row_elements,
                                         const std::string& where) {
  H5PropList dcpl(HPCTRAIN_CHECK_H5(H5Dget_create_plist(dset), where));
  if (H5Pget_nfilters(dcpl.get()) != 0) return std::nullopt;  // compressed: HDF5 must inflate
  {
    H5Type stored(HPCTRAIN_CHECK_H5(H5Dget_type(dset), where));
    if (H5Tequal(stored.get(), native_type) <= 0) return std::nullopt;  // HDF5 would convert
  }
  H5Dataspace space(HPCTRAIN_CHECK_H5(H5Dget_space(dset), where));
  const std::vector<hsize_t> dims = h5_dims(space.get());
  if (dims.empty()) return std::nullopt;
  RowLayout layout;
  layout.rows = dims[0];
  layout.row_bytes = row_elements * H5Tget_size(native_type);
  if (layout.rows == 0) return std::nullopt;
  const H5D_layout_t kind = H5Pget_layout(dcpl.get());
  if (kind == H5D_CONTIGUOUS) {
    const haddr_t at = H5Dget_offset(dset);
    if (at == HADDR_UNDEF) return std::nullopt;  // not allocated, or external storage
    layout.rows_per_chunk = layout.rows;
    layout.chunk.push_back(static_cast<std::uint64_t>(at));
    return layout;
  }
  if (kind != H5D_CHUNKED) return std::nullopt;
  std::vector<hsize_t> chunk(dims.size());
  if (H5Pget_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) != static_cast<int>(chunk.size())) {
    return std::nullopt;
  }
  for (std::size_t d = 1; d < dims.size(); ++d) {
    if (chunk[d] != dims[d]) return std::nullopt;  // a chunk splits a row
  }
  layout.rows_per_chunk = chunk[0];
  const hsize_t chunks = (layout.rows + chunk[0] - 1) / chunk[0];
  if (chunk[0] == 0 || chunks > kMaxChunks) return std::nullopt;
  std::vector<hsize_t> offset(dims.size(), 0);
  for (hsize_t c = 0; c < chunks; ++c) {
    offset[0] = c * chunk[0];
    unsigned filter_mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t bytes = 0;
    if (H5Dget_chunk_info_by_coord(dset, offset.data(), &filter_mask, &addr, &bytes) < 0 || addr == HADDR_UNDEF ||
        bytes != chunk[0] * layout.row_bytes) {
      return std::nullopt;  // unallocated (fill values) or not the plain size
    }
    layout.chunk.push_back(static_cast<std::uint64_t>(addr));
  }
  return layout;
}

namespace {
/// Calls fn(file offset, bytes) for each piece of rows [first, first + count) inside one chunk.
template <typename F>
void for_each_piece(const RowLayout& layout, hsize_t first, hsize_t count, F&& fn) {
  while (count > 0) {
    const hsize_t c = first / layout.rows_per_chunk;
    const hsize_t in_chunk = first - c * layout.rows_per_chunk;
    const hsize_t n = std::min(count, layout.rows_per_chunk - in_chunk);
    fn(static_cast<off_t>(layout.chunk[static_cast<std::size_t>(c)] + in_chunk * layout.row_bytes),
       static_cast<std::size_t>(n) * layout.row_bytes);
    first += n;
    count -= n;
  }
}
}  // namespace

void advise_rows(int fd, const RowLayout& layout, hsize_t first, hsize_t count) noexcept {
  for_each_piece(layout, first, count, [fd](off_t at, std::size_t bytes) {
    (void)::posix_fadvise(fd, at, static_cast<off_t>(bytes), POSIX_FADV_WILLNEED);
  });
}

void pread_rows(int fd, const RowLayout& layout, hsize_t first, hsize_t count, void* dst, const std::string& path) {
  auto* out = static_cast<unsigned char*>(dst);
  for_each_piece(layout, first, count, [&](off_t at, std::size_t want) {
    while (want > 0) {
      const ssize_t got = ::pread(fd, out, want, at);
      if (got < 0 && errno == EINTR) continue;
      HPCTRAIN_REQUIRE(got > 0, fmt::format("data set '{}': read of {} bytes at offset {} failed: {}", path, want, at,
                                            got == 0 ? "end of file (truncated?)" : std::strerror(errno)));
      out += got;
      at += got;
      want -= static_cast<std::size_t>(got);
    }
  });
}

}  // namespace hpctrain::io::detail
