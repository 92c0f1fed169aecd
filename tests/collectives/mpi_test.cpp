// The collectives over real MPI ranks (mpiexec -n 1..4), checked against MPI_Allreduce called
// directly and against the float64 / exact-integer reference.
//
// Compiled twice: over the MPI transport, and with HPCTRAIN_TEST_TRANSPORT_UCX over the UCX
// transport (registered with UCX_TLS=sm,self and tcp,self). The UCX transport has no vendor
// all-reduce, so Algorithm::mpi is left out there.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/collectives/ucx_transport.hpp"
#include "reference.hpp"
#include "shm_stress.hpp"

namespace hpctrain::coll {
namespace {

using testing::all_ops;
using testing::all_types;

#ifdef HPCTRAIN_TEST_TRANSPORT_UCX
constexpr bool kVendorAlgorithm = false;  // no MPI_Allreduce under the UCX transport
std::unique_ptr<Transport> make_test_transport(const Tuning& t) { return make_ucx_transport(MPI_COMM_WORLD, t); }
#else
constexpr bool kVendorAlgorithm = true;
std::unique_ptr<Transport> make_test_transport(const Tuning&) { return make_mpi_transport(MPI_COMM_WORLD); }
#endif

/// The largest count of the matrix (1 Mi + 3 by default; HPCTRAIN_TEST_MAX_COUNT trims it for
/// slow transports, e.g. UCX over tcp on an oversubscribed CI machine).
std::size_t max_count() {
  const char* v = std::getenv("HPCTRAIN_TEST_MAX_COUNT");
  return v && *v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : (std::size_t{1} << 20) + 3;
}

int world_size() {
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}
int world_rank_() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// HPCTRAIN_RANKS_PER_NODE of this run (registered at 1, 2, 3 for the hierarchical path).
int env_ranks_per_node() { return Tuning::from_environment().ranks_per_node; }
/// The ranks span several nodes, virtual (HPCTRAIN_RANKS_PER_NODE below the rank count) or real
/// (MPI_COMM_TYPE_SHARED splits the world: hosts of tests/cluster): shm must refuse, hierarchical
/// goes across nodes. Collective on its first call.
bool several_nodes() {
  if (env_ranks_per_node() > 0) return env_ranks_per_node() < world_size();
  static const bool real_nodes = [] {
    MPI_Comm shared = MPI_COMM_NULL;
    int shared_size = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_(), MPI_INFO_NULL, &shared);
    MPI_Comm_size(shared, &shared_size);
    MPI_Comm_free(&shared);
    return shared_size < world_size();
  }();
  return real_nodes;
}

Communicator make_comm(std::size_t binomial_max, std::size_t segment_bytes) {
  Tuning t;
  t.timeout_s = 120;
  t.tree_binomial_max_bytes = binomial_max;
  t.ring_segment_bytes = segment_bytes;
  t.tree_segment_bytes = segment_bytes;
  t.rabenseifner_segment_bytes = segment_bytes;
  t.shm_segment_bytes = segment_bytes;
  t.ranks_per_node = env_ranks_per_node();
  t.ucx_reg_min_bytes = Tuning::from_environment().ucx_reg_min_bytes;
  return Communicator(make_test_transport(t), t);
}

/// MPI_Allreduce called directly (not through hpctrain), for the types MPI has.
bool vendor_reference(DataType type, ReduceOp op, const void* in, void* out, std::size_t count) {
  MPI_Datatype dt;
  switch (type) {
    case DataType::f32: dt = MPI_FLOAT; break;
    case DataType::f64: dt = MPI_DOUBLE; break;
    case DataType::i32: dt = MPI_INT32_T; break;
    case DataType::i64: dt = MPI_INT64_T; break;
    default: return false;  // MPI has no 16-bit float types
  }
  MPI_Op mop = op == ReduceOp::prod ? MPI_PROD : op == ReduceOp::min ? MPI_MIN : op == ReduceOp::max ? MPI_MAX : MPI_SUM;
  MPI_Allreduce(in, out, static_cast<int>(count), dt, mop, MPI_COMM_WORLD);
  if (op == ReduceOp::avg) {
    for (std::size_t i = 0; i < count; ++i) {
      switch (type) {
        case DataType::f32: static_cast<float*>(out)[i] /= static_cast<float>(world_size()); break;
        case DataType::f64: static_cast<double*>(out)[i] /= world_size(); break;
        case DataType::i32: static_cast<std::int32_t*>(out)[i] /= world_size(); break;
        case DataType::i64: static_cast<std::int64_t*>(out)[i] /= world_size(); break;
        default: break;
      }
    }
  }
  return true;
}

struct Variant {
  const char* name;
  Algorithm algo;
  std::size_t binomial_max_bytes;
  std::size_t segment_bytes;
};

// A failing case names itself ("rabenseifner"), not "40-byte object <...>".
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class MpiAllreduce : public ::testing::TestWithParam<Variant> {};

TEST_P(MpiAllreduce, MatchesMpiAllreduceAndReference) {
  const Variant v = GetParam();
  if (v.algo == Algorithm::shm && several_nodes()) GTEST_SKIP() << "shm needs one node (ShmOnSeveralNodesFails)";
  Communicator comm = make_comm(v.binomial_max_bytes, v.segment_bytes);
  const int p = comm.size();
  const std::size_t sizes[] = {0, 1, 7, static_cast<std::size_t>(p - 1), 1000, max_count()};
  std::uint64_t seed = 11;
  for (std::size_t count : sizes) {
    for (DataType type : all_types()) {
      for (ReduceOp op : all_ops()) {
        if (count > 100000 && op != ReduceOp::sum && op != ReduceOp::max) continue;  // keep it quick
        ++seed;
        const std::size_t bytes = count * size_of(type);
        std::vector<std::byte> in(bytes + 1), ours(bytes + 1), vendor(bytes + 1);
        testing::fill_input(type, op, seed, comm.rank(), in.data(), count);
        comm.allreduce(in.data(), ours.data(), count, type, op, v.algo);
        std::string msg;
        EXPECT_EQ(testing::count_mismatches(type, op, seed, p, ours.data(), count, &msg), 0u) << v.name << " " << msg;
        if (vendor_reference(type, op, in.data(), vendor.data(), count)) {
          std::size_t bad = 0;
          for (std::size_t i = 0; i < count; ++i) {
            const auto e = testing::expected_value(type, op, seed, p, i);
            const double a = testing::load(type, ours.data(), i), b = testing::load(type, vendor.data(), i);
            if (!(std::fabs(a - b) <= 2 * e.tolerance)) ++bad;  // both lie within the bound
          }
          EXPECT_EQ(bad, 0u) << v.name << " vs MPI_Allreduce: " << to_string(type) << " " << to_string(op)
                             << " count=" << count;
        }
      }
    }
  }
}

std::vector<Variant> variants() {
  std::vector<Variant> v{Variant{"ring", Algorithm::ring, 64 << 10, 1 << 20},
                         Variant{"ring_small_segments", Algorithm::ring, 64 << 10, 16 << 10},
                         Variant{"tree_binomial", Algorithm::tree, std::size_t{1} << 40, 1 << 20},
                         Variant{"tree_double_binary", Algorithm::tree, 0, 16 << 10},
                         Variant{"automatic", Algorithm::automatic, 64 << 10, 1 << 20},
                         Variant{"recursive_doubling", Algorithm::recursive_doubling, 64 << 10, 1 << 20},
                         Variant{"rabenseifner", Algorithm::rabenseifner, 64 << 10, 1 << 20},
                         Variant{"rabenseifner_small_segments", Algorithm::rabenseifner, 64 << 10, 16 << 10},

                         Variant{"shm", Algorithm::shm, 64 << 10, 256 << 10},
                         Variant{"shm_small_segments", Algorithm::shm, 64 << 10, 16 << 10},
                         Variant{"hierarchical", Algorithm::hierarchical, 64 << 10, 256 << 10},
                         Variant{"hierarchical_small_segments", Algorithm::hierarchical, 64 << 10, 16 << 10}};
  if (kVendorAlgorithm) v.push_back(Variant{"mpi", Algorithm::mpi, 64 << 10, 1 << 20});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, MpiAllreduce, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return std::string(info.param.name); });

