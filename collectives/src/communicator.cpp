// Communicator's public API: argument checks, blocking calls (after the queued ones) or queued
// work on the progress thread, and the sequence number every collective takes in issue order.
// What runs is decided in dispatch.cpp; the state lives in Communicator::Impl.

#include "hpctrain/collectives/communicator.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "communicator_impl.hpp"
#include "hpctrain/base/error.hpp"
#include "vendor_call_watchdog.hpp"

namespace hpctrain::coll {

namespace {

void check_buffers(const char* op, const void* send, const void* recv, std::size_t count,
                   std::size_t send_elems, std::size_t recv_elems, DataType type) {
  // Only formatted on failure: this runs on every call, also for 8-byte all-reduces.
  auto where = [&] {
    return std::string(op) + "(count=" + std::to_string(count) + ", " + std::string(to_string(type)) + ")";
  };
  HPCTRAIN_REQUIRE(send_elems == 0 || send != nullptr, where() + ": send buffer is null");
  HPCTRAIN_REQUIRE(recv_elems == 0 || recv != nullptr, where() + ": receive buffer is null");
  if (send && recv && send != recv && send_elems && recv_elems) {
    const auto* s = static_cast<const std::byte*>(send);
    const auto* r = static_cast<const std::byte*>(recv);
    const std::size_t e = size_of(type);
    const bool overlap = s < r + recv_elems * e && r < s + send_elems * e;
    HPCTRAIN_REQUIRE(!overlap, where() + ": send and receive buffers overlap without being the same "
                               "buffer (pass the same pointer for in-place)");
  }
}

/// Every message's peer is a rank and its buffer is non-null unless empty.
void check_exchange(const char* what, const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                    int size) {
  for (const auto* list : {&sends, &recvs}) {
    for (const PeerBuffer& m : *list) {
      HPCTRAIN_REQUIRE(m.peer >= 0 && m.peer < size, std::string(what) + ": peer " + std::to_string(m.peer) +
                                                         " outside [0, " + std::to_string(size) + ")");
      HPCTRAIN_REQUIRE(m.data != nullptr || m.bytes == 0, std::string(what) + ": a message of " +
                                                              std::to_string(m.bytes) + " bytes with a null buffer");
    }
  }
}

/// Reduce-scatter and all-gather run the ring, the halving/doubling schedule (Algorithm::
/// rabenseifner), shm or hierarchical; anything else is refused on the calling thread, before
/// any message.
void check_scatter_algorithm(const char* op, Algorithm algo) {
  HPCTRAIN_REQUIRE(algo == Algorithm::automatic || algo == Algorithm::ring || algo == Algorithm::rabenseifner ||
                       algo == Algorithm::shm || algo == Algorithm::hierarchical,
                   std::string(op) + ": algorithm '" + std::string(to_string(algo)) +
                       "' is not built for reduce-scatter / all-gather; use auto, ring, rabenseifner "
                       "(recursive halving / doubling), shm (one node) or hierarchical (nodes of equal size)");
}

}  // namespace

// ---- Communicator::Impl plumbing ------------------------------------------------------------

Communicator::Impl::Impl(std::unique_ptr<Transport> t, Tuning tune)
    : transport(std::move(t)), tuning(std::move(tune)) {}

ProgressEngine& Communicator::Impl::progress_engine() {
#ifdef HPCTRAIN_SMPI
  // SMPI runs every simulated rank as an actor of one process and knows only those actors: an
  // MPI call from another thread fails ("MPI_Init was not called", MPI_ERR_OTHER), so the
  // progress thread cannot carry a collective. Refused before any message, on every rank alike.
  HPCTRAIN_FAIL("non-blocking collectives (iallreduce, ireduce_scatter, iallgather) need the progress "
                "thread, which cannot call MPI under SimGrid's SMPI (only the simulated ranks' own "
                "threads can); use the blocking calls in a simulation (docs/simulation.md)");
#endif
  if (!engine) engine = std::make_unique<ProgressEngine>();
  return *engine;
}

WaitPolicy Communicator::Impl::policy(const char* op, Algorithm algo, std::uint64_t seq) const {
  WaitPolicy p;
  p.timeout = std::chrono::duration<double>(tuning.timeout_s);
  p.spin_polls = tuning.spin_polls;
  p.op = op;  // the diagnostic text is composed only if a wait fails (WaitPolicy::description)
  p.algorithm = algo;
  // The collective's own number, never `sequence`: a queued collective runs on the progress
  // thread while the caller's thread increments `sequence` (a data race found by TSan).
  p.sequence = seq;
  p.transport = transport.get();
  return p;
}

// ---- construction ---------------------------------------------------------------------------

Communicator::Communicator(std::unique_ptr<Transport> transport)
    : Communicator(std::move(transport), Tuning::from_environment()) {}

Communicator::Communicator(std::unique_ptr<Transport> transport, Tuning tuning) {
  HPCTRAIN_REQUIRE(transport != nullptr, "Communicator: null transport");
  impl_ = std::make_unique<Impl>(std::move(transport), std::move(tuning));
  // The node map needs a collective on the MPI and UCX transports (MPI_Comm_split_type): done
  // here, where construction is collective anyway, rather than hidden in the first automatic
  // all-reduce, where a missing rank would hang in MPI instead of hitting our timeout.
  const detail::VendorCallWatch watch({"MPI_Comm_split_type", "node map", 0, 0, DataType::f32, size()},
                                      impl_->tuning.timeout_s);
  impl_->node_of_rank();
}

Communicator::~Communicator() = default;  // the engine runs its queue and joins
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

int Communicator::rank() const noexcept { return impl_->rank(); }
int Communicator::size() const noexcept { return impl_->size(); }
const Tuning& Communicator::tuning() const noexcept { return impl_->tuning; }
Transport& Communicator::transport() noexcept { return *impl_->transport; }

// ---- collectives ----------------------------------------------------------------------------

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op, Algorithm algo) {
  check_buffers("allreduce", send, recv, count, count, count, type);
  if (algo == Algorithm::automatic) algo = impl_->tuning.allreduce_algorithm;
  if (algo == Algorithm::nccl) detail::refuse_nccl_on_host("allreduce");
  impl_->drain();
  impl_->run_allreduce(send, recv, count, type, op, algo, impl_->sequence++);
}

