#include "hpctrain/collectives/mpi_transport.hpp"

#include <array>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "mpi_comm_handle.hpp"
#include "progress_wait.hpp"
#include "reduce.hpp"

namespace hpctrain::coll {

namespace {

using detail::CommHandle;
using detail::mpi_is_up;

// ---- MPI datatypes and ops for the vendor all-reduce ---------------------------------------

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::f32: return MPI_FLOAT;
    case DataType::f64: return MPI_DOUBLE;
    case DataType::i32: return MPI_INT32_T;
    case DataType::i64: return MPI_INT64_T;
    case DataType::f16:
    case DataType::bf16: return MPI_UINT16_T;  // combined by a user op below
  }
  return MPI_DATATYPE_NULL;
}

template <DataType T, ReduceOp O>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::reduce_into(inout, in, static_cast<std::size_t>(*len), T, O);
}

// MPI has no 16-bit float types: user ops (commutative) combine them in float. Created once,
// released by MPI_Finalize.
MPI_Op half_mpi_op(DataType t, ReduceOp op) {
  static const auto ops = [] {
    std::array<std::array<MPI_Op, 4>, 2> table{};
    using Fn = MPI_User_function*;
    const std::array<std::array<Fn, 4>, 2> fns = {{
        {half_op<DataType::f16, ReduceOp::sum>, half_op<DataType::f16, ReduceOp::prod>,
         half_op<DataType::f16, ReduceOp::min>, half_op<DataType::f16, ReduceOp::max>},
        {half_op<DataType::bf16, ReduceOp::sum>, half_op<DataType::bf16, ReduceOp::prod>,
         half_op<DataType::bf16, ReduceOp::min>, half_op<DataType::bf16, ReduceOp::max>},
    }};
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 4; ++j) HPCTRAIN_CHECK_MPI(MPI_Op_create(fns[i][j], 1, &table[i][j]));
    return table;
  }();
  const std::size_t row = t == DataType::f16 ? 0 : 1;
  return ops[row][static_cast<std::size_t>(detail::combine_op(op))];
}

MPI_Op mpi_op(DataType t, ReduceOp op) {
  if (t == DataType::f16 || t == DataType::bf16) return half_mpi_op(t, op);
  switch (detail::combine_op(op)) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::prod: return MPI_PROD;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::avg: break;
  }
  return MPI_OP_NULL;
}

// ---- node shared memory (MPI-3 shared-memory windows) -------------------------------------