// The non-blocking forms (progress thread) against MPI_Reduce_scatter_block / MPI_Allgather,
// several queued at once so submission order matters, over f32 (sum of small integers: exact,
// so equality is the right check), f64 and i64, at the matrix's sizes.
TEST(MpiCollectives, NonBlockingReduceScatterAllgatherMatchMpi) {
  Communicator comm = make_comm(64 << 10, 1 << 20);
  const int p = comm.size(), r = comm.rank();
  const auto up = static_cast<std::size_t>(p);
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, up > 1 ? up - 1 : 1, max_count()}) {
    std::vector<float> in_f(count * up), out_f(count, -1.f), ref_f(count);
    std::vector<std::int64_t> in_i(count * up), out_i(count, -1), ref_i(count);
    for (std::size_t i = 0; i < in_f.size(); ++i) {
      in_f[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(r) * 13) % 101) - 50.f;
      in_i[i] = static_cast<std::int64_t>(i) * (r + 3) - 5;
    }
    std::vector<double> mine(count), all(count * up, -1.0), all_ref(count * up);
    for (std::size_t i = 0; i < count; ++i) mine[i] = r + 1e-3 * static_cast<double>(i);
    Work w1 = comm.ireduce_scatter(in_f.data(), out_f.data(), count, DataType::f32, ReduceOp::sum);
    Work w2 = comm.ireduce_scatter(in_i.data(), out_i.data(), count, DataType::i64, ReduceOp::sum);
    Work w3 = comm.iallgather(mine.data(), all.data(), count, DataType::f64);
    w3.wait();
    w1.wait();
    w2.wait();
    MPI_Reduce_scatter_block(in_f.data(), ref_f.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Reduce_scatter_block(in_i.data(), ref_i.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allgather(mine.data(), static_cast<int>(count), MPI_DOUBLE, all_ref.data(), static_cast<int>(count), MPI_DOUBLE,
                  MPI_COMM_WORLD);
    EXPECT_EQ(out_f, ref_f) << "ireduce_scatter f32 count=" << count;
    EXPECT_EQ(out_i, ref_i) << "ireduce_scatter i64 count=" << count;
    EXPECT_EQ(all, all_ref) << "iallgather f64 count=" << count;
  }
}