void Communicator::set_device_memory(std::shared_ptr<DeviceMemory> device) {
  impl_->drain();
  impl_->device = std::move(device);
}

/// The checks of a device all-reduce and its sequence numbers (one per staged chunk and one
/// for the error agreement, see run_device_allreduce; `nccl` uses the first two to set up its
/// communicator); resolves `algo` from the tuning. `nccl` needs no DeviceMemory.
std::uint64_t Communicator::Impl::start_device_allreduce(const char* op, const void* send, const void* recv,
                                                         std::size_t count, DataType type, Algorithm& algo) {
  check_buffers(op, send, recv, count, count, count, type);
  if (algo == Algorithm::automatic) algo = tuning.allreduce_algorithm;
  if (algo == Algorithm::nccl) {
    detail::require_nccl_built(op);
  } else {
    HPCTRAIN_REQUIRE(device != nullptr, std::string(op) + ": MemorySpace::device buffers need a DeviceMemory "
                                                          "(Communicator::set_device_memory); none was set");
  }
  const std::uint64_t seq = sequence;
  sequence += device_chunks(count, type) + 1;
  return seq;
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                             MemorySpace space, Algorithm algo) {
  if (space == MemorySpace::host) return allreduce(send, recv, count, type, op, algo);
  impl_->drain();
  const std::uint64_t seq = impl_->start_device_allreduce("allreduce", send, recv, count, type, algo);
  impl_->run_device_allreduce(send, recv, count, type, op, algo, seq);
}

Work Communicator::iallreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                              MemorySpace space, Algorithm algo) {
  if (space == MemorySpace::host) return iallreduce(send, recv, count, type, op, algo);
  const std::uint64_t seq = impl_->start_device_allreduce("iallreduce", send, recv, count, type, algo);
  Impl* impl = impl_.get();
  return Work(impl->progress_engine().submit(
      [=] { impl->run_device_allreduce(send, recv, count, type, op, algo, seq); }));
}

Work Communicator::iallreduce(const void* send, void* recv, std::size_t count, DataType type,
                              ReduceOp op, Algorithm algo) {
  check_buffers("iallreduce", send, recv, count, count, count, type);
  if (algo == Algorithm::automatic) algo = impl_->tuning.allreduce_algorithm;
  if (algo == Algorithm::nccl) detail::refuse_nccl_on_host("iallreduce");
  const std::uint64_t seq = impl_->sequence++;
  Impl* impl = impl_.get();
  return Work(impl->progress_engine().submit([=] { impl->run_allreduce(send, recv, count, type, op, algo, seq); }));
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                                  ReduceOp op, Algorithm algo) {
  const std::size_t p = static_cast<std::size_t>(size());
  check_buffers("reduce_scatter", send, recv, recv_count, recv_count * p, recv_count, type);
  check_scatter_algorithm("reduce_scatter", algo);
  impl_->drain();
  impl_->run_reduce_scatter(send, recv, recv_count, type, op, algo, impl_->sequence++);
}

