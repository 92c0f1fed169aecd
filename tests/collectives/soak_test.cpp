// Collectives soak: HPCTRAIN_SOAK_COLLECTIVES (default 10^5) random collectives over the
// loopback transport (ranks are threads), each checked against the independent float64 /
// exact-integer reference of reference.hpp. Sessions of up to 1000 collectives share one rank
// count (1..8) and one random tuning (segment sizes down to 64 bytes, the binomial/double-tree
// threshold, virtual nodes); inside a session every collective draws its kind (blocking
// allreduce in or out of place, up to three queued iallreduces, reduce_scatter, allgather,
// broadcast), algorithm, type, op and element count (log-uniform 0..128 Ki, sometimes
// 1 Mi + 3). All ranks draw the same sequence from (seed, session). HPCTRAIN_SOAK_SEED changes
// the sequence; a failure prints the session, index and case to replay.
//
// Not a CI test (label `long`): its minutes are next to its add_test.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "loopback_ranks.hpp"
#include "reference.hpp"

namespace hpctrain::coll {
namespace {

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

/// What one session runs on: rank count and tuning, drawn from the session's stream.
struct Session {
  int ranks = 1;
  Tuning tuning;
};

Session draw_session(std::mt19937_64& rng) {
  Session s;
  s.ranks = 1 + static_cast<int>(rng() % 8);
  const std::size_t segments[] = {64, 4096, 64 << 10, 1 << 20};
  // A lost message fails the soak instead of hanging it (HPCTRAIN_SOAK_TIMEOUT_S, default 120).
  s.tuning.timeout_s = static_cast<double>(env_u64("HPCTRAIN_SOAK_TIMEOUT_S", 120));
  s.tuning.ring_segment_bytes = segments[rng() % 4];
  s.tuning.tree_segment_bytes = segments[rng() % 4];
  s.tuning.rabenseifner_segment_bytes = segments[rng() % 4];
  s.tuning.shm_segment_bytes = segments[1 + rng() % 3];
  const std::size_t binomial[] = {0, 64 << 10, std::size_t{1} << 40};
  s.tuning.tree_binomial_max_bytes = binomial[rng() % 3];
  s.tuning.ranks_per_node = static_cast<int>(rng() % 4);  // 0: one node; k: virtual nodes of k ranks
  return s;
}

enum class Kind { allreduce, allreduce_in_place, iallreduce_queue, reduce_scatter, allgather, broadcast };
constexpr Kind kKinds[] = {Kind::allreduce, Kind::allreduce_in_place, Kind::iallreduce_queue,
                           Kind::reduce_scatter, Kind::allgather, Kind::broadcast};
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::allreduce: return "allreduce";
    case Kind::allreduce_in_place: return "allreduce_in_place";
    case Kind::iallreduce_queue: return "iallreduce_queue";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::allgather: return "allgather";
    case Kind::broadcast: return "broadcast";
  }
  return "?";
}

/// One allreduce's parameters.
struct Case {
  Algorithm algo;
  DataType type;
  ReduceOp op;
  std::size_t count;
  std::uint64_t seed;
};

std::size_t draw_count(std::mt19937_64& rng, int ranks) {
  const auto u = rng() % 1000;
  if (u < 40) return u % 3 == 0 ? 0 : static_cast<std::size_t>(ranks - 1);
  if (u < 42) return (std::size_t{1} << 20) + 3;
  const double e = std::ldexp(static_cast<double>(rng() >> 11), -53) * std::log(131072.0);
  return static_cast<std::size_t>(std::exp(e));
}

Case draw_case(std::mt19937_64& rng, const Session& s, std::uint64_t seed) {
  // Every algorithm the loopback transport runs (mpi needs MPI); shm only on one node.
  std::vector<Algorithm> algos = {Algorithm::automatic, Algorithm::ring, Algorithm::tree,
                                  Algorithm::recursive_doubling, Algorithm::rabenseifner,
                                  Algorithm::hierarchical};
  if (s.tuning.ranks_per_node == 0 || s.tuning.ranks_per_node >= s.ranks) algos.push_back(Algorithm::shm);
  Case c;
  c.algo = algos[rng() % algos.size()];
  c.type = testing::all_types()[rng() % testing::all_types().size()];
  c.op = testing::all_ops()[rng() % testing::all_ops().size()];
  c.count = draw_count(rng, s.ranks);
  c.seed = seed;
  return c;
}