/// Owns an MPI shared-memory window and the communicator it was made on. Non-copyable,
/// non-movable (held by unique_ptr); the destructor frees only while MPI is up, never throws.
class MpiSharedSegments final : public SharedSegments {
 public:
  MpiSharedSegments(MPI_Comm comm, std::size_t bytes_per_rank)
      : comm_(duplicate_comm(comm)), bytes_(bytes_per_rank) {
    MPI_Comm dup = comm_.get();
    int size = 0;
    HPCTRAIN_CHECK_MPI(MPI_Comm_size(dup, &size));
    // Page-rounded segments: each starts page-aligned, and with alloc_shared_noncontig each
    // rank's pages are first touched (so placed) by their owner.
    const std::size_t page = 4096;
    const std::size_t stride = (bytes_per_rank + page - 1) / page * page;
    MPI_Info info = MPI_INFO_NULL;
    HPCTRAIN_CHECK_MPI(MPI_Info_create(&info));
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(stride), 1, info, dup, &base, &win_);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int length = 0;
      MPI_Error_string(rc, text, &length);
      HPCTRAIN_FAIL("MPI_Win_allocate_shared of " + std::to_string(stride) +
                    " bytes per rank (the shm/hierarchical all-reduce's window) failed: " +
                    std::string(text, static_cast<std::size_t>(length)) +
                    ". Open MPI backs the window with a file in its session directory or /dev/shm: "
                    "check their free space and the file-size limit (ulimit -f), or keep `auto` off "
                    "shared memory with HPCTRAIN_AUTO_ALGOS=ring,tree,recursive_doubling,rabenseifner");
    }
    // Passive-target epoch for the window's whole life: loads and stores are then legal at any
    // time (MPI-3 unified model); ordering between ranks comes from the algorithms' atomics.
    HPCTRAIN_CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
    locked_ = true;
    bases_.resize(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      MPI_Aint got = 0;
      int disp = 0;
      void* ptr = nullptr;
      HPCTRAIN_CHECK_MPI(MPI_Win_shared_query(win_, r, &got, &disp, &ptr));
      HPCTRAIN_REQUIRE(static_cast<std::size_t>(got) >= bytes_per_rank,
                       "MPI_Win_shared_query: segment of rank " + std::to_string(r) + " has " +
                           std::to_string(got) + " bytes, expected " + std::to_string(bytes_per_rank));
      bases_[static_cast<std::size_t>(r)] = static_cast<std::byte*>(ptr);
    }
  }
  ~MpiSharedSegments() override {
    // MPI_Win_free is collective: while unwinding from an error the peers may never call it
    // (they are still training, or stopped), so the window is leaked and the error goes on to
    // the CLI, which ends the job.
    if (win_ == MPI_WIN_NULL || !mpi_is_up() || unwinding_from_error()) return;
    if (locked_) MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  std::byte* segment(int rank) const noexcept override { return bases_[static_cast<std::size_t>(rank)]; }
  std::size_t bytes_per_rank() const noexcept override { return bytes_; }

 private:
  CommHandle comm_;
  MPI_Win win_ = MPI_WIN_NULL;
  bool locked_ = false;
  std::size_t bytes_;
  std::vector<std::byte*> bases_;
};

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm parent) : comm_(duplicate(parent)) {
    HPCTRAIN_CHECK_MPI(MPI_Comm_rank(comm_.get(), &rank_));
    HPCTRAIN_CHECK_MPI(MPI_Comm_size(comm_.get(), &size_));
    // Errors come back as return codes, not as MPI_ERRORS_ARE_FATAL aborts, so they carry our
    // diagnostic.
    HPCTRAIN_CHECK_MPI(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN));
    void* attr = nullptr;
    int flag = 0;
    // MPI_TAG_UB is a property of the implementation, guaranteed as an attribute of
    // MPI_COMM_WORLD only: on a communicator made by MPI_Comm_split, Open MPI 4.1 reports none,
    // which capped tags at 32767 (sequence number 128) on split communicators.
    HPCTRAIN_CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag));
    tag_ub_ = flag ? *static_cast<int*>(attr) : 32767;
  }
  ~MpiTransport() override {
    // Requests left behind by an aborted collective: cancel so the communicator can be freed.
    if (!mpi_is_up()) return;
    for (auto& r : requests_) {
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    }
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string name() const override { return "mpi"; }
  MPI_Comm comm() const noexcept { return comm_.get(); }

  Request isend(const void* buf, std::size_t bytes, int peer, Tag tag) override {
    check(bytes, peer, tag, "isend");
    Request r{acquire_slot(), peer, true};
    HPCTRAIN_CHECK_MPI(MPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, static_cast<int>(tag),
                                 comm_.get(), &requests_[static_cast<std::size_t>(r.slot)]));
    return r;
  }
  Request irecv(void* buf, std::size_t bytes, int peer, Tag tag) override {
    check(bytes, peer, tag, "irecv");
    Request r{acquire_slot(), peer, false};
    HPCTRAIN_CHECK_MPI(MPI_Irecv(buf, static_cast<int>(bytes), MPI_BYTE, peer, static_cast<int>(tag),
                                 comm_.get(), &requests_[static_cast<std::size_t>(r.slot)]));
    return r;
  }
  bool test(Request& r) override {
    if (r.done()) return true;
    int flag = 0;
    MPI_Status status;
    auto& mpi_request = requests_[static_cast<std::size_t>(r.slot)];
    HPCTRAIN_CHECK_MPI(MPI_Test(&mpi_request, &flag, &status));
    if (!flag) return false;
    free_.push_back(r.slot);
    r.slot = -1;
    return true;
  }

