#pragma once
// Internal to hpctrain::io: reads of a data set file's rows with pread, where HDF5's layout
// allows it, instead of one H5Dread per run of consecutive samples.
//
// Why: a streamed training batch is a set of scattered samples, so DatasetReader made one
// H5Dread per sample (about 2 us of HDF5 selection and dispatch each, under the library's global
// lock, plus the kernel's copy); the reads run on the prefetch thread, which shares its rank's
// core with the compute. For an uncompressed dataset in native byte order whose chunks hold whole
// rows (what every hpctrain writer makes) a row's place in the file is fixed: the chunk's address
// (asked of HDF5 once, at open) plus the row's offset inside it. Then a run of rows is one pread.
//
// When the layout does not allow it (filters, a byte order or type to convert, chunks that split
// a row, unallocated chunks, more than kMaxChunks chunks), `plan` returns nothing and the caller
// reads through HDF5 as before: the same bytes either way.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/io/h5.hpp"

namespace hpctrain::io::detail {

/// Where the rows of one dataset lie in its file.
struct RowLayout {
  std::size_t row_bytes = 0;          ///< bytes per row (one sample, or one label)
  hsize_t rows = 0;                   ///< rows in the dataset
  hsize_t rows_per_chunk = 0;         ///< contiguous layout: rows
  std::vector<std::uint64_t> chunk;   ///< file address of chunk c (rows [c * rows_per_chunk, ...))
};

/// The layout of `dset` (rows x `row_elements` values of `native_type`), or nothing when its rows
/// cannot be read directly. Needs H5Lock held.
std::optional<RowLayout> plan_row_layout(hid_t dset, hid_t native_type, std::size_t row_elements,
                                         const std::string& where);

/// Reads rows [first, first + count) of `layout` from the open file descriptor `fd` into `dst`
/// (count x row_bytes). Throws naming `path` on a read error or a short read. No HDF5 call.
void pread_rows(int fd, const RowLayout& layout, hsize_t first, hsize_t count, void* dst, const std::string& path);

/// Tells the kernel (posix_fadvise WILLNEED) that rows [first, first + count) will be read soon:
/// it starts reading those not in the page cache. Advice only: errors are ignored.
void advise_rows(int fd, const RowLayout& layout, hsize_t first, hsize_t count) noexcept;

}  // namespace hpctrain::io::detail