std::string describe(const Case& c) {
  return std::string(to_string(c.algo)) + " " + std::string(to_string(c.type)) + " " +
         std::string(to_string(c.op)) + " count=" + std::to_string(c.count);
}

/// Mismatches of an allreduce result on `comm`'s rank (rank 0 checks every element, the others a
/// sample: they share the CPU).
std::size_t check_allreduce_result(const Communicator& comm, const Case& c, const void* out, std::string* first) {
  const std::size_t stride = comm.rank() == 0 ? 1 : 61;
  return testing::count_mismatches(c.type, c.op, c.seed, comm.size(), out, c.count, first, stride);
}

/// Runs one collective of kind `k` and returns its mismatches (first described in `first`).
std::size_t run_one(Communicator& comm, Kind k, std::mt19937_64& rng, const Session& s, std::uint64_t seed,
                    std::string* first) {
  const int p = comm.size(), r = comm.rank();
  switch (k) {
    case Kind::allreduce:
    case Kind::allreduce_in_place: {
      const Case c = draw_case(rng, s, seed);
      std::vector<std::byte> in(c.count * size_of(c.type) + 1), out(in.size());
      testing::fill_input(c.type, c.op, c.seed, r, in.data(), c.count);
      void* result = k == Kind::allreduce ? out.data() : in.data();
      comm.allreduce(in.data(), result, c.count, c.type, c.op, c.algo);
      const std::size_t bad = check_allreduce_result(comm, c, result, first);
      if (bad) *first = describe(c) + ": " + *first;
      return bad;
    }
    case Kind::iallreduce_queue: {
      const int n = 1 + static_cast<int>(rng() % 3);
      std::vector<Case> cases;
      std::vector<std::vector<std::byte>> bufs;
      std::vector<Work> work;
      for (int i = 0; i < n; ++i) {
        cases.push_back(draw_case(rng, s, seed + static_cast<std::uint64_t>(i) * 7919));
        if (cases.back().count > (std::size_t{1} << 17)) cases.back().count = 1 << 17;
        const Case& c = cases.back();
        bufs.emplace_back(c.count * size_of(c.type) + 1);
        testing::fill_input(c.type, c.op, c.seed, r, bufs.back().data(), c.count);
      }
      for (int i = 0; i < n; ++i) {
        const Case& c = cases[static_cast<std::size_t>(i)];
        void* b = bufs[static_cast<std::size_t>(i)].data();
        work.push_back(comm.iallreduce(b, b, c.count, c.type, c.op, c.algo));
      }
      std::size_t bad = 0;
      for (int i = n - 1; i >= 0; --i) work[static_cast<std::size_t>(i)].wait();  // any wait order
      for (int i = 0; i < n; ++i) {
        const Case& c = cases[static_cast<std::size_t>(i)];
        const std::size_t b = check_allreduce_result(comm, c, bufs[static_cast<std::size_t>(i)].data(), first);
        if (b && bad == 0) *first = "queued " + describe(c) + ": " + *first;
        bad += b;
      }
      return bad;
    }
    case Kind::reduce_scatter: {
      Case c = draw_case(rng, s, seed);
      c.count = std::min<std::size_t>(c.count, 1 << 15);  // per rank
      const std::size_t elem = size_of(c.type), total = c.count * static_cast<std::size_t>(p);
      std::vector<std::byte> in(total * elem + 1), out(c.count * elem + 1);
      testing::fill_input(c.type, c.op, c.seed, r, in.data(), total);
      comm.reduce_scatter(in.data(), out.data(), c.count, c.type, c.op);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < c.count; ++i) {
        const auto e = testing::expected_value(c.type, c.op, c.seed, p, static_cast<std::size_t>(r) * c.count + i);
        const double got = testing::load(c.type, out.data(), i);
        if (!(std::fabs(got - e.value) <= e.tolerance) && bad++ == 0) {
          *first = "reduce_scatter " + describe(c) + " [" + std::to_string(i) + "]: got " + std::to_string(got) +
                   ", expected " + std::to_string(e.value);
        }
      }
      return bad;
    }
    case Kind::allgather: {
      Case c = draw_case(rng, s, seed);
      c.count = std::min<std::size_t>(c.count, 1 << 15);
      const std::size_t elem = size_of(c.type);
      std::vector<std::byte> mine(c.count * elem + 1), all(c.count * static_cast<std::size_t>(p) * elem + 1);
      testing::fill_input(c.type, c.op, c.seed, r, mine.data(), c.count);
      comm.allgather(mine.data(), all.data(), c.count, c.type);
      std::size_t bad = 0;
      for (int q = 0; q < p; ++q) {
        for (std::size_t i = 0; i < c.count; ++i) {
          const double want = testing::input_value(c.type, c.op, c.seed, q, i);
          const double got = testing::load(c.type, all.data(), static_cast<std::size_t>(q) * c.count + i);
          if (got != want && bad++ == 0) {
            *first = "allgather " + describe(c) + " block " + std::to_string(q) + " [" + std::to_string(i) + "]";
          }
        }
      }
      return bad;
    }
    case Kind::broadcast: {
      const Case c = draw_case(rng, s, seed);
      const int root = static_cast<int>(rng() % static_cast<std::uint64_t>(p));
      std::vector<std::byte> buf(c.count * size_of(c.type) + 1);
      testing::fill_input(c.type, c.op, c.seed, r, buf.data(), c.count);  // non-roots: their own values
      comm.broadcast(buf.data(), c.count, c.type, root);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < c.count; ++i) {
        if (testing::load(c.type, buf.data(), i) != testing::input_value(c.type, c.op, c.seed, root, i) &&
            bad++ == 0) {
          *first = "broadcast root " + std::to_string(root) + " " + describe(c) + " [" + std::to_string(i) + "]";
        }
      }
      return bad;
    }
  }
  return 0;
}