#ifdef HPCTRAIN_SMPI
  /// detail::block_until_any: MPI_Waitany over the not-done requests among reqs; the completed
  /// one's handle becomes MPI_REQUEST_NULL, which its next test() reports as done (the caller
  /// may pass copies of its requests, so the slot stays taken until then).
  void block_until_any(const Request* reqs, std::size_t n) { (void)wait_any_pending(reqs, n); }

  /// detail::complete_all: MPI_Waitall over the not-done requests among reqs; all are then done.
  void complete_all(Request* reqs, std::size_t n) {
    std::vector<MPI_Request> handles;
    for (std::size_t i = 0; i < n; ++i) {
      if (!reqs[i].done()) handles.push_back(requests_[static_cast<std::size_t>(reqs[i].slot)]);
    }
    if (handles.empty()) return;
    HPCTRAIN_CHECK_MPI(MPI_Waitall(static_cast<int>(handles.size()), handles.data(), MPI_STATUSES_IGNORE));
    for (std::size_t i = 0; i < n; ++i) {
      if (!reqs[i].done()) retire(reqs[i]);
    }
  }

  /// detail::complete_any: MPI_Waitany over the not-done requests among reqs (at least one);
  /// the completed one is done, its index returned.
  std::size_t complete_any(Request* reqs, std::size_t n) {
    const std::size_t i = wait_any_pending(reqs, n);
    HPCTRAIN_REQUIRE(i < n, "wait_any: no pending request");
    retire(reqs[i]);
    return i;
  }

 private:
  /// MPI_Waitany over the not-done requests among reqs: the index in reqs of the one that
  /// completed (its handle is then MPI_REQUEST_NULL), or n when none was pending.
  std::size_t wait_any_pending(const Request* reqs, std::size_t n) {
    std::vector<MPI_Request> handles;
    std::vector<std::size_t> index_of;
    for (std::size_t i = 0; i < n; ++i) {
      if (reqs[i].done()) continue;
      handles.push_back(requests_[static_cast<std::size_t>(reqs[i].slot)]);
      index_of.push_back(i);
    }
    if (handles.empty()) return n;
    int index = MPI_UNDEFINED;
    HPCTRAIN_CHECK_MPI(MPI_Waitany(static_cast<int>(handles.size()), handles.data(), &index, MPI_STATUS_IGNORE));
    if (index == MPI_UNDEFINED) return n;
    const std::size_t i = index_of[static_cast<std::size_t>(index)];
    requests_[static_cast<std::size_t>(reqs[i].slot)] = MPI_REQUEST_NULL;
    return i;
  }
  /// A request MPI completed (its handle is MPI_REQUEST_NULL now): free its slot, mark it done.
  void retire(Request& r) {
    requests_[static_cast<std::size_t>(r.slot)] = MPI_REQUEST_NULL;
    free_.push_back(r.slot);
    r.slot = -1;
  }

 public:
#endif

  std::unique_ptr<Transport> split(int color, int key) override {
    HPCTRAIN_REQUIRE(color >= 0, "split: color must be non-negative, got " + std::to_string(color));
    MPI_Comm sub = MPI_COMM_NULL;
    HPCTRAIN_CHECK_MPI(MPI_Comm_split(comm_.get(), color, key, &sub));
    CommHandle owner(sub);  // freed after the transport made its own duplicate
    return std::make_unique<MpiTransport>(sub);
  }

  int world_rank(int peer) const noexcept override { return detail::mpi_world_rank(comm_.get(), peer); }
  std::vector<int> shared_memory_domains() override {
    return detail::mpi_shared_memory_domains(comm_.get());
  }
  std::unique_ptr<SharedSegments> shared_memory(std::size_t bytes_per_rank) override {
    return detail::mpi_shared_memory(comm_.get(), bytes_per_rank, name());
  }

  bool vendor_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                        ReduceOp op) override {
    HPCTRAIN_REQUIRE(count <= static_cast<std::size_t>(INT32_MAX),
                     "MPI_Allreduce: count " + std::to_string(count) + " exceeds INT_MAX");
    HPCTRAIN_CHECK_MPI(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                                     mpi_type(type), mpi_op(type, op), comm_.get()));
    if (op == ReduceOp::avg) detail::divide_by(recv, count, type, size_);
    return true;
  }

 private:
  static CommHandle duplicate(MPI_Comm parent) {
    HPCTRAIN_REQUIRE(mpi_is_up(), "MpiTransport: MPI is not initialised (or already finalised)");
    return duplicate_comm(parent);
  }
  void check(std::size_t bytes, int peer, Tag tag, const char* what) const {
    HPCTRAIN_REQUIRE(peer >= 0 && peer < size_, std::string(what) + ": peer " + std::to_string(peer) +
                                                     " outside [0, " + std::to_string(size_) + ")");
    HPCTRAIN_REQUIRE(tag <= static_cast<Tag>(tag_ub_),
                     std::string(what) + ": tag " + std::to_string(tag) + " above MPI_TAG_UB");
    HPCTRAIN_REQUIRE(bytes <= static_cast<std::size_t>(INT32_MAX),
                     std::string(what) + ": message of " + std::to_string(bytes) +
                         " bytes exceeds INT_MAX (split it into segments)");
  }
  std::int32_t acquire_slot() {
    if (!free_.empty()) {
      const std::int32_t s = free_.back();
      free_.pop_back();
      return s;
    }
    requests_.push_back(MPI_REQUEST_NULL);
    return static_cast<std::int32_t>(requests_.size() - 1);
  }

  CommHandle comm_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  std::vector<MPI_Request> requests_;
  std::vector<std::int32_t> free_;
};

}  // namespace

