// Patch embedding. Forward: a gather copies each p x p patch of x[N, C, H, W] into row
// n P + i of patches[N P, C p p] (column c p p + a p + b holds x[n, c, i_h p + a, i_w p + b]);
// one gemm z = patches W^T + bias; a kernel writes y[n, 0] = class_token + position[0] and
// y[n, 1 + i] = z[n P + i] + position[1 + i]. Backward: dposition += sum_n dy[n],
// dclass_token += sum_n dy[n, 0], dz = dy[:, 1:], then Dense's backward on the patch rows
// and a scatter of dpatches back to dx — patches neither overlap nor leave gaps, so every
// input element is written exactly once (no atomics, no zeroing). With leaf rows (L samples a
// leaf) the projection runs in leaves of L P rows and the token sums per leaf, then over the leaf
// tree (split_token_gradients_in_leaves): the gradients of separate passes over the leaves.
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/leaf_tree.hpp"
#include "hpctrain/models/transformer_layers.hpp"
#include "row_affine.hpp"

namespace hpctrain::models {

namespace {

using Range = Kokkos::RangePolicy<core::ExecSpace>;

struct PatchGeometry {
  std::int64_t channels, height, width, patch;
};

/// patches[n P + i, (c p + a) p + b] = x[n, c, i_h p + a, i_w p + b] for patch i = (i_h, i_w)
/// (gather = true), or the reverse assignment (gather = false; patches neither overlap nor
/// leave gaps, so it writes every element of x once). One thread per patch row, so the index
/// arithmetic is two divisions per row rather than eight per element.
template <class T>
void move_patches(const PatchGeometry& g, std::int64_t batch, bool gather, const core::Vec<T>& x,
                  const core::Vec<T>& patches) {
  const std::int64_t c_count = g.channels, h_count = g.height, w_count = g.width, p = g.patch;
  const std::int64_t per_row = w_count / p, count = (h_count / p) * per_row;
  const std::int64_t features = c_count * p * p;
  Kokkos::parallel_for(
      gather ? "hpctrain::patch_embedding::gather" : "hpctrain::patch_embedding::scatter",
      Range(0, batch * count), KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t n = row / count, i = row % count;
        const std::int64_t h0 = (i / per_row) * p, w0 = (i % per_row) * p;
        for (std::int64_t c = 0; c < c_count; ++c) {
          for (std::int64_t a = 0; a < p; ++a) {
            const std::int64_t xi = ((n * c_count + c) * h_count + h0 + a) * w_count + w0;
            const std::int64_t pi = row * features + (c * p + a) * p;
            for (std::int64_t b = 0; b < p; ++b) {
              if (gather) {
                patches(pi + b) = x(xi + b);
              } else {
                x(xi + b) = patches(pi + b);
              }
            }
          }
        }
      });
}

/// y[n, 0] = cls + pos[0]; y[n, 1 + i] = z[n P + i] + pos[1 + i]; one thread per token.
template <class T>
void assemble_tokens(std::int64_t batch, std::int64_t patches, std::int64_t dim,
                     const core::Vec<T>& z, const core::Vec<T>& cls, const core::Vec<T>& pos,
                     const core::Vec<T>& y) {
  const std::int64_t tokens = patches + 1;
  Kokkos::parallel_for(
      "hpctrain::patch_embedding::assemble", Range(0, batch * tokens),
      KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t n = row / tokens, t = row % tokens;
        for (std::int64_t d = 0; d < dim; ++d) {
          const T content = t == 0 ? cls(d) : z((n * patches + t - 1) * dim + d);
          y(row * dim + d) = content + pos(t * dim + d);
        }
      });
}

/// dpos += sum_n dy[n], dcls += sum_n dy[n, 0], dz[n P + i] = dy[n, 1 + i].
template <class T>
void split_token_gradients(std::int64_t batch, std::int64_t patches, std::int64_t dim,
                           const core::Vec<T>& dy, const core::Vec<T>& dcls,
                           const core::Vec<T>& dpos, const core::Vec<T>& dz) {
  const std::int64_t tokens = patches + 1;
  Kokkos::parallel_for(
      "hpctrain::patch_embedding::token_gradients", Range(0, tokens * dim),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const std::int64_t t = e / dim, d = e % dim;
        T s = 0;
        for (std::int64_t n = 0; n < batch; ++n) {
          const T g = dy(n * tokens * dim + e);
          s += g;
          if (t > 0) dz((n * patches + t - 1) * dim + d) = g;
        }
        dpos(e) += s;
        if (t == 0) dcls(d) += s;
      });
}

/// split_token_gradients() with the samples in leaves of `leaf` samples, dpos and dcls
/// *written*: per element, each leaf's sum over its samples in order from zero (what the plain
/// kernel adds into zeroed gradients for that leaf alone) into sums[leaf, tokens dim], then
/// those added over core/leaf_tree.hpp's tree in place. dz as split_token_gradients() gives it.
template <class T>
void split_token_gradients_in_leaves(std::int64_t batch, std::int64_t patches, std::int64_t dim, std::int64_t leaf,
                                     const core::Vec<T>& dy, const core::Vec<T>& dcls, const core::Vec<T>& dpos,
                                     const core::Vec<T>& dz, const core::Vec<T>& sums) {
  const std::int64_t tokens = patches + 1, leaves = core::leaf_count(batch, leaf);
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(sums.extent(0)) >= leaves * tokens * dim,
                   "patch_embedding: leaf sums of " + std::to_string(sums.extent(0)) + " elements for " +
                       std::to_string(leaves) + " leaves");
  Kokkos::parallel_for(
      "hpctrain::patch_embedding::token_gradients_leaf_tree", Range(0, tokens * dim),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const std::int64_t t = e / dim, d = e % dim, size = tokens * dim;
        for (std::int64_t l = 0; l < leaves; ++l) {
          const std::int64_t end = (l + 1) * leaf < batch ? (l + 1) * leaf : batch;
          T s = 0;
          for (std::int64_t n = l * leaf; n < end; ++n) {
            const T g = dy(n * size + e);
            s += g;
            if (t > 0) dz((n * patches + t - 1) * dim + d) = g;
          }
          sums(l * size + e) = s;
        }
        core::leaf_tree_sum_in_place(leaves, [&](std::int64_t l) -> T& { return sums(l * size + e); });
        const T total = leaves > 0 ? sums(e) : T(0);
        dpos(e) = total;
        if (t == 0) dcls(d) = total;
      });
}

}  // namespace

