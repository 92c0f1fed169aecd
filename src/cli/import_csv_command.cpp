#include "import_csv_command.hpp"

#include <cstdio>

#include "hpctrain/io/csv_import.hpp"

namespace hpctrain::cli {

CLI::App* add_import_csv_command(CLI::App& data, ImportCsvArgs& a) {
  CLI::App* c = data.add_subcommand("import-csv", "Convert a CSV file (header row, numeric cells) into an hpctrain HDF5 "
                                                  "data set, streaming");
  c->add_option("--csv", a.csv, "CSV file; cells split at commas, no quoting")->required();
  c->add_option("--label-column", a.label_column, "Header name of the label column (the rest become /samples)")
      ->required();
  c->add_flag("--target", a.target, "Store the column as /targets (float64, regression) instead of /labels (int32)");
  c->add_option("--out", a.out, "Output HDF5 file (written under a temporary name, then renamed)")->required();
  return c;
}

int run_import_csv(const ImportCsvArgs& a, coll::Communicator& comm) {
  if (comm.rank() == 0) {
    io::CsvImportOptions o;
    o.label_column = a.label_column;
    o.target = a.target;
    const auto r = io::import_csv(a.csv, a.out, o);
    std::printf("hpctrain: wrote %s: %lld samples x %lld features, %s\n", a.out.c_str(), static_cast<long long>(r.count),
                static_cast<long long>(r.features), a.target ? "/targets" : (std::to_string(r.classes) + " classes").c_str());
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

}  // namespace hpctrain::cli
