#include "shared_state_sums.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace hpctrain::train {

namespace {

using Index = Kokkos::View<std::int64_t*, core::MemSpace>;

Index to_device(const char* label, const std::vector<std::int64_t>& host) {
  Index out(std::string(label), host.size());
  const auto mirror = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < host.size(); ++i) mirror(i) = host[i];
  Kokkos::deep_copy(out, mirror);
  return out;
}

}  // namespace

SharedStateSums::SharedStateSums(const models::Sequential<float>& model, const ShardLayout& layout,
                                 bool shard_is_full) {
  std::vector<std::int64_t> owned, global;
  for (const models::ParameterInfo& info : model.parameter_info()) {
    if (info.trainable) continue;
    const ShardRange mine = layout.slice_of(info.offset, info.count);
    for (std::int64_t g = info.offset; g < info.offset + info.count; ++g) {
      global.push_back(g);
      const bool is_mine = g >= mine.global_offset && g < mine.global_offset + mine.count;
      owned.push_back(!is_mine ? -1 : shard_is_full ? g : mine.local_offset + (g - mine.global_offset));
    }
  }
  count_ = static_cast<std::int64_t>(global.size());
  if (count_ == 0) return;
  owned_ = to_device("hpctrain::SharedStateSums::owned", owned);
  global_ = to_device("hpctrain::SharedStateSums::global", global);
  packed_ = core::Vec<float>("hpctrain::SharedStateSums::packed", static_cast<std::size_t>(count_));
}

std::uint64_t SharedStateSums::bytes() const noexcept {
  return static_cast<std::uint64_t>(count_) * (sizeof(float) + 2 * sizeof(std::int64_t));
}

double SharedStateSums::share(coll::Communicator& comm, const core::Vec<float>& shard,
                              const core::Vec<float>& full_gradient) {
  if (count_ == 0) return 0.0;
  const Index owned = owned_, global = global_;
  const core::Vec<float> packed = packed_;
  Kokkos::parallel_for(
      "hpctrain::SharedStateSums::pack", Kokkos::RangePolicy<core::ExecSpace>(0, count_),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t at = owned(i);
        packed(i) = at < 0 ? 0.0f : shard(at);
        if (at >= 0) shard(at) = 0.0f;
      });
  Kokkos::fence();
  const auto start = std::chrono::steady_clock::now();
  comm.allreduce(packed.data(), static_cast<std::size_t>(count_), coll::ReduceOp::sum);
  const auto end = std::chrono::steady_clock::now();
  Kokkos::parallel_for(
      "hpctrain::SharedStateSums::unpack", Kokkos::RangePolicy<core::ExecSpace>(0, count_),
      KOKKOS_LAMBDA(const std::int64_t i) { full_gradient(global(i)) = packed(i); });
  return std::chrono::duration<double>(end - start).count();
}

}  // namespace hpctrain::train
