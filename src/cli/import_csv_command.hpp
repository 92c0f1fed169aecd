#pragma once
// `hpctrain data import-csv` (io/csv_import.hpp).
#include <CLI/CLI.hpp>

#include <string>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::cli {

struct ImportCsvArgs {
  std::string csv, label_column, out;
  bool target = false;
};

/// Adds `import-csv` under `data`; returns it.
CLI::App* add_import_csv_command(CLI::App& data, ImportCsvArgs& args);
/// Rank 0 converts (an error there ends the job through abort_job); the others wait.
int run_import_csv(const ImportCsvArgs& args, coll::Communicator& comm);

}  // namespace hpctrain::cli
