#include "hpctrain/core/tensor.hpp"

#include "hpctrain/base/error.hpp"
#include "host_parallel.hpp"

#include <cstring>
#include <sstream>

namespace hpctrain::core {

std::int64_t shape_size(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    HPCTRAIN_REQUIRE(d >= 0, "negative extent in shape " + shape_string(shape));
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

template <class T>
Tensor<T>::Tensor(Vec<T> storage, Shape tensor_shape)
    : data(std::move(storage)), shape(std::move(tensor_shape)) {
  HPCTRAIN_REQUIRE(shape_size(shape) == static_cast<std::int64_t>(data.extent(0)),
                   "tensor shape " + shape_string(shape) + " does not match storage of " +
                       std::to_string(data.extent(0)) + " elements");
}

template <class T>
std::int64_t Tensor<T>::dim(std::int64_t i) const {
  const std::int64_t r = rank();
  const std::int64_t k = i < 0 ? r + i : i;
  HPCTRAIN_REQUIRE(k >= 0 && k < r,
                   "dimension " + std::to_string(i) + " out of range for shape " +
                       shape_string(shape));
  return shape[static_cast<std::size_t>(k)];
}

template <class T>
Tensor<T> Tensor<T>::reshaped(Shape new_shape) const {
  return Tensor<T>(data, std::move(new_shape));
}

template <class T>
Matrix<T> Tensor<T>::matrix(std::int64_t rows) const {
  HPCTRAIN_REQUIRE(rows > 0 && size() % rows == 0,
                   "cannot view a tensor of shape " + shape_string(shape) + " as " +
                       std::to_string(rows) + " rows");
  return as_matrix(data, rows, size() / rows);
}

template <class T>
Tensor<T> make_tensor(const std::string& label, Shape shape) {
  const std::int64_t n = shape_size(shape);
  return Tensor<T>(Vec<T>(label, static_cast<std::size_t>(n)), std::move(shape));
}

template <class T>
void ensure_shape(Tensor<T>& t, const std::string& label, const Shape& shape) {
  if (t.data.data() != nullptr && t.size() == shape_size(shape)) {
    t.shape = shape;
  } else {
    t = make_tensor<T>(label, shape);
  }
}

template <class T>
Matrix<T> as_matrix(const Vec<T>& v, std::int64_t rows, std::int64_t cols) {
  HPCTRAIN_REQUIRE(rows >= 0 && cols >= 0 &&
                       rows * cols <= static_cast<std::int64_t>(v.extent(0)),
                   "matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                       "] does not fit in " + std::to_string(v.extent(0)) + " elements");
  return Matrix<T>(v.data(), static_cast<std::size_t>(rows), static_cast<std::size_t>(cols));
}

template <class T>
void fill(const Vec<T>& v, T value) {
  Kokkos::deep_copy(v, value);
}

template <class T>
std::vector<T> to_host(const Vec<T>& v) {
  std::vector<T> host(v.extent(0));
  Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(host.data(),
                                                                                 host.size());
  Kokkos::deep_copy(h, v);
  return host;
}

template <class T>
void from_host(const Vec<T>& v, const std::vector<T>& host) {
  HPCTRAIN_REQUIRE(host.size() == v.extent(0),
                   "from_host: " + std::to_string(host.size()) + " values for a View of " +
                       std::to_string(v.extent(0)));
  Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
      host.data(), host.size());
  Kokkos::deep_copy(v, h);
}

template <class T>
void gather_rows_from_host(const Vec<T>& v, const T* table, std::int64_t width, const std::int64_t* rows,
                           std::int64_t count) {
  HPCTRAIN_REQUIRE(width >= 0 && count >= 0 && static_cast<std::int64_t>(v.extent(0)) == width * count,
                   "gather_rows_from_host: " + std::to_string(count) + " rows of " + std::to_string(width) +
                       " for a View of " + std::to_string(v.extent(0)));
  const auto bytes = static_cast<std::size_t>(width) * sizeof(T);
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    ExecSpace().fence();
    T* const out = v.data();
    // One row per index: the rows are scattered over the table (a shuffled batch), so two
    // threads keep twice the cache misses in flight.
    detail::host_parallel_for(
        "hpctrain::gather_rows_from_host", count,
        [=](std::int64_t k) { std::memcpy(out + k * width, table + rows[k] * width, bytes); }, width);
  } else {
    std::vector<T> host(static_cast<std::size_t>(width * count));
    for (std::int64_t k = 0; k < count; ++k) std::memcpy(host.data() + k * width, table + rows[k] * width, bytes);
    from_host(v, host);
  }
}

template <class T>
Tensor<T> tensor_from_host(const std::string& label, Shape shape, const std::vector<T>& host) {
  Tensor<T> t = make_tensor<T>(label, std::move(shape));
  from_host(t.data, host);
  return t;
}

template <class To, class From>
Tensor<To> convert(const Tensor<From>& src, const std::string& label) {
  Tensor<To> dst = make_tensor<To>(label, src.shape);
  const Vec<From> s = src.data;
  const Vec<To> d = dst.data;
  Kokkos::parallel_for(
      "hpctrain::convert", Kokkos::RangePolicy<ExecSpace>(0, src.size()),
      KOKKOS_LAMBDA(const std::int64_t i) { d(i) = static_cast<To>(s(i)); });
  return dst;
}

#define HPCTRAIN_INSTANTIATE(T)                                                          \
  template struct Tensor<T>;                                                             \
  template Tensor<T> make_tensor<T>(const std::string&, Shape);                          \
  template void ensure_shape<T>(Tensor<T>&, const std::string&, const Shape&);           \
  template Matrix<T> as_matrix<T>(const Vec<T>&, std::int64_t, std::int64_t);           \
  template void fill<T>(const Vec<T>&, T);                                               \
  template std::vector<T> to_host<T>(const Vec<T>&);                                     \
  template void from_host<T>(const Vec<T>&, const std::vector<T>&);                      \
  template void gather_rows_from_host<T>(const Vec<T>&, const T*, std::int64_t, const std::int64_t*, std::int64_t); \
  template Tensor<T> tensor_from_host<T>(const std::string&, Shape, const std::vector<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)
template std::vector<std::int32_t> to_host<std::int32_t>(const Vec<std::int32_t>&);
template void from_host<std::int32_t>(const Vec<std::int32_t>&, const std::vector<std::int32_t>&);
template std::vector<std::int64_t> to_host<std::int64_t>(const Vec<std::int64_t>&);
template Tensor<double> convert<double, float>(const Tensor<float>&, const std::string&);
template Tensor<float> convert<float, double>(const Tensor<double>&, const std::string&);
template Tensor<double> convert<double, double>(const Tensor<double>&, const std::string&);
template Tensor<float> convert<float, float>(const Tensor<float>&, const std::string&);

}  // namespace hpctrain::core
