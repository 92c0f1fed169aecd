#include "hpctrain/serve/request_parsing.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstring>

namespace hpctrain::serve {

namespace {

/// The common body, {"instances": [[n, ...], ...]} with any JSON whitespace, scanned directly:
/// nlohmann's DOM parse costs ~0.2 ms for one 784-float instance, the HTTP thread's largest cost.
/// Numbers are checked against JSON's grammar and read as double, then float, exactly as the
/// DOM path reads them. Returns false (leaving `out` unspecified) for anything else, valid or
/// not; the DOM path then decides and names the problem.
class InstanceScanner {
 public:
  InstanceScanner(const std::string& body, std::int64_t input_size, std::int64_t max_instances)
      : p_(body.data()), end_(body.data() + body.size()), input_size_(input_size), max_instances_(max_instances) {}

  bool scan(ParsedInstances& out) {
    static constexpr char kKey[] = "\"instances\"";
    if (!take('{') || !skip_space() || static_cast<std::size_t>(end_ - p_) < sizeof kKey - 1 ||
        std::memcmp(p_, kKey, sizeof kKey - 1) != 0) {
      return false;
    }
    p_ += sizeof kKey - 1;
    if (!take(':') || !take('[')) return false;
    out.values.clear();
    out.rows = 0;
    do {
      if (out.rows == max_instances_ || !take('[')) return false;
      for (std::int64_t k = 0; k < input_size_; ++k) {
        if ((k > 0 && !take(',')) || !number(out.values)) return false;
      }
      if (!take(']')) return false;
      ++out.rows;
    } while (take(','));
    return take(']') && take('}') && skip_space() && p_ == end_;
  }

 private:
  bool skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    return true;
  }
  bool take(char c) {
    skip_space();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  static bool digits(const char*& q, const char* end) {
    const char* start = q;
    while (q < end && *q >= '0' && *q <= '9') ++q;
    return q > start;
  }
  /// The token [p_, q) as T, then float, as nlohmann converts its number types: an integer token
  /// is an int64 (else uint64, else double: then the scanner declines), "-0" included.
  template <class T>
  bool to_float(const char* q, float& f) const {
    T v{};
    const auto r = std::from_chars(p_, q, v);
    if (r.ec != std::errc() || r.ptr != q) return false;
    f = static_cast<float>(v);
    return true;
  }
  /// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, finite as float32.
  bool number(std::vector<float>& values) {
    skip_space();
    const char* q = p_;
    if (q < end_ && *q == '-') ++q;
    if (q < end_ && *q == '0') {
      ++q;
    } else if (!digits(q, end_)) {
      return false;
    }
    bool integer = true;
    if (q < end_ && *q == '.' && (integer = false, !digits(++q, end_))) return false;
    if (q < end_ && (*q == 'e' || *q == 'E')) {
      integer = false;
      ++q;
      if (q < end_ && (*q == '+' || *q == '-')) ++q;
      if (!digits(q, end_)) return false;
    }
    float f = 0.0f;
    if (!integer ? !to_float<double>(q, f) : !(to_float<std::int64_t>(q, f) || to_float<std::uint64_t>(q, f))) {
      return false;
    }
    if (!std::isfinite(f)) return false;
    values.push_back(f);
    p_ = q;
    return true;
  }

  const char* p_;
  const char* end_;
  const std::int64_t input_size_, max_instances_;
};

}  // namespace

ParsedInstances parse_predict_request(const std::string& body, std::int64_t input_size, std::int64_t max_instances) {
  {
    ParsedInstances fast;
    fast.values.reserve(static_cast<std::size_t>(input_size));
    if (InstanceScanner(body, input_size, max_instances).scan(fast)) return fast;
  }
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
