#pragma once
/// @file
/// The JSON of POST /v1/predict, checked: {"instances": [[u_1, ..., u_F], ...]}.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace hpctrain::serve {

/// A request the client got wrong (answered 400 with {"error": what()}).
class BadRequest : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ParsedInstances {
  std::vector<float> values;  ///< rows x input_size, row-major, as float32
  std::int64_t rows = 0;
};

/// Parses `body` (JSON whatever the Content-Type). Throws BadRequest when it is not JSON, not
/// an object with an "instances" array of 1..max_instances arrays of exactly `input_size`
/// numbers each, or when a value is not finite as float32 (1e39, say). Messages name the
/// instance and position.
ParsedInstances parse_predict_request(const std::string& body, std::int64_t input_size, std::int64_t max_instances);

/// The response body: {"predictions": [...], "probabilities": [[...], ...], "model_step": N};
/// floats printed with the fewest digits that read back as the same float32.
std::string format_predict_response(const float* probabilities, const std::int32_t* predictions, std::int64_t rows,
                                    std::int64_t classes, std::int64_t model_step);

/// {"error": message} with the message JSON-escaped.
std::string format_error(const std::string& message);

}  // namespace hpctrain::serve
