#include "hpctrain/serve/request_parsing.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace hpctrain::serve {

ParsedInstances parse_predict_request(const std::string& body, std::int64_t input_size, std::int64_t max_instances) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw BadRequest(std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("instances")) throw BadRequest("the body must be a JSON object with \"instances\"");
  const nlohmann::json& instances = j.at("instances");
  if (!instances.is_array()) throw BadRequest("\"instances\" must be an array of instances");
  const auto rows = static_cast<std::int64_t>(instances.size());
  if (rows == 0) throw BadRequest("\"instances\" is empty");
  if (rows > max_instances) {
    throw BadRequest(fmt::format("too many instances: {} (at most {} per request, --max-instances)", rows, max_instances));
  }
  ParsedInstances out;
  out.rows = rows;
  out.values.resize(static_cast<std::size_t>(rows * input_size));
  float* dst = out.values.data();
  for (std::int64_t i = 0; i < rows; ++i) {
    const nlohmann::json& x = instances[static_cast<std::size_t>(i)];
    if (!x.is_array() || static_cast<std::int64_t>(x.size()) != input_size) {
      throw BadRequest(fmt::format("instance {} must be an array of {} numbers, got {}", i, input_size,
                                   x.is_array() ? std::to_string(x.size()) + " values" : std::string(x.type_name())));
    }
    for (std::int64_t k = 0; k < input_size; ++k) {
      const nlohmann::json& v = x[static_cast<std::size_t>(k)];
      if (!v.is_number()) throw BadRequest(fmt::format("instance {} value {} is not a number", i, k));
      const float f = v.get<float>();
      if (!std::isfinite(f)) throw BadRequest(fmt::format("instance {} value {} is not finite as float32", i, k));
      *dst++ = f;
    }
  }
  return out;
}

std::string format_predict_response(const float* probabilities, const std::int32_t* predictions, std::int64_t rows,
                                    std::int64_t classes, std::int64_t model_step) {
  fmt::memory_buffer out;
  fmt::format_to(std::back_inserter(out), "{{\"predictions\": [");
  for (std::int64_t i = 0; i < rows; ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? ", " : "", predictions[i]);
  fmt::format_to(std::back_inserter(out), "], \"probabilities\": [");
  for (std::int64_t i = 0; i < rows; ++i) {
    fmt::format_to(std::back_inserter(out), "{}[", i ? ", " : "");
    for (std::int64_t c = 0; c < classes; ++c) {
      fmt::format_to(std::back_inserter(out), "{}{}", c ? ", " : "", probabilities[i * classes + c]);
    }
    fmt::format_to(std::back_inserter(out), "]");
  }
  fmt::format_to(std::back_inserter(out), "], \"model_step\": {}}}", model_step);
  return fmt::to_string(out);
}

std::string format_error(const std::string& message) {
  // A parse error's message quotes the body, which may not be UTF-8: replace, never throw.
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace hpctrain::serve
