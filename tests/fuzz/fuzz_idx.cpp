// libFuzzer target: the IDX importer (import_idx in io/src/idx_import.cpp, `hpctrain data
// import-idx`), end to end: both IDX files parsed (plain or gzip), checked, and the HDF5 data
// set written. Any input pair must import or throw hpctrain::Error naming the file, and must
// not make the importer allocate more than the files can hold.
//
// Input layout: byte 0 chooses the options (bit 0: float32 samples; bit 1: gzip level 1;
// bits 2-3: limit 0..3 samples; bit 4: classes = 10), bytes 1-2 the labels file's length L
// (little endian, clamped to what is there), then L bytes of labels file, the rest the images
// file.

#include <algorithm>
#include <cstdint>

#include "fuzz_files.hpp"
#include "hpctrain/collectives/error.hpp"
#include "hpctrain/io/idx_import.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint8_t flags = data[0];
  const std::size_t labels_len = std::min<std::size_t>(data[1] | (data[2] << 8), size - 3);
  const auto dir = hpctrain::fuzz::scratch_dir();
  const auto labels = dir / "labels-idx1-ubyte", images = dir / "images-idx3-ubyte";
  hpctrain::fuzz::write_file(labels, data + 3, labels_len);
  hpctrain::fuzz::write_file(images, data + 3 + labels_len, size - 3 - labels_len);
  hpctrain::io::IdxImportOptions o;
  o.sample_type = (flags & 1) ? hpctrain::io::SampleType::float32 : hpctrain::io::SampleType::uint8;
  o.compression_level = (flags & 2) ? 1 : 0;
  o.limit = (flags >> 2) & 3;
  o.classes = (flags & 16) ? 10 : 0;
  try {
    (void)hpctrain::io::import_idx(images.string(), labels.string(), (dir / "out.h5").string(), o);
  } catch (const hpctrain::Error&) {
  }
  return 0;
}
