// The `transformer` model: a small ViT-style encoder over image patches (Dosovitskiy et al.
// 2021), pre-norm blocks as in ViT:
//
//   tokens:  PatchEmbedding (p x p patches -> dim, class token, learned positions)
//   block:   x + MHSA(LayerNorm(x));  x + MLP(LayerNorm(x)),
//            MLP = TokenDense(dim -> mlp_dim) - GELU (tanh form) - TokenDense(mlp_dim -> dim)
//   head:    LayerNorm - class token - dense(dim -> classes)
//
// Each residual connection is a Residual layer with an identity shortcut.

#include "model_builders.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/models/blocks.hpp"
#include "hpctrain/models/layers.hpp"
#include "hpctrain/models/transformer_layers.hpp"

namespace hpctrain::models::detail {

namespace {

struct TransformerConfig {
  Shape input_shape;
  std::int64_t classes, patch, dim, depth, heads, mlp_dim;
  std::uint64_t seed;

  explicit TransformerConfig(const nlohmann::json& c)
      : input_shape(c.value("input_shape", Shape{1, 28, 28})),
        classes(c.value("classes", std::int64_t{10})),
        patch(c.value("patch", std::int64_t{7})),
        dim(c.value("dim", std::int64_t{64})),
        depth(c.value("depth", std::int64_t{4})),
        heads(c.value("heads", std::int64_t{4})),
        mlp_dim(c.value("mlp_dim", std::int64_t{128})),
        seed(c.value("seed", std::uint64_t{0})) {
    HPCTRAIN_REQUIRE(input_shape.size() == 3, "transformer input_shape must be [channels, height, width], got " +
                                                  core::shape_string(input_shape));
    HPCTRAIN_REQUIRE(classes >= 2, "a classifier needs at least 2 classes");
    HPCTRAIN_REQUIRE(patch > 0 && dim > 0 && heads > 0 && mlp_dim > 0,
                     "transformer patch, dim, heads and mlp_dim must be positive");
    HPCTRAIN_REQUIRE(depth >= 1, "transformer depth (encoder blocks) must be at least 1");
  }
};

template <class T>
void add_encoder_block(Sequential<T>& model, const TransformerConfig& c) {
  const Shape tokens = model.output_shape();
  typename Residual<T>::Chain attention, mlp;
  attention.push_back(std::make_unique<LayerNorm<T>>(c.dim));
  attention.push_back(std::make_unique<MultiHeadSelfAttention<T>>(c.dim, c.heads));
  model.add(std::make_unique<Residual<T>>(tokens, std::move(attention)));
  // PyTorch's Linear default (fan-in uniform) in the MLP, as its TransformerEncoderLayer.
  mlp.push_back(std::make_unique<LayerNorm<T>>(c.dim));
  mlp.push_back(std::make_unique<TokenDense<T>>(c.dim, c.mlp_dim, core::Init::fan_in_uniform));
  mlp.push_back(std::make_unique<ActivationLayer<T>>(Activation::gelu));
  mlp.push_back(std::make_unique<TokenDense<T>>(c.mlp_dim, c.dim, core::Init::fan_in_uniform));
  model.add(std::make_unique<Residual<T>>(tokens, std::move(mlp)));
}

}  // namespace

template <class T>
std::unique_ptr<Sequential<T>> build_transformer(const nlohmann::json& config) {
  check_keys(config, {"name", "input_shape", "classes", "patch", "dim", "depth", "heads", "mlp_dim", "seed"});
  const TransformerConfig c(config);
  auto model = std::make_unique<Sequential<T>>(c.input_shape);
  model->add(std::make_unique<PatchEmbedding<T>>(c.input_shape[0], c.input_shape[1], c.input_shape[2], c.patch,
                                                 c.dim));
  for (std::int64_t b = 0; b < c.depth; ++b) add_encoder_block(*model, c);
  model->add(std::make_unique<LayerNorm<T>>(c.dim));
  model->add(std::make_unique<SelectToken<T>>(0));
  model->add(std::make_unique<Dense<T>>(c.dim, c.classes, core::Init::fan_in_uniform));
  return model;
}

template std::unique_ptr<Sequential<float>> build_transformer<float>(const nlohmann::json&);
template std::unique_ptr<Sequential<double>> build_transformer<double>(const nlohmann::json&);

}  // namespace hpctrain::models::detail