Work Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                                   ReduceOp op, Algorithm algo) {
  const std::size_t p = static_cast<std::size_t>(size());
  check_buffers("ireduce_scatter", send, recv, recv_count, recv_count * p, recv_count, type);
  check_scatter_algorithm("ireduce_scatter", algo);
  const std::uint64_t seq = impl_->sequence++;
  Impl* impl = impl_.get();
  return Work(impl->progress_engine().submit(
      [=] { impl->run_reduce_scatter(send, recv, recv_count, type, op, algo, seq); }));
}

void Communicator::allgather(const void* send, void* recv, std::size_t count, DataType type, Algorithm algo) {
  const std::size_t p = static_cast<std::size_t>(size());
  auto* own = static_cast<std::byte*>(recv) + static_cast<std::size_t>(rank()) * count * size_of(type);
  if (send != own) check_buffers("allgather", send, recv, count, count, count * p, type);
  check_scatter_algorithm("allgather", algo);
  impl_->drain();
  impl_->run_allgather(send, recv, count, type, algo, impl_->sequence++);
}

Work Communicator::iallgather(const void* send, void* recv, std::size_t count, DataType type, Algorithm algo) {
  const std::size_t p = static_cast<std::size_t>(size());
  auto* own = static_cast<std::byte*>(recv) + static_cast<std::size_t>(rank()) * count * size_of(type);
  if (send != own) check_buffers("iallgather", send, recv, count, count, count * p, type);
  check_scatter_algorithm("iallgather", algo);
  const std::uint64_t seq = impl_->sequence++;
  Impl* impl = impl_.get();
  return Work(impl->progress_engine().submit([=] { impl->run_allgather(send, recv, count, type, algo, seq); }));
}

Work Communicator::ireduce_scatter_in_place(void* buf, std::size_t count, DataType type, ReduceOp op,
                                            Algorithm algo) {
  check_buffers("ireduce_scatter_in_place", buf, buf, count, count, count, type);
  check_scatter_algorithm("ireduce_scatter_in_place", algo);
  const std::uint64_t seq = impl_->sequence++;
  Impl* impl = impl_.get();
  return Work(impl->progress_engine().submit(
      [=] { impl->run_balanced_reduce_scatter(buf, count, type, op, algo, seq); }));
}

Work Communicator::iallgather_in_place(void* buf, std::size_t count, DataType type, Algorithm algo) {
  check_buffers("iallgather_in_place", buf, buf, count, count, count, type);
  check_scatter_algorithm("iallgather_in_place", algo);
  const std::uint64_t seq = impl_->sequence++;
  Impl* impl = impl_.get();
  return Work(impl->progress_engine().submit([=] { impl->run_balanced_allgather(buf, count, type, algo, seq); }));
}

BlockRange balanced_block(std::size_t count, int parts, int index) noexcept {
  const auto p = static_cast<std::size_t>(parts), b = static_cast<std::size_t>(index);
  const std::size_t base = count / p, extra = count % p;
  return BlockRange{b * base + std::min(b, extra), base + (b < extra ? 1 : 0)};
}

void Communicator::broadcast(void* buf, std::size_t count, DataType type, int root) {
  HPCTRAIN_REQUIRE(root >= 0 && root < size(), "broadcast: root " + std::to_string(root) +
                                                   " outside [0, " + std::to_string(size()) + ")");
  check_buffers("broadcast", buf, buf, count, count, count, type);
  impl_->drain();
  impl_->run_broadcast(buf, count, type, root, impl_->sequence++);
}

void Communicator::exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs) {
  check_exchange("exchange", sends, recvs, size());
  impl_->drain();
  impl_->run_exchange(sends, recvs, impl_->sequence++);
}

Work Communicator::iexchange(std::vector<PeerBuffer> sends, std::vector<PeerBuffer> recvs,
                             std::function<void()> then) {
  check_exchange("iexchange", sends, recvs, size());
  const std::uint64_t seq = impl_->sequence++;
  Impl* impl = impl_.get();
  return Work(impl->progress_engine().submit(
      [impl, seq, sends = std::move(sends), recvs = std::move(recvs), then = std::move(then)] {
        impl->run_exchange(sends, recvs, seq);
        if (then) then();
      }));
}

void Communicator::barrier() {
  impl_->drain();
  impl_->run_barrier(impl_->sequence++);
}

Communicator Communicator::split(int color, int key) const {
  impl_->drain();
  return Communicator(impl_->transport->split(color, key), impl_->tuning);
}

}  // namespace hpctrain::coll
