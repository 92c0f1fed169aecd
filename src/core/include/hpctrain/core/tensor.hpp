#pragma once
/// @file
/// Tensors: labelled 1-D Kokkos Views in the default execution space's memory space, plus a
/// shape. Storage is always contiguous, so a tensor can be a window into a larger buffer (a
/// model's parameters are windows into one parameter buffer) and any tensor can be seen as a
/// row-major matrix for gemm.

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hpctrain::core {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;

/// Contiguous 1-D device storage.
template <class T>
using Vec = Kokkos::View<T*, MemSpace>;

/// A row-major window onto contiguous storage (unmanaged: the owning Vec keeps it alive).
template <class T>
using Matrix =
    Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// Class labels, one per sample.
using Labels = Kokkos::View<std::int32_t*, MemSpace>;

using Shape = std::vector<std::int64_t>;

/// Product of the extents (1 for an empty shape).
std::int64_t shape_size(const Shape& shape);
/// "[2, 3, 4]".
std::string shape_string(const Shape& shape);

/// A View with a shape. Copies share storage (like Views).
template <class T>
struct Tensor {
  Vec<T> data;
  Shape shape;

  Tensor() = default;
  /// Throws unless the shape's size equals the View's extent.
  Tensor(Vec<T> storage, Shape tensor_shape);

  std::int64_t size() const { return static_cast<std::int64_t>(data.extent(0)); }
  std::int64_t rank() const { return static_cast<std::int64_t>(shape.size()); }
  /// Extent i; negative i counts from the back.
  std::int64_t dim(std::int64_t i) const;
  /// Same storage, another shape of the same size.
  Tensor reshaped(Shape new_shape) const;
  /// The storage as a [rows, size/rows] row-major matrix.
  Matrix<T> matrix(std::int64_t rows) const;
};

template <class T>
struct NamedTensor {
  std::string name;
  Tensor<T> tensor;
};

/// A new zero-filled tensor with a labelled View.
template <class T>
Tensor<T> make_tensor(const std::string& label, Shape shape);

/// Makes `t` a tensor of `shape`, reusing its storage when the size is unchanged (contents are
/// then left as they were) and allocating a fresh zeroed View otherwise.
template <class T>
void ensure_shape(Tensor<T>& t, const std::string& label, const Shape& shape);

/// Elements [first, first + count) of `v`, sharing its storage (Kokkos bounds-checks in debug
/// builds only: callers stay inside v).
template <class T>
Vec<T> slice(const Vec<T>& v, std::int64_t first, std::int64_t count) {
  return Vec<T>(Kokkos::subview(v, std::make_pair(first, first + count)));
}

/// Row-major matrix view over the first rows*cols elements of `v` (throws if `v` is shorter).
template <class T>
Matrix<T> as_matrix(const Vec<T>& v, std::int64_t rows, std::int64_t cols);

/// Sets every element to `value`.
template <class T>
void fill(const Vec<T>& v, T value);

/// Host copy of device data (I/O boundaries and tests only).
template <class T>
std::vector<T> to_host(const Vec<T>& v);

/// Copies host data into device storage of the same size.
template <class T>
void from_host(const Vec<T>& v, const std::vector<T>& host);

/// Rows rows[0], ..., rows[count - 1] of the host table `table` (row-major, `width` elements a
/// row) copied in that order into `v` (count x width elements): a batch gathered from a data
/// set held in memory. Where `v` is in host memory, on the rank's threads (each row a copy,
/// so the same bytes at any thread count); elsewhere through a host buffer.
template <class T>
void gather_rows_from_host(const Vec<T>& v, const T* table, std::int64_t width, const std::int64_t* rows,
                           std::int64_t count);

/// A device tensor holding `host` data.
template <class T>
Tensor<T> tensor_from_host(const std::string& label, Shape shape, const std::vector<T>& host);

/// A device copy of `src` converted to another scalar type (float <-> double in tests).
template <class To, class From>
Tensor<To> convert(const Tensor<From>& src, const std::string& label);

}  // namespace hpctrain::core