/// Every node holds as many ranks as every other (virtual nodes: the block size divides the
/// ranks; real hosts: MPI_COMM_TYPE_SHARED sizes agree). Collective.
bool equal_nodes() {
  const int k = env_ranks_per_node();
  if (k > 0) return k >= world_size() || world_size() % k == 0;
  MPI_Comm shared = MPI_COMM_NULL;
  int mine = 0, smallest = 0, largest = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_(), MPI_INFO_NULL, &shared);
  MPI_Comm_size(shared, &mine);
  MPI_Comm_free(&shared);
  MPI_Allreduce(&mine, &smallest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &largest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return smallest == largest;
}

// The in-place forms over the balanced partition (what ZeRO runs on gradient buckets), against
// MPI_Reduce_scatter with the same block lengths and MPI_Allgatherv, at counts that do not
// divide by P.
TEST(MpiCollectives, InPlaceBalancedReduceScatterAllgatherMatchMpi) {
  Communicator comm = make_comm(64 << 10, 1 << 20);
  const int p = comm.size(), r = comm.rank();
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}, max_count()}) {
    std::vector<int> counts(static_cast<std::size_t>(p)), displs(static_cast<std::size_t>(p));
    for (int b = 0; b < p; ++b) {
      const BlockRange block = balanced_block(count, p, b);
      counts[static_cast<std::size_t>(b)] = static_cast<int>(block.count);
      displs[static_cast<std::size_t>(b)] = static_cast<int>(block.offset);
      if (b > 0) {
        EXPECT_EQ(block.offset, balanced_block(count, p, b - 1).offset + balanced_block(count, p, b - 1).count);
      }
    }
    const BlockRange own = balanced_block(count, p, r);
    std::vector<std::int64_t> buf(count), input(count), ref(own.count);
    for (std::size_t i = 0; i < count; ++i) input[i] = buf[i] = static_cast<std::int64_t>(i * i % 9973) * (r + 1);
    comm.ireduce_scatter_in_place(buf.data(), count, DataType::i64, ReduceOp::sum).wait();
    MPI_Reduce_scatter(input.data(), ref.data(), counts.data(), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), buf.begin() + static_cast<std::ptrdiff_t>(own.offset)))
        << "ireduce_scatter_in_place count=" << count;

    std::vector<float> gathered(count, -1.f), mine(own.count), gathered_ref(count);
    for (std::size_t i = 0; i < own.count; ++i) mine[i] = gathered[own.offset + i] = static_cast<float>(r * 100000 + static_cast<int>(i));
    comm.iallgather_in_place(gathered.data(), count, DataType::f32).wait();
    MPI_Allgatherv(mine.data(), static_cast<int>(own.count), MPI_FLOAT, gathered_ref.data(), counts.data(),
                   displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
    EXPECT_EQ(gathered, gathered_ref) << "iallgather_in_place count=" << count;
  }
}

