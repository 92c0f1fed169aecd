#include "hpctrain/models/registry.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/models/layers.hpp"
#include "model_builders.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

namespace hpctrain::models {

namespace {

using nlohmann::json;

using detail::check_keys;

/// The settings mlp and cnn share, with their defaults.
struct CommonConfig {
  Shape input_shape;
  std::int64_t classes;
  std::vector<std::int64_t> hidden;
  Activation activation;
  double dropout;
  core::Init init;
  std::uint64_t seed;

  CommonConfig(const json& c, std::vector<std::int64_t> default_hidden)
      : input_shape(c.value("input_shape", Shape{1, 28, 28})),
        classes(c.value("classes", std::int64_t{10})),
        hidden(c.value("hidden", default_hidden)),
        activation(parse_activation(c.value("activation", std::string("relu")))),
        dropout(c.value("dropout", 0.0)),
        // PyTorch's default for Linear/Conv2d weights. He normal ("he") is available but makes the
        // CNN's first steps at lr 0.05 / momentum 0.9 blow up (initial loss 5.5, then 25; the
        // ReLUs die and the run stays at 10% accuracy: measured), because max-pooling raises
        // the activations' scale that He's derivation assumes constant.
        init(core::parse_init(c.value("init", std::string("fan_in_uniform")))),
        seed(c.value("seed", std::uint64_t{0})) {
    HPCTRAIN_REQUIRE(classes >= 2, "a classifier needs at least 2 classes");
    for (const std::int64_t h : hidden) {
      HPCTRAIN_REQUIRE(h > 0, "hidden sizes must be positive");
    }
  }
};

/// hidden dense layers (each followed by the activation and, if set, dropout), then the
/// classifier layer; `in` is the flattened feature count.
template <class T>
void add_dense_head(Sequential<T>& model, const CommonConfig& c, std::int64_t in) {
  for (const std::int64_t h : c.hidden) {
    model.add(std::make_unique<Dense<T>>(in, h, c.init));
    model.add(std::make_unique<ActivationLayer<T>>(c.activation));
    if (c.dropout > 0.0) model.add(std::make_unique<Dropout<T>>(c.dropout));
    in = h;
  }
  // The classifier feeds the softmax, not a ReLU, so He's factor 2 (which compensates for ReLU
  // zeroing half the signal) does not apply: with "he" it gets Xavier, keeping the first logits
  // O(1).
  const core::Init classifier_init = c.init == core::Init::he_normal ? core::Init::xavier_uniform : c.init;
  model.add(std::make_unique<Dense<T>>(in, c.classes, classifier_init));
}

const std::set<std::string> kCommonKeys{"name",    "input_shape", "classes", "hidden",
                                        "activation", "dropout",  "init",    "seed"};

template <class T>
std::unique_ptr<Sequential<T>> build_mlp(const json& config) {
  check_keys(config, kCommonKeys);
  const CommonConfig c(config, {512, 256});
  auto model = std::make_unique<Sequential<T>>(c.input_shape);
  if (c.input_shape.size() > 1) model->add(std::make_unique<Flatten<T>>());
  add_dense_head(*model, c, core::shape_size(c.input_shape));
  return model;
}

template <class T>
std::unique_ptr<Sequential<T>> build_cnn(const json& config) {
  std::set<std::string> keys = kCommonKeys;
  keys.insert({"channels", "kernel", "pool"});
  check_keys(config, keys);
  const CommonConfig c(config, {256});
  const auto channels = config.value("channels", std::vector<std::int64_t>{32, 64});
  const auto kernel = config.value("kernel", std::int64_t{5});
  const auto pool = config.value("pool", std::int64_t{2});
  HPCTRAIN_REQUIRE(c.input_shape.size() == 3,
                   "cnn input_shape must be [channels, height, width], got " +
                       core::shape_string(c.input_shape));
  HPCTRAIN_REQUIRE(kernel > 0 && kernel % 2 == 1, "cnn kernel must be odd (same padding)");
  HPCTRAIN_REQUIRE(pool > 0, "cnn pool must be positive");
  auto model = std::make_unique<Sequential<T>>(c.input_shape);
  std::int64_t in_c = c.input_shape[0];
  for (const std::int64_t ch : channels) {
    HPCTRAIN_REQUIRE(ch > 0, "cnn channels must be positive");
    model->add(std::make_unique<Conv2D<T>>(in_c, ch, kernel, 1, kernel / 2, c.init));
    // conv -> ReLU -> pool, computed as conv -> pool -> ReLU: ReLU is monotonic, so
    // max(relu(x)) = relu(max(x)) exactly, and the gradients agree too (a window whose max is
    // <= 0 passes no gradient either way; otherwise both route it to the same first maximum).
    // The ReLU then touches pool^2 times fewer elements (measured: 12% of a CNN step at
    // batch 64 was ReLU on the full-size maps). GELU is not monotonic and keeps its place.
    // Parameter names ("<layer>.<kind>.<name>") do not change: the layers between convs
    // have no parameters.
    if (c.activation == Activation::relu) {
      model->add(std::make_unique<MaxPool2D<T>>(pool));
      model->add(std::make_unique<ActivationLayer<T>>(c.activation));
    } else {
      model->add(std::make_unique<ActivationLayer<T>>(c.activation));
      model->add(std::make_unique<MaxPool2D<T>>(pool));
    }
    in_c = ch;
  }
  model->add(std::make_unique<Flatten<T>>());
  add_dense_head(*model, c, core::shape_size(model->output_shape()));
  return model;
}

template <class T>
struct Registry {
  std::mutex mutex;
  std::map<std::string, ModelFactory<T>> factories{
      {"mlp", build_mlp<T>}, {"cnn", build_cnn<T>}, {"resnet", detail::build_resnet<T>},
      {"transformer", detail::build_transformer<T>}};
};

template <class T>
Registry<T>& registry() {
  static Registry<T> r;
  return r;
}

}  // namespace

void detail::check_keys(const nlohmann::json& config, const std::set<std::string>& allowed) {
  HPCTRAIN_REQUIRE(config.is_object(), "model config must be a JSON object");
  for (const auto& item : config.items()) {
    HPCTRAIN_REQUIRE(allowed.count(item.key()) != 0,
                     "unknown key '" + item.key() + "' in the config of model '" +
                         config.value("name", std::string("?")) + "'");
  }
}

template <class T>
void register_model(const std::string& name, ModelFactory<T> factory) {
  HPCTRAIN_REQUIRE(!name.empty() && factory, "register_model needs a name and a factory");
  Registry<T>& r = registry<T>();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::uint64_t model_seed(const nlohmann::json& config) { return config.value("seed", std::uint64_t{0}); }

template <class T>
std::unique_ptr<Sequential<T>> plan_model(const nlohmann::json& config) {
  HPCTRAIN_REQUIRE(config.is_object() && config.contains("name") && config["name"].is_string(),
                   "model config needs a string \"name\"");
  const std::string name = config["name"].get<std::string>();
  ModelFactory<T> factory;
  {
    Registry<T>& r = registry<T>();
    const std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.factories.find(name);
    if (it == r.factories.end()) {
      std::string known;
      for (const auto& kv : r.factories) known += (known.empty() ? "" : ", ") + kv.first;
      HPCTRAIN_FAIL("unknown model '" + name + "' (registered: " + known + ")");
    }
    factory = it->second;
  }
  std::unique_ptr<Sequential<T>> model;
  try {
    model = factory(config);
  } catch (const nlohmann::json::exception& e) {
    HPCTRAIN_FAIL("model config for '" + name + "': " + e.what());
  }
  HPCTRAIN_REQUIRE(model != nullptr, "factory of model '" + name + "' returned nothing");
  return model;
}

template <class T>
std::unique_ptr<Sequential<T>> build_model(const nlohmann::json& config) {
  std::unique_ptr<Sequential<T>> model = plan_model<T>(config);
  if (!model->finalized()) model->finalize(model_seed(config));
  return model;
}

template <class T>
std::vector<std::string> registered_models() {
  Registry<T>& r = registry<T>();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& kv : r.factories) names.push_back(kv.first);
  return names;
}

#define HPCTRAIN_INSTANTIATE(T)                                                  \
  template void register_model<T>(const std::string&, ModelFactory<T>);         \
  template std::unique_ptr<Sequential<T>> build_model<T>(const nlohmann::json&); \
  template std::unique_ptr<Sequential<T>> plan_model<T>(const nlohmann::json&);  \
  template std::vector<std::string> registered_models<T>();

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::models
