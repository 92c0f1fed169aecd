// The `resnet` model: a small residual network for small images (He et al. 2016, the CIFAR
// variant: 3x3 convolutions, batch norm, identity shortcuts, a 1x1 projection where a stage
// halves the resolution, global average pooling, one dense classifier).
//
//   stem:   conv3x3(C_in -> c0) - BN+ReLU
//   stage s (widths c_s, `blocks` residual blocks each; the first block of stage s > 0 has
//           stride 2 and a conv1x1(stride 2) - BN shortcut):
//           block: ReLU([conv3x3(stride) - BN+ReLU - conv3x3 - BN] + shortcut)
// ("BN+ReLU": batch norm with its ReLU fused; the block's ReLU is fused into its sum.)
//   head:   global average pooling - dense(c_last -> classes)

#include "model_builders.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/models/blocks.hpp"
#include "hpctrain/models/layers.hpp"

namespace hpctrain::models::detail {

namespace {

struct ResnetConfig {
  Shape input_shape;
  std::int64_t classes;
  std::vector<std::int64_t> channels;
  std::int64_t blocks;
  double bn_momentum;
  core::Init init;
  std::uint64_t seed;

  explicit ResnetConfig(const nlohmann::json& c)
      : input_shape(c.value("input_shape", Shape{1, 28, 28})),
        classes(c.value("classes", std::int64_t{10})),
        channels(c.value("channels", std::vector<std::int64_t>{16, 32, 64})),
        blocks(c.value("blocks", std::int64_t{1})),
        bn_momentum(c.value("bn_momentum", 0.1)),
        // Kaiming normal, as torchvision's ResNet initialises its convolutions.
        init(core::parse_init(c.value("init", std::string("he")))),
        seed(c.value("seed", std::uint64_t{0})) {
    HPCTRAIN_REQUIRE(input_shape.size() == 3, "resnet input_shape must be [channels, height, width], got " +
                                                  core::shape_string(input_shape));
    HPCTRAIN_REQUIRE(classes >= 2, "a classifier needs at least 2 classes");
    HPCTRAIN_REQUIRE(!channels.empty(), "resnet channels must list at least one stage width");
    for (const std::int64_t ch : channels) HPCTRAIN_REQUIRE(ch > 0, "resnet channels must be positive");
    HPCTRAIN_REQUIRE(blocks >= 1, "resnet blocks (per stage) must be at least 1");
  }
};

template <class T>
void conv_bn(typename Residual<T>::Chain& chain, const ResnetConfig& c, std::int64_t in, std::int64_t out,
             std::int64_t kernel, std::int64_t stride, bool relu = false) {
  chain.push_back(std::make_unique<Conv2D<T>>(in, out, kernel, stride, kernel / 2, c.init));
  chain.push_back(std::make_unique<BatchNorm2D<T>>(out, c.bn_momentum, 1e-5, relu));
}

template <class T>
std::unique_ptr<Layer<T>> basic_block(const ResnetConfig& c, const Shape& in_shape, std::int64_t out,
                                      std::int64_t stride) {
  const std::int64_t in = in_shape[0];
  typename Residual<T>::Chain main, shortcut;
  conv_bn<T>(main, c, in, out, 3, stride, /*relu=*/true);
  conv_bn<T>(main, c, out, out, 3, 1);
  if (stride != 1 || in != out) conv_bn<T>(shortcut, c, in, out, 1, stride);
  return std::make_unique<Residual<T>>(in_shape, std::move(main), std::move(shortcut), /*relu=*/true);
}

}  // namespace

template <class T>
std::unique_ptr<Sequential<T>> build_resnet(const nlohmann::json& config) {
  check_keys(config, {"name", "input_shape", "classes", "channels", "blocks", "bn_momentum", "init", "seed"});
  const ResnetConfig c(config);
  auto model = std::make_unique<Sequential<T>>(c.input_shape);
  model->add(std::make_unique<Conv2D<T>>(c.input_shape[0], c.channels[0], 3, 1, 1, c.init));
  model->add(std::make_unique<BatchNorm2D<T>>(c.channels[0], c.bn_momentum, 1e-5, /*relu=*/true));
  for (std::size_t s = 0; s < c.channels.size(); ++s) {
    for (std::int64_t b = 0; b < c.blocks; ++b) {
      const std::int64_t stride = s > 0 && b == 0 ? 2 : 1;
      model->add(basic_block<T>(c, model->output_shape(), c.channels[s], stride));
    }
  }
  model->add(std::make_unique<GlobalAvgPool2D<T>>());
  // The classifier feeds the softmax, not a ReLU: PyTorch's Linear default (fan-in uniform).
  model->add(std::make_unique<Dense<T>>(c.channels.back(), c.classes, core::Init::fan_in_uniform));
  return model;
}

template std::unique_ptr<Sequential<float>> build_resnet<float>(const nlohmann::json&);
template std::unique_ptr<Sequential<double>> build_resnet<double>(const nlohmann::json&);

}  // namespace hpctrain::models::detail
