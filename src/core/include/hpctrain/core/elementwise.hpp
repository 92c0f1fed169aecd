#pragma once
/// @file
/// Element-wise and broadcast kernels: bias, activations, dropout.
///
/// Backward kernels *overwrite* their input-gradient output; kernels that produce parameter
/// gradients (bias) *accumulate*, so gradients of several micro-batches add up until the model
/// zeroes them.

#include "hpctrain/core/tensor.hpp"

#include <cstdint>

namespace hpctrain::core {

/// y[i, j] += b[j] for a [rows, cols] y.
template <class T>
void add_row_bias(const Matrix<T>& y, const Vec<T>& b);

/// db[j] += sum_i dy[i, j].
template <class T>
void accumulate_column_sums(const Matrix<T>& dy, const Vec<T>& db);

/// db[j] = the column sums of dy's rows cut into leaves of `leaf_rows` (the last may be shorter),
/// added over the pairwise leaf tree of core/leaf_tree.hpp; leaf l is what
/// accumulate_column_sums gives for its rows into a zeroed vector. Overwrites db.
template <class T>
void column_sums_leaf_tree(std::int64_t leaf_rows, const Matrix<T>& dy, const Vec<T>& db);

/// db[i] += sum_j m[i, j].
template <class T>
void accumulate_row_sums(const Matrix<T>& m, const Vec<T>& db);

/// y = max(x, 0).
template <class T>
void relu_forward(const Vec<T>& x, const Vec<T>& y);
/// dx = dy where y > 0, else 0 (y is the forward output).
template <class T>
void relu_backward(const Vec<T>& y, const Vec<T>& dy, const Vec<T>& dx);

/// GELU, tanh approximation (Hendrycks & Gimpel; the form GPT-2 and PyTorch's
/// approximate="tanh" use): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
void gelu_forward(const Vec<T>& x, const Vec<T>& y);
/// dx = dy * d gelu(x)/dx (x is the forward input).
template <class T>
void gelu_backward(const Vec<T>& x, const Vec<T>& dy, const Vec<T>& dx);
/// gelu_forward / gelu_backward in leaves of `leaf` elements (deterministic training's grouped
/// passes; the last leaf shorter), each leaf a call of its own, so its elements have the bits a
/// call on that leaf alone gives them (oneDNN's element-wise kernels are not documented to give
/// an element the same bits at any length). Side by side on the rank's held threads where
/// deterministic training holds oneDNN at one thread (float on oneDNN). `leaf` <= 0 or no
/// fewer than the elements: one call.
template <class T>
void gelu_forward_in_leaves(std::int64_t leaf, const Vec<T>& x, const Vec<T>& y);
template <class T>
void gelu_backward_in_leaves(std::int64_t leaf, const Vec<T>& x, const Vec<T>& dy, const Vec<T>& dx);

/// Where in the random stream a dropout mask lies. Element e of local sample s is kept iff
/// uniform(hash(stream, step, first_sample + s, e)) >= rate, so the mask depends only on the
/// global sample index, never on the rank count or the thread schedule.
struct DropoutKey {
  std::uint64_t stream = 0;       ///< hash of (seed, layer index)
  std::uint64_t step = 0;         ///< training step
  std::int64_t first_sample = 0;  ///< global index of the first local sample
};

/// out = in * mask / (1 - rate); the same call is the forward and the backward pass.
template <class T>
void dropout_apply(const DropoutKey& key, double rate, std::int64_t elements_per_sample,
                   const Vec<T>& in, const Vec<T>& out);

/// v = 0 (+0.0 everywhere). On host memory libc's vectorised memset (the Kokkos fill it
/// replaces was 3.8 % of an MLP step in a perf profile: a step zeroes 2 MiB of gradients).
template <class T>
void set_zero(const Vec<T>& v);

/// The number of elements of v that are NaN or infinite: on the host, elements whose exponent
/// bits are all ones, counted in integer lanes; elsewhere x - x != 0 (0 exactly when x is finite).
template <class T>
std::int64_t count_nonfinite(const Vec<T>& v);

/// y = alpha * x + y.
template <class T>
void axpy(T alpha, const Vec<T>& x, const Vec<T>& y);

/// out = a + b, then max(out, 0) when `relu` (a residual connection and its ReLU in one pass).
template <class T>
void add(const Vec<T>& a, const Vec<T>& b, bool relu, const Vec<T>& out);

}  // namespace hpctrain::core