TEST(CollectivesSoak, RandomCollectivesMatchTheReference) {
  const std::uint64_t total = env_u64("HPCTRAIN_SOAK_COLLECTIVES", 100000);
  const std::uint64_t base_seed = env_u64("HPCTRAIN_SOAK_SEED", 20261202);
  constexpr std::uint64_t kPerSession = 1000;
  std::uint64_t done = 0, failures = 0;
  // HPCTRAIN_SOAK_FIRST_SESSION replays from the session a failure names.
  for (std::uint64_t session = env_u64("HPCTRAIN_SOAK_FIRST_SESSION", 0); done < total; ++session) {
    std::mt19937_64 session_rng(testing::mix(base_seed ^ testing::mix(session)));
    const Session s = draw_session(session_rng);
    const std::uint64_t n = std::min(kPerSession, total - done);
    std::atomic<std::size_t> bad{0};
    std::string first;
    std::mutex m;
    try {
      testing::run_loopback_ranks(s.ranks, s.tuning, [&](Communicator& comm) {
        std::mt19937_64 rng(testing::mix(base_seed + session));  // the same draws on every rank
        for (std::uint64_t i = 0; i < n; ++i) {
          const Kind k = kKinds[rng() % (sizeof kKinds / sizeof kKinds[0])];
          std::string mine;
          const std::size_t b = run_one(comm, k, rng, s, testing::mix(session * kPerSession + i), &mine);
          if (b) {
            bad += b;
            std::lock_guard<std::mutex> lock(m);
            if (first.empty()) {
              first = "session " + std::to_string(session) + " collective " + std::to_string(i) + " rank " +
                      std::to_string(comm.rank()) + " (" + kind_name(k) + "): " + mine;
            }
          }
        }
      });
    } catch (const std::exception& e) {
      ADD_FAILURE() << "session " << session << " (p=" << s.ranks << " ranks_per_node="
                    << s.tuning.ranks_per_node << " binomial_max=" << s.tuning.tree_binomial_max_bytes
                    << " segments ring/tree/rabenseifner/shm=" << s.tuning.ring_segment_bytes << "/"
                    << s.tuning.tree_segment_bytes << "/" << s.tuning.rabenseifner_segment_bytes << "/"
                    << s.tuning.shm_segment_bytes << "): " << e.what();
      ++failures;
    }
    EXPECT_EQ(bad.load(), 0u) << "session " << session << " p=" << s.ranks << " ranks_per_node=" << s.tuning.ranks_per_node
                              << " binomial_max=" << s.tuning.tree_binomial_max_bytes << ": " << first;
    failures += bad.load();
    done += n;
    if (session % 10 == 9 || done == total) {
      std::printf("soak: %llu of %llu collectives, %llu mismatches\n", static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(total), static_cast<unsigned long long>(failures));
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace hpctrain::coll
