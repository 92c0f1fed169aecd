#include "shared_state_sums.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace hpctrain::train {

namespace {

template <class T>
Kokkos::View<T*, core::MemSpace> to_device(const char* label, const std::vector<T>& host) {
  Kokkos::View<T*, core::MemSpace> out(std::string(label), host.size());
  const auto mirror = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < host.size(); ++i) mirror(i) = host[i];
  Kokkos::deep_copy(out, mirror);
  return out;
}

}  // namespace

SharedStateSums::SharedStateSums(const models::Sequential<float>& model, const ShardLayout& layout) {
  std::vector<std::int64_t> global;
  std::vector<std::uint8_t> mine_flags;
  for (const models::ParameterInfo& info : model.parameter_info()) {
    if (info.trainable) continue;
    const ShardRange mine = layout.slice_of(info.offset, info.count);
    for (std::int64_t g = info.offset; g < info.offset + info.count; ++g) {
      global.push_back(g);
      mine_flags.push_back(g >= mine.global_offset && g < mine.global_offset + mine.count ? 1 : 0);
    }
  }
  count_ = static_cast<std::int64_t>(global.size());
  if (count_ == 0) return;
  mine_ = to_device("hpctrain::SharedStateSums::mine", mine_flags);
  global_ = to_device("hpctrain::SharedStateSums::global", global);
  packed_ = core::Vec<float>("hpctrain::SharedStateSums::packed", static_cast<std::size_t>(count_));
}

std::uint64_t SharedStateSums::bytes() const noexcept {
  return static_cast<std::uint64_t>(count_) * (sizeof(float) + sizeof(std::int64_t) + sizeof(std::uint8_t));
}

double SharedStateSums::share(coll::Communicator& comm, const core::Vec<float>& gradient) {
  if (count_ == 0) return 0.0;
  const Kokkos::View<std::uint8_t*, core::MemSpace> mine = mine_;
  const Kokkos::View<std::int64_t*, core::MemSpace> global = global_;
  const core::Vec<float> packed = packed_;
  Kokkos::parallel_for(
      "hpctrain::SharedStateSums::pack", Kokkos::RangePolicy<core::ExecSpace>(0, count_),
      KOKKOS_LAMBDA(const std::int64_t i) { packed(i) = mine(i) != 0 ? gradient(global(i)) : 0.0f; });
  Kokkos::fence();
  const auto start = std::chrono::steady_clock::now();
  comm.allreduce(packed.data(), static_cast<std::size_t>(count_), coll::ReduceOp::sum);
  const auto end = std::chrono::steady_clock::now();
  Kokkos::parallel_for(
      "hpctrain::SharedStateSums::unpack", Kokkos::RangePolicy<core::ExecSpace>(0, count_),
      KOKKOS_LAMBDA(const std::int64_t i) { gradient(global(i)) = packed(i); });
  return std::chrono::duration<double>(end - start).count();
}

}  // namespace hpctrain::train
