#include "hpctrain/io/tfevents_writer.hpp"

#include <unistd.h>

#include <boost/crc.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "hpctrain/base/error.hpp"
#include "tfevents.pb.h"

namespace hpctrain::io {

namespace {

/// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected, init and final xor all ones).
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

double wall_time_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

std::array<char, 4> little_endian32(std::uint32_t v) {
  return {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16), static_cast<char>(v >> 24)};
}

/// Writers made by this process so far (names the second and later files apart).
std::atomic<int> g_writers{0};

/// TensorBoard's hparams plugin constants (tensorboard/plugins/hparams/metadata.py).
constexpr const char* kHParamsPlugin = "hparams";
constexpr int kHParamsVersion = 0;
constexpr int kTypeString = 1, kTypeBool = 2, kTypeFloat64 = 3;
constexpr int kStatusSuccess = 1, kStatusFailure = 2;

int hparam_type(const nlohmann::json& v) {
  if (v.is_boolean()) return kTypeBool;
  if (v.is_number()) return kTypeFloat64;
  return kTypeString;
}

tfevents::HParamValue hparam_value(const nlohmann::json& v) {
  tfevents::HParamValue out;
  if (v.is_boolean()) {
    out.set_bool_value(v.get<bool>());
  } else if (v.is_number()) {
    out.set_number_value(v.get<double>());
  } else {
    out.set_string_value(v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

}  // namespace

std::uint32_t tfrecord_masked_crc32c(const void* data, std::size_t size) noexcept {
  Crc32c crc;
  crc.process_bytes(data, size);
  const std::uint32_t c = crc.checksum();
  // TFRecord masks the CRC so that a CRC of data that itself holds CRCs stays well distributed.
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TfEventsWriter::TfEventsWriter(const std::string& directory, const std::string& option) : option_(option) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  HPCTRAIN_REQUIRE(!ec && std::filesystem::is_directory(directory),
                   option + ": cannot create directory '" + directory + "'" + (ec ? ": " + ec.message() : ""));
  const auto now = static_cast<long long>(wall_time_s());
  const int sequence = g_writers++;
  path_ = (std::filesystem::path(directory) /
           ("events.out.tfevents." + std::to_string(now) + "." + host_name() + "." + std::to_string(getpid()) +
            (sequence > 0 ? "." + std::to_string(sequence) : std::string())))
              .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  HPCTRAIN_REQUIRE(out_.good(), option + ": cannot write '" + path_ + "': " + std::strerror(errno));
  tfevents::Event version;
  version.set_wall_time(wall_time_s());
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
}

void TfEventsWriter::add_scalar(const std::string& tag, std::int64_t step, double value) {
  tfevents::Event event;
  event.set_wall_time(wall_time_s());
  event.set_step(step);
  tfevents::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void TfEventsWriter::write_plugin_summary(const std::string& tag, const std::string& plugin,
                                         const std::string& content) {
  tfevents::Event event;
  event.set_wall_time(wall_time_s());
  tfevents::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* data = v->mutable_metadata()->mutable_plugin_data();
  data->set_plugin_name(plugin);
  data->set_content(content);
  write_record(event.SerializeAsString());
}

void TfEventsWriter::add_hparams_experiment(const std::vector<std::pair<std::string, nlohmann::json>>& hparams,
                                            const std::vector<std::string>& metric_tags) {
  tfevents::HParamsPluginData data;
  data.set_version(kHParamsVersion);
  tfevents::Experiment* e = data.mutable_experiment();
  e->set_time_created_secs(wall_time_s());
  for (const auto& [name, example] : hparams) {
    tfevents::HParamInfo* info = e->add_hparam_infos();
    info->set_name(name);
    info->set_type(hparam_type(example));
  }
  for (const std::string& tag : metric_tags) e->add_metric_infos()->mutable_name()->set_tag(tag);
  write_plugin_summary("_hparams_/experiment", kHParamsPlugin, data.SerializeAsString());
}

void TfEventsWriter::add_hparams_session_start(const nlohmann::json& values, const std::string& group) {
  tfevents::HParamsPluginData data;
  data.set_version(kHParamsVersion);
  tfevents::SessionStartInfo* s = data.mutable_session_start_info();
  s->set_group_name(group);
  s->set_start_time_secs(wall_time_s());
  for (const auto& [name, value] : values.items()) (*s->mutable_hparams())[name] = hparam_value(value);
  write_plugin_summary("_hparams_/session_start_info", kHParamsPlugin, data.SerializeAsString());
}

void TfEventsWriter::add_hparams_session_end(bool success) {
  tfevents::HParamsPluginData data;
  data.set_version(kHParamsVersion);
  tfevents::SessionEndInfo* e = data.mutable_session_end_info();
  e->set_status(success ? kStatusSuccess : kStatusFailure);
  e->set_end_time_secs(wall_time_s());
  write_plugin_summary("_hparams_/session_end_info", kHParamsPlugin, data.SerializeAsString());
}

void TfEventsWriter::write_record(const std::string& bytes) {
  const auto length = static_cast<std::uint64_t>(bytes.size());
  std::array<char, 8> header{};
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(length >> (8 * i));
  out_.write(header.data(), header.size());
  out_.write(little_endian32(tfrecord_masked_crc32c(header.data(), header.size())).data(), 4);
  out_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out_.write(little_endian32(tfrecord_masked_crc32c(bytes.data(), bytes.size())).data(), 4);
  out_.flush();
  HPCTRAIN_REQUIRE(out_.good(), option_ + ": writing '" + path_ + "' failed (disk full, quota or I/O error)");
}

}  // namespace hpctrain::io