// Every reduce-scatter / all-gather algorithm (ring, rabenseifner = recursive halving /
// doubling, shm = single copy through node shared memory, on one node only; hierarchical = shm
// within each node, then ring or halving among the nodes, over nodes of equal size; auto) and form against MPI_Reduce_scatter_block / MPI_Reduce_scatter (balanced
// blocks) / MPI_Allgather(v), at counts 0, 1, P-1 and 1000003 (trimmed by
// HPCTRAIN_TEST_MAX_COUNT): i64 and integer-valued f32 sums are exact, so they must equal MPI's;
// f64 and bf16 sums of random values are checked against the float64 reference and its bound.
class MpiScatterGather : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MpiScatterGather, EveryFormMatchesMpiAndTheReference) {
  const Algorithm algo = GetParam();
  if (algo == Algorithm::shm && several_nodes()) GTEST_SKIP() << "shm needs one node (ShmOnSeveralNodesFails)";
  Communicator comm = make_comm(64 << 10, 64 << 10);
  const int p = comm.size(), r = comm.rank();
  const auto up = static_cast<std::size_t>(p);
  if (algo == Algorithm::hierarchical && !equal_nodes()) {
    // Nodes of unequal size (e.g. 3 ranks per virtual node at 4 ranks): every rank refuses it
    // with one clear error, before any message.
    std::vector<float> in(up), out(1);
    try {
      comm.reduce_scatter(in.data(), out.data(), 1, DataType::f32, ReduceOp::sum, algo);
      ADD_FAILURE() << "hierarchical ran over nodes of unequal size";
    } catch (const hpctrain::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'hierarchical' needs nodes of equal size"), std::string::npos) << what;
    }
    return;
  }
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, up > 1 ? up - 1 : 2, std::min<std::size_t>(1000003, max_count())}) {
    const int n = static_cast<int>(count);
    // Block forms, exact types: against MPI_Reduce_scatter_block.
    std::vector<float> in_f(count * up), out_f(count, -1.f), ref_f(count);
    std::vector<std::int64_t> in_i(count * up), out_i(count, -1), ref_i(count);
    for (std::size_t i = 0; i < in_f.size(); ++i) {
      in_f[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(r) * 13) % 101) - 50.f;
      in_i[i] = static_cast<std::int64_t>(i) * (r + 3) - 5;
    }
    comm.reduce_scatter(in_f.data(), out_f.data(), count, DataType::f32, ReduceOp::sum, algo);
    Work wi = comm.ireduce_scatter(in_i.data(), out_i.data(), count, DataType::i64, ReduceOp::sum, algo);
    wi.wait();
    MPI_Reduce_scatter_block(in_f.data(), ref_f.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Reduce_scatter_block(in_i.data(), ref_i.data(), n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(out_f, ref_f) << "reduce_scatter f32 count=" << count;
    EXPECT_EQ(out_i, ref_i) << "ireduce_scatter i64 count=" << count;
    // Block forms, rounding types: against the float64 reference.
    for (DataType type : {DataType::f64, DataType::bf16}) {
      const std::size_t elem = size_of(type);
      std::vector<std::byte> in(count * up * elem), out(count * elem);
      testing::fill_input(type, ReduceOp::sum, 41, r, in.data(), count * up);
      comm.reduce_scatter(in.data(), out.data(), count, type, ReduceOp::sum, algo);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const auto e = testing::expected_value(type, ReduceOp::sum, 41, p, static_cast<std::size_t>(r) * count + i);
        if (!(std::fabs(testing::load(type, out.data(), i) - e.value) <= e.tolerance)) ++bad;
      }
      EXPECT_EQ(bad, 0u) << "reduce_scatter " << to_string(type) << " count=" << count;
    }
    // Balanced in-place forms: against MPI_Reduce_scatter and MPI_Allgatherv with the same blocks.
    std::vector<int> counts(up), displs(up);
    for (int b = 0; b < p; ++b) {
      const BlockRange block = balanced_block(count, p, b);
      counts[static_cast<std::size_t>(b)] = static_cast<int>(block.count);
      displs[static_cast<std::size_t>(b)] = static_cast<int>(block.offset);
    }
    const BlockRange own = balanced_block(count, p, r);
    std::vector<std::int64_t> buf(in_i.begin(), in_i.begin() + static_cast<std::ptrdiff_t>(count)), ref(own.count);
    comm.ireduce_scatter_in_place(buf.data(), count, DataType::i64, ReduceOp::sum, algo).wait();
    MPI_Reduce_scatter(in_i.data(), ref.data(), counts.data(), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_TRUE(std::equal(ref.begin(), ref.end(), buf.begin() + static_cast<std::ptrdiff_t>(own.offset)))
        << "ireduce_scatter_in_place count=" << count;
    // All-gathers: out of place (blocking and queued), in place, balanced in place.
    std::vector<double> mine(count), all(count * up, -1.0), all_q(count * up, -1.0), all_ip(count * up, -1.0),
        all_ref(count * up);
    for (std::size_t i = 0; i < count; ++i) mine[i] = r + 1e-3 * static_cast<double>(i);
    std::copy(mine.begin(), mine.end(), all_ip.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * count));
    comm.allgather(mine.data(), all.data(), count, DataType::f64, algo);
    comm.allgather(all_ip.data() + static_cast<std::size_t>(r) * count, all_ip.data(), count, DataType::f64, algo);
    comm.iallgather(mine.data(), all_q.data(), count, DataType::f64, algo).wait();
    MPI_Allgather(mine.data(), n, MPI_DOUBLE, all_ref.data(), n, MPI_DOUBLE, MPI_COMM_WORLD);
    EXPECT_EQ(all, all_ref) << "allgather count=" << count;
    EXPECT_EQ(all_ip, all_ref) << "allgather(in place) count=" << count;
    EXPECT_EQ(all_q, all_ref) << "iallgather count=" << count;
    std::vector<float> gathered(count, -1.f), part(own.count), gathered_ref(count);
    for (std::size_t i = 0; i < own.count; ++i) part[i] = gathered[own.offset + i] = static_cast<float>(r * 100000 + static_cast<int>(i));
    comm.iallgather_in_place(gathered.data(), count, DataType::f32, algo).wait();
    MPI_Allgatherv(part.data(), static_cast<int>(own.count), MPI_FLOAT, gathered_ref.data(), counts.data(),
                   displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
    EXPECT_EQ(gathered, gathered_ref) << "iallgather_in_place count=" << count;
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MpiScatterGather,
                         ::testing::Values(Algorithm::ring, Algorithm::rabenseifner, Algorithm::shm,
                                           Algorithm::hierarchical, Algorithm::automatic),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(MpiCollectives, ReduceScatterAllgatherBroadcast) {
  Communicator comm = make_comm(64 << 10, 1 << 20);
  const int p = comm.size(), r = comm.rank();
  for (std::size_t count : {std::size_t{0}, std::size_t{3}, std::size_t{4099}}) {
    std::vector<std::int64_t> in(count * static_cast<std::size_t>(p)), out(count), ref(count);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::int64_t>(i) * (r + 1);
    comm.reduce_scatter(in.data(), out.data(), count, DataType::i64, ReduceOp::sum);
    std::vector<int> counts(static_cast<std::size_t>(p), static_cast<int>(count));
    MPI_Reduce_scatter(in.data(), ref.data(), counts.data(), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(out, ref) << "reduce_scatter count=" << count;

    std::vector<float> mine(count), all(count * static_cast<std::size_t>(p)), all_ref(all.size());
    for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(r) + 0.25f * static_cast<float>(i);
    comm.allgather(mine.data(), all.data(), count, DataType::f32);
    MPI_Allgather(mine.data(), static_cast<int>(count), MPI_FLOAT, all_ref.data(), static_cast<int>(count), MPI_FLOAT,
                  MPI_COMM_WORLD);
    EXPECT_EQ(all, all_ref) << "allgather count=" << count;

    for (int root = 0; root < p; ++root) {
      std::vector<double> buf(count, r == root ? 3.5 : -1.0);
      comm.broadcast(buf.data(), count, DataType::f64, root);
      EXPECT_EQ(buf, std::vector<double>(count, 3.5)) << "broadcast root=" << root;
    }
  }
  comm.barrier();
}

TEST(MpiCollectives, OverlappingNonBlockingAllreduces) {
  Communicator comm = make_comm(64 << 10, 64 << 10);
  const int p = comm.size();
  std::vector<std::vector<double>> bufs;
  std::vector<Work> work;
  for (int k = 0; k < 12; ++k) {
    const std::size_t count = 1 + static_cast<std::size_t>(k) * 20011;
    bufs.emplace_back(count);
    testing::fill_input(DataType::f64, ReduceOp::sum, 500 + static_cast<std::uint64_t>(k), comm.rank(),
                        bufs.back().data(), count);
  }
  for (auto& b : bufs) work.push_back(comm.iallreduce(b.data(), b.size(), ReduceOp::sum));
  // MPI traffic of the application on the world communicator while the engine runs.
  int token = 1, total = 0;
  MPI_Allreduce(&token, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total, p);
  for (auto& w : work) w.wait();
  for (int k = 0; k < 12; ++k) {
    std::string msg;
    const auto& b = bufs[static_cast<std::size_t>(k)];
    EXPECT_EQ(testing::count_mismatches(DataType::f64, ReduceOp::sum, 500 + static_cast<std::uint64_t>(k), p, b.data(),
                                       b.size(), &msg), 0u) << msg;
  }
}

TEST(MpiCollectives, SplitSubCommunicators) {
  Communicator comm = make_comm(64 << 10, 1 << 20);
  const int p = comm.size(), r = comm.rank();
  Communicator sub = comm.split(r % 2, r);
  int want_size = 0;
  for (int q = 0; q < p; ++q) want_size += (q % 2 == r % 2);
  EXPECT_EQ(sub.size(), want_size);
  EXPECT_EQ(sub.rank(), r / 2);
  for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::recursive_doubling, Algorithm::rabenseifner,
                      Algorithm::mpi}) {
    if (a == Algorithm::mpi && !kVendorAlgorithm) continue;
    std::vector<std::int32_t> v(1000, r);
    sub.allreduce(v.data(), v.size(), ReduceOp::sum, a);
    std::int32_t want = 0;
    for (int q = 0; q < p; ++q) want += (q % 2 == r % 2) ? q : 0;
    EXPECT_EQ(v, std::vector<std::int32_t>(1000, want)) << to_string(a);
  }
  // Work on the parent and the child concurrently (non-blocking on both).
  std::vector<float> a(5000, 1.0f), b(5000, 2.0f);
  Work wa = comm.iallreduce(a.data(), a.size(), ReduceOp::sum);
  Work wb = sub.iallreduce(b.data(), b.size(), ReduceOp::sum);
  wa.wait();
  wb.wait();
  EXPECT_EQ(a, std::vector<float>(5000, static_cast<float>(p)));
  EXPECT_EQ(b, std::vector<float>(5000, 2.0f * static_cast<float>(want_size)));
}

TEST(MpiCollectives, SoakThousandsOfRandomCollectives) {
  Communicator comm = make_comm(16 << 10, 16 << 10);
  const int p = comm.size();
  std::mt19937_64 rng(2026);  // same sequence on every rank
  const Algorithm algos[] = {Algorithm::ring,
                             Algorithm::tree,
                             Algorithm::automatic,
                             kVendorAlgorithm ? Algorithm::mpi : Algorithm::ring,
                             several_nodes() ? Algorithm::hierarchical : Algorithm::shm,
                             Algorithm::hierarchical,
                             Algorithm::recursive_doubling,
                             Algorithm::rabenseifner};
  constexpr std::size_t kAlgos = sizeof(algos) / sizeof(algos[0]);
  std::size_t mismatches = 0;
  std::string first;
  const int iterations = 2000;
  for (int it = 0; it < iterations; ++it) {
    const std::uint64_t x = rng();
    const std::size_t count = (x % 4 == 0) ? (x >> 8) % 70000 : (x >> 8) % 300;
    const DataType type = all_types()[(x >> 40) % all_types().size()];
    const ReduceOp op = all_ops()[(x >> 48) % all_ops().size()];
    const Algorithm algo = algos[(x >> 56) % kAlgos];
    std::vector<std::byte> buf(count * size_of(type) + 1);
    testing::fill_input(type, op, x, comm.rank(), buf.data(), count);
    if ((x >> 20) & 1) {
      comm.allreduce(buf.data(), buf.data(), count, type, op, algo);
    } else {
      comm.iallreduce(buf.data(), buf.data(), count, type, op, algo).wait();
    }
    std::string msg;
    const std::size_t bad = testing::count_mismatches(type, op, x, p, buf.data(), count, &msg);
    if (bad && first.empty()) first = "iteration " + std::to_string(it) + " " + std::string(to_string(algo)) + ": " + msg;
    mismatches += bad;
  }
  EXPECT_EQ(mismatches, 0u) << first;
  (void)world_rank_;
}

// Back-to-back small (one-step) and segmented shm / hierarchical all-reduces with data that
// changes every call, checked exactly (int64). Fails when a rank overwrites its shared staging
// buffer while a peer still reads it (no "slot free" barrier or buffer alternation between
// calls or segments) or reads a peer's buffer before it is published (a missing barrier or
// release/acquire pair): shown by breaking each once (see shm_allreduce.cpp).
TEST(MpiCollectives, ShmStressBackToBack) {
  Tuning t;
  t.timeout_s = 120;
  t.shm_segment_bytes = 4096;
  t.shm_small_max_bytes = 1024;
  t.ranks_per_node = env_ranks_per_node();
  Communicator comm(make_test_transport(t), t);
  const int p = comm.size(), r = comm.rank();
  const int iterations = p > 4 ? 300 : 1500;
  for (Algorithm algo : {Algorithm::shm, Algorithm::hierarchical}) {
    if (algo == Algorithm::shm && several_nodes()) continue;
    std::size_t bad = 0;
    std::string first;
    bad = testing::shm_stress(comm, algo, iterations, &first);
    EXPECT_EQ(bad, 0u) << to_string(algo) << " rank " << r << ": " << first;
  }
  // shm reduce-scatters and all-gathers interleaved with shm all-reduces on the same counters.
  if (!several_nodes()) {
    std::string first;
    EXPECT_EQ(testing::shm_scatter_gather_stress(comm, iterations / 2, &first), 0u) << "rank " << r << ": " << first;
  }
}

// shm over ranks of several (virtual) nodes is refused on every rank with an error that names
// the algorithm and points at hierarchical; the communicator keeps working.
TEST(MpiCollectives, ShmOnSeveralNodesFails) {
  if (!several_nodes()) GTEST_SKIP() << "one node (run with HPCTRAIN_RANKS_PER_NODE below the rank count, or on several hosts)";
  Communicator comm = make_comm(64 << 10, 1 << 20);
  std::int64_t x = 1;
  try {
    comm.allreduce(&x, 1, ReduceOp::sum, Algorithm::shm);
    ADD_FAILURE() << "shm ran across nodes";
  } catch (const hpctrain::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'shm' needs every rank on one node"), std::string::npos) << what;
    EXPECT_NE(what.find("use 'hierarchical'"), std::string::npos) << what;
  }
  comm.allreduce(&x, 1, ReduceOp::sum, Algorithm::hierarchical);
  EXPECT_EQ(x, comm.size());
  // The reduce-scatter and all-gather refuse alike, pointing at the algorithm built for several nodes.
  std::vector<std::int64_t> in(static_cast<std::size_t>(comm.size()), 1), out(1);
  for (int form = 0; form < 2; ++form) {
    try {
      if (form == 0) comm.reduce_scatter(in.data(), out.data(), 1, DataType::i64, ReduceOp::sum, Algorithm::shm);
      else comm.iallgather(out.data(), in.data(), 1, DataType::i64, Algorithm::shm).wait();
      ADD_FAILURE() << "shm ran across nodes";
    } catch (const hpctrain::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(form == 0 ? "reduce_scatter: algorithm 'shm' needs every rank on one node"
                                    : "allgather: algorithm 'shm' needs every rank on one node"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("use 'hierarchical' for several nodes"), std::string::npos) << what;
    }
  }
  std::fill(in.begin(), in.end(), 1);  // the refused all-gather may have placed its own block
  comm.reduce_scatter(in.data(), out.data(), 1, DataType::i64, ReduceOp::sum, Algorithm::ring);
  EXPECT_EQ(out[0], comm.size());
}

}  // namespace
}  // namespace hpctrain::coll
