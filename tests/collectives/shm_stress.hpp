#pragma once
// The back-to-back all-reduce stress check shared by the loopback and MPI tests of shm and
// hierarchical.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "reference.hpp"

namespace hpctrain::coll::testing {

// Many back-to-back all-reduces with data that changes every call, checked exactly (int64): a
// rank that overwrites its shared staging buffer while a peer still reads it (a missing "slot
// free" barrier or buffer alternation between calls or segments), or reads a peer's buffer
// before the peer's data is published (a missing release/acquire pair), gives wrong sums here.
// Small (one-step) and segmented calls alternate, in place and out of place.
inline std::size_t shm_stress(Communicator& comm, Algorithm algo, int iterations, std::string* first) {
  const int p = comm.size(), r = comm.rank();
  std::size_t bad = 0;
  std::vector<std::int64_t> in, out;
  for (int it = 0; it < iterations; ++it) {
    const std::size_t h = static_cast<std::size_t>(mix(static_cast<std::uint64_t>(it)));
    // Small: up to 1 KiB (one step); segmented: 8..40 KiB over 4 KiB segments.
    const std::size_t count = it % 2 ? 1 + h % 128 : 1024 + h % 4096;
    in.resize(count);
    out.assign(count, -1);
    auto value = [&](int rank, std::size_t i) {
      return static_cast<std::int64_t>((static_cast<std::size_t>(it) * 1000003u + static_cast<std::size_t>(rank) * 7919u +
                                        i * 31u) % 2000003u) - 1000001;
    };
    for (std::size_t i = 0; i < count; ++i) in[i] = value(r, i);
    const bool in_place = (h >> 20) & 1;
    std::int64_t* result = in_place ? in.data() : out.data();
    comm.allreduce(in.data(), result, count, DataType::i64, ReduceOp::sum, algo);
    for (std::size_t i = 0; i < count; ++i) {
      std::int64_t want = 0;
      for (int q = 0; q < p; ++q) want += value(q, i);
      if (result[i] != want) {
        if (bad++ == 0 && first)
          *first = "rank " + std::to_string(r) + " call " + std::to_string(it) + " count " + std::to_string(count) +
                   " element " + std::to_string(i) + ": got " + std::to_string(result[i]) + ", want " +
                   std::to_string(want);
      }
    }
  }
  return bad;
}

}  // namespace hpctrain::coll::testing