template <class T>
PatchEmbedding<T>::PatchEmbedding(std::int64_t channels, std::int64_t height,
                                  std::int64_t width, std::int64_t patch, std::int64_t dim)
    : channels_(channels), height_(height), width_(width), patch_(patch), dim_(dim) {
  HPCTRAIN_REQUIRE(channels_ > 0 && height_ > 0 && width_ > 0 && patch_ > 0 && dim_ > 0,
                   "patch_embedding: channels, height, width, patch and dim must be positive");
  HPCTRAIN_REQUIRE(height_ % patch_ == 0 && width_ % patch_ == 0,
                   "patch_embedding: patch " + std::to_string(patch_) +
                       " does not divide the image " + std::to_string(height_) + " x " +
                       std::to_string(width_));
}

template <class T>
Shape PatchEmbedding<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(s == (Shape{channels_, height_, width_}),
                   "patch_embedding: samples must be " +
                       core::shape_string({channels_, height_, width_}) + ", got " +
                       core::shape_string(s));
  return {patches() + 1, dim_};
}

template <class T>
std::vector<ParameterSpec> PatchEmbedding<T>::parameter_specs() const {
  const std::int64_t f = patch_features();
  return {{"weight", {dim_, f}, core::Init::fan_in_uniform, f, dim_},
          {"bias", {dim_}, core::Init::zeros, f, dim_},
          {"class_token", {dim_}, core::Init::xavier_uniform, dim_, dim_},
          {"position", {patches() + 1, dim_}, core::Init::xavier_uniform, dim_, dim_}};
}

template <class T>
Tensor<T> PatchEmbedding<T>::forward(const Tensor<T>& x, bool /*train*/) {
  HPCTRAIN_REQUIRE(x.rank() == 4, "patch_embedding: input must be [N, C, H, W], got " +
                                      core::shape_string(x.shape));
  output_shape({x.dim(1), x.dim(2), x.dim(3)});  // throws unless [C, H, W] match
  batch_ = x.dim(0);
  const std::int64_t rows = batch_ * patches(), f = patch_features();
  core::ensure_shape(patches_, "hpctrain::patch_embedding::patches", {rows, f});
  core::ensure_shape(z_, "hpctrain::patch_embedding::z", {rows, dim_});
  core::ensure_shape(y_, "hpctrain::patch_embedding::y", {batch_, patches() + 1, dim_});
  move_patches(PatchGeometry{channels_, height_, width_, patch_}, batch_, true, x.data,
               patches_.data);
  detail::row_affine_forward(patches_.data, rows, f, dim_, this->param(0).data,
                             this->param(1).data, z_.data, this->gradient_leaf_rows() * patches());
  assemble_tokens(batch_, patches(), dim_, z_.data, this->param(2).data, this->param(3).data,
                  y_.data);
  return y_;
}

template <class T>
Tensor<T> PatchEmbedding<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  const std::int64_t rows = batch_ * patches(), f = patch_features();
  HPCTRAIN_REQUIRE(dy.size() == y_.size(), "patch_embedding: output gradient shape " +
                                               core::shape_string(dy.shape) + " does not match");
  core::ensure_shape(dz_, "hpctrain::patch_embedding::dz", {rows, dim_});
  core::Vec<T> dpatches;
  if (need_input_grad) {
    core::ensure_shape(dpatches_, "hpctrain::patch_embedding::dpatches", {rows, f});
    dpatches = dpatches_.data;
  }
  const std::int64_t leaf = this->gradient_leaf_rows();
  if (leaf <= 0) {
    split_token_gradients(batch_, patches(), dim_, dy.data, this->grad(2).data,
                          this->grad(3).data, dz_.data);
  } else {  // every parameter gradient written as the leaves' tree
    core::ensure_shape(leaf_sums_, "hpctrain::patch_embedding::leaf_sums",
                       {core::leaf_count(batch_, leaf), patches() + 1, dim_});
    split_token_gradients_in_leaves(batch_, patches(), dim_, leaf, dy.data, this->grad(2).data,
                                    this->grad(3).data, dz_.data, leaf_sums_.data);
  }
  detail::row_affine_backward(dz_.data, patches_.data, rows, f, dim_, this->param(0).data,
                              this->grad(0).data, this->grad(1).data, dpatches, false, leaf * patches());
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::patch_embedding::dx", {batch_, channels_, height_, width_});
  move_patches(PatchGeometry{channels_, height_, width_, patch_}, batch_, false, dx_.data,
               dpatches_.data);
  return dx_;
}

template class PatchEmbedding<float>;
template class PatchEmbedding<double>;

}  // namespace hpctrain::models
