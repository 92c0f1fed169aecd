#include "hpctrain/io/csv_import.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "hpctrain/io/dataset.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/h5.hpp"
#include "appended_dataset.hpp"

namespace hpctrain::io {

namespace {

std::vector<std::string> split_cells(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> cells;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    std::string cell = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto b = cell.find_first_not_of(" \t"), e = cell.find_last_not_of(" \t");
    cells.push_back(b == std::string::npos ? std::string() : cell.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return cells;
}

}  // namespace

CsvImportResult import_csv(const std::string& csv_path, const std::string& out_path, const CsvImportOptions& o) {
  const std::string what = fmt::format("import-csv '{}'", csv_path);
  HPCTRAIN_REQUIRE(o.chunk_rows >= 1, what + ": chunk_rows must be at least 1");
  std::ifstream in(csv_path);
  HPCTRAIN_REQUIRE(in.good(), fmt::format("{}: cannot open: {}", what, std::strerror(errno)));
  std::string line;
  HPCTRAIN_REQUIRE(static_cast<bool>(std::getline(in, line)), what + ": empty file (a header row is needed)");
  const std::vector<std::string> header = split_cells(line);
  const auto label_it = std::find(header.begin(), header.end(), o.label_column);
  HPCTRAIN_REQUIRE(label_it != header.end(), fmt::format("{}: no column named '{}' in the header", what, o.label_column));
  const auto label_col = static_cast<std::size_t>(label_it - header.begin());
  std::vector<std::string> names;
  for (std::size_t j = 0; j < header.size(); ++j) {
    if (j != label_col) names.push_back(header[j]);
  }
  HPCTRAIN_REQUIRE(!names.empty(), what + ": no sample columns besides the label column");
  const auto width = static_cast<hsize_t>(names.size());

  StagedFile staged(out_path, "import-csv");
  const std::string where = fmt::format("import-csv: write '{}'", staged.path());
  CsvImportResult r;
  r.features = static_cast<std::int64_t>(width);
  {
    H5Lock lock;
    H5File file(HPCTRAIN_CHECK_H5(H5Fcreate(staged.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                  where + ": create file"));
    const auto chunk = static_cast<hsize_t>(o.chunk_rows);
    AppendedDataset samples(file.get(), DatasetFormat::samples, H5T_IEEE_F32LE, {width}, chunk, where);
    AppendedDataset labels(file.get(), o.target ? "/targets" : DatasetFormat::labels,
                           o.target ? H5T_IEEE_F64LE : H5T_STD_I32LE, {}, chunk, where);
    std::vector<float> rows;
    std::vector<double> targets;
    std::vector<std::int32_t> classes_of;
    std::int32_t max_label = -1;
    auto flush = [&] {
      const auto n = static_cast<hsize_t>(rows.size() / width);
      samples.append(H5T_NATIVE_FLOAT, rows.data(), n);
      if (o.target) labels.append(H5T_NATIVE_DOUBLE, targets.data(), n);
      else labels.append(H5T_NATIVE_INT32, classes_of.data(), n);
      rows.clear();
      targets.clear();
      classes_of.clear();
    };
    for (std::int64_t line_no = 2; std::getline(in, line); ++line_no) {
      if (line.empty() || line == "\r") continue;
      const auto cells = split_cells(line);
      HPCTRAIN_REQUIRE(cells.size() == header.size(), fmt::format("{}: line {} has {} cells, the header {}", what, line_no,
                                                                  cells.size(), header.size()));
      for (std::size_t j = 0; j < cells.size(); ++j) {
        const char* s = cells[j].c_str();
        char* end = nullptr;
        const double v = std::strtod(s, &end);
        HPCTRAIN_REQUIRE(!cells[j].empty() && *end == '\0' && std::isfinite(v),
                         fmt::format("{}: line {}, column {} ('{}'): '{}' is not a finite number", what, line_no, j + 1,
                                     header[j], cells[j]));
        if (j != label_col) {
          rows.push_back(static_cast<float>(v));
        } else if (o.target) {
          targets.push_back(v);
        } else {
          HPCTRAIN_REQUIRE(v >= 0 && v == std::floor(v) && v < 2147483647.0,
                           fmt::format("{}: line {}, column {} ('{}'): label '{}' is not an integer >= 0 (use --target "
                                       "for a regression target)",
                                       what, line_no, j + 1, header[j], cells[j]));
          classes_of.push_back(static_cast<std::int32_t>(v));
          max_label = std::max(max_label, classes_of.back());
        }
      }
      ++r.count;
      if (rows.size() / width == chunk) flush();
    }
    flush();
    HPCTRAIN_REQUIRE(r.count > 0, what + ": no data rows after the header");
    h5_write_attribute(samples.get(), "scale", 1.0);
    r.classes = o.target ? 0 : max_label + 1;
    const hid_t root = file.get();
    h5_write_attribute(root, "format", std::string(DatasetFormat::format_name));
    h5_write_attribute(root, "format_version", DatasetFormat::version);
    h5_write_attribute(root, "count", r.count);
    h5_write_attribute(root, "shape", std::vector<std::int64_t>{r.features});
    h5_write_attribute(root, "classes", std::int64_t{r.classes});
    h5_write_attribute(root, "layout", std::string("NF"));
    h5_write_attribute(root, "source", fmt::format("CSV {} (label column '{}'{})", csv_path, o.label_column,
                                                   o.target ? ", as /targets" : ""));
    h5_write_attribute(root, "feature_names", names);
    HPCTRAIN_CHECK_H5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), where + ": flush");
  }
  staged.commit();
  return r;
}

}  // namespace hpctrain::io
