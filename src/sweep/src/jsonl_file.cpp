#include "jsonl_file.hpp"

#include "hpctrain/base/error.hpp"

namespace hpctrain::sweep {

std::vector<std::pair<std::size_t, nlohmann::json>> read_jsonl(const std::string& path) {
  std::vector<std::pair<std::size_t, nlohmann::json>> records;
  std::ifstream in(path);
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object()) records.emplace_back(number, std::move(record));
  }
  return records;
}

std::ofstream open_jsonl_for_append(const std::string& path, const std::string& flag) {
  bool cut = false;
  {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (in.good() && in.tellg() > 0) {
      in.seekg(-1, std::ios::end);
      cut = in.get() != '\n';
    }
  }
  std::ofstream out(path, std::ios::app);
  HPCTRAIN_REQUIRE(out.good(), flag + ": cannot write '" + path + "'");
  if (cut) out << "\n";
  return out;
}

}  // namespace hpctrain::sweep