namespace detail {

int mpi_world_rank(MPI_Comm comm, int rank) noexcept {
  if (!mpi_is_up() || comm == MPI_COMM_NULL) return rank;
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int out = MPI_UNDEFINED;
  if (MPI_Comm_group(comm, &group) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
    MPI_Group_translate_ranks(group, 1, &rank, world, &out);
  }
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  return out == MPI_UNDEFINED ? rank : out;
}

std::vector<int> mpi_shared_memory_domains(MPI_Comm comm) {
  MPI_Comm shared = MPI_COMM_NULL;
  int rank = 0, size = 0;
  HPCTRAIN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  HPCTRAIN_CHECK_MPI(MPI_Comm_size(comm, &size));
  HPCTRAIN_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared));
  CommHandle owner(shared);
  int leader = rank;
  HPCTRAIN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared));
  std::vector<int> domains(static_cast<std::size_t>(size));
  HPCTRAIN_CHECK_MPI(MPI_Allgather(&leader, 1, MPI_INT, domains.data(), 1, MPI_INT, comm));
  return domains;
}

std::unique_ptr<SharedSegments> mpi_shared_memory(MPI_Comm comm, std::size_t bytes_per_rank,
                                                  const std::string& transport) {
  int rank = 0, size = 0, shared_size = 0;
  HPCTRAIN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  HPCTRAIN_CHECK_MPI(MPI_Comm_size(comm, &size));
  MPI_Comm shared = MPI_COMM_NULL;
  HPCTRAIN_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared));
  CommHandle owner(shared);
  HPCTRAIN_CHECK_MPI(MPI_Comm_size(shared, &shared_size));
  // Every rank sees the same answer (a group spanning machines is split on every rank), so
  // all of them throw together.
  HPCTRAIN_REQUIRE(shared_size == size,
                   "shared memory over the '" + transport + "' transport: its " + std::to_string(size) +
                       " ranks are not all on one machine (this rank shares memory with " +
                       std::to_string(shared_size) + " of them); HPCTRAIN_RANKS_PER_NODE must not "
                       "group ranks of different machines into one node");
  return std::make_unique<MpiSharedSegments>(comm, bytes_per_rank);
}

}  // namespace detail

#ifdef HPCTRAIN_SMPI
namespace detail {

void block_until_any(Transport& t, Request* reqs, std::size_t n) {
  auto* m = dynamic_cast<MpiTransport*>(&t);
  if (m != nullptr) m->block_until_any(reqs, n);
}

bool complete_all(Transport& t, Request* reqs, std::size_t n) {
  auto* m = dynamic_cast<MpiTransport*>(&t);
  if (m == nullptr) return false;
  m->complete_all(reqs, n);
  return true;
}

bool complete_any(Transport& t, Request* reqs, std::size_t n, std::size_t& index) {
  auto* m = dynamic_cast<MpiTransport*>(&t);
  if (m == nullptr) return false;
  index = m->complete_any(reqs, n);
  return true;
}

}  // namespace detail
#endif

std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm) { return std::make_unique<MpiTransport>(comm); }

MPI_Comm mpi_comm_of(const Transport& t) noexcept {
  auto* m = dynamic_cast<const MpiTransport*>(&t);
  return m ? m->comm() : MPI_COMM_NULL;
}

}  // namespace hpctrain::coll
