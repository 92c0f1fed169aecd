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

// The same for the shm reduce-scatter and all-gather, interleaved with shm all-reduces on the
// same counters and staging buffers: in-place balanced reduce-scatters, block all-gathers and
// all-reduces in turn, sizes changing every call (one step to many), data changing every call,
// checked exactly (int64).
inline std::size_t shm_scatter_gather_stress(Communicator& comm, int iterations, std::string* first) {
  const int p = comm.size(), r = comm.rank();
  const auto up = static_cast<std::size_t>(p);
  std::size_t bad = 0;
  auto value = [](int it, int rank, std::size_t i) {
    return static_cast<std::int64_t>((static_cast<std::size_t>(it) * 1000003u + static_cast<std::size_t>(rank) * 7919u +
                                      i * 31u) % 2000003u) - 1000001;
  };
  auto fail = [&](int it, const char* what, std::size_t i, std::int64_t got, std::int64_t want) {
    if (bad++ == 0 && first)
      *first = std::string(what) + ": rank " + std::to_string(r) + " call " + std::to_string(it) + " element " +
               std::to_string(i) + ": got " + std::to_string(got) + ", want " + std::to_string(want);
  };
  std::vector<std::int64_t> buf, all;
  for (int it = 0; it < iterations; ++it) {
    const std::size_t count = 1 + static_cast<std::size_t>(mix(static_cast<std::uint64_t>(it))) % 6000;
    auto sum = [&](std::size_t i) {
      std::int64_t want = 0;
      for (int q = 0; q < p; ++q) want += value(it, q, i);
      return want;
    };
    buf.resize(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = value(it, r, i);
    if (it % 3 == 0) {
      comm.ireduce_scatter_in_place(buf.data(), count, DataType::i64, ReduceOp::sum, Algorithm::shm).wait();
      const BlockRange own = balanced_block(count, p, r);
      for (std::size_t i = own.offset; i < own.offset + own.count; ++i)
        if (buf[i] != sum(i)) fail(it, "reduce_scatter_in_place", i, buf[i], sum(i));
    } else if (it % 3 == 1) {
      all.assign(count * up, -1);
      comm.allgather(buf.data(), all.data(), count, DataType::i64, Algorithm::shm);
      for (std::size_t i = 0; i < all.size(); ++i) {
        const std::int64_t want = value(it, static_cast<int>(i / count), i % count);
        if (all[i] != want) fail(it, "allgather", i, all[i], want);
      }
    } else {
      comm.allreduce(buf.data(), buf.data(), count, DataType::i64, ReduceOp::sum, Algorithm::shm);
      for (std::size_t i = 0; i < count; ++i)
        if (buf[i] != sum(i)) fail(it, "allreduce", i, buf[i], sum(i));
    }
  }
  return bad;
}

}  // namespace hpctrain::coll::testing
