#pragma once
/// @file
/// Communicator: the collectives hpctrain offers, over any Transport.
///
/// ```
///   auto comm = hpctrain::coll::Communicator(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
///   comm.allreduce(grad.data(), grad.size(), ReduceOp::avg);              // in place, blocking
///   auto work = comm.iallreduce(bucket, n, ReduceOp::sum);                 // non-blocking
///   ... compute ...
///   work.wait();
/// ```
///
/// Non-blocking collectives run on one background thread per communicator, in submission
/// order; a blocking call first waits for the queued ones. Every rank must issue the same
/// collectives in the same order (as in MPI).
///
/// Buffers are host memory, except in the overloads taking a MemorySpace (device buffers, which
/// need set_device_memory; docs/collectives.md, "Device buffers").

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/collectives/device_memory.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"
#include "hpctrain/collectives/transport.hpp"
#include "hpctrain/collectives/tuning.hpp"
#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll {

/// Block `index` of the balanced partition of `count` elements into `parts` contiguous blocks
/// (the first count % parts blocks hold one element more): the partition the ring all-reduce
/// and the in-place reduce-scatter/all-gather use.
struct BlockRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};
BlockRange balanced_block(std::size_t count, int parts, int index) noexcept;

/// Handle of a non-blocking collective.
class Work {
 public:
  Work() = default;
  /// Blocks until the collective has completed; rethrows its error (e.g. TimeoutError).
  void wait();
  /// True once the collective has completed (successfully or not).
  bool test() const;
  bool valid() const noexcept { return state_ != nullptr; }
  /// When the progress thread started and finished running this collective (steady clock);
  /// both are the epoch until then. For timelines that show overlap.
  std::chrono::steady_clock::time_point started_at() const;
  std::chrono::steady_clock::time_point finished_at() const;

  struct State;

 private:
  friend class Communicator;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  /// Takes ownership of `transport`; tuning defaults to Tuning::from_environment().
  /// Collective over the transport's ranks (it finds which ranks share a machine).
  explicit Communicator(std::unique_ptr<Transport> transport);
  Communicator(std::unique_ptr<Transport> transport, Tuning tuning);
  /// Waits for queued non-blocking work, then releases the transport.
  ~Communicator();
  /// Moves the state, queued work included (it refers to the state, not to this object); the
  /// source is left empty. Assigning over a communicator first waits for its own queued work.
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  const Tuning& tuning() const noexcept;
  Transport& transport() noexcept;

  /// recv[i] = op over ranks of send[i], i < count. `send == recv` is in place. `send` may be
  /// null when count == 0.
  void allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                 Algorithm algo = Algorithm::automatic);
  /// Non-blocking allreduce; buffers must stay valid and untouched until wait() returns.
  Work iallreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                  Algorithm algo = Algorithm::automatic);

  /// The device memory space MemorySpace::device buffers live in (null: none, the default).
  /// Waits for queued non-blocking work first. The device object is shared, not copied.
  void set_device_memory(std::shared_ptr<DeviceMemory> device);
  /// allreduce / iallreduce of buffers in `space`. MemorySpace::host is the overload above.
  /// MemorySpace::device: when `algo` is mpi, `op` is not avg (divided on the host) and the
  /// device memory reports transport_can_read() the pointers go to MPI_Allreduce; otherwise chunks of Tuning::device_chunk_bytes are staged
  /// through two host buffers (copy in, host all-reduce with `algo`, copy out, overlapped) and
  /// one extra 4-byte all-reduce per call makes a failed copy on any rank fail the call on every
  /// rank. Per element the result has the bits of the host all-reduce of the chunk holding it.
  /// With `algo` nccl the pointers go to ncclAllReduce instead (no DeviceMemory needed; see
  /// nccl_built() for where it runs and how it is refused). The host overloads refuse nccl.
  void allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, MemorySpace space,
                 Algorithm algo = Algorithm::automatic);
  Work iallreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, MemorySpace space,
                  Algorithm algo = Algorithm::automatic);

  /// Reproducible sum: recv[i] = sum over ranks of send[i], with bits that do not depend on the
  /// rank count, the algorithm or the transport (exact int64 fixed point with one scale per
  /// `block_elements` elements; scheme and error bound in reproducible_sum.hpp). `algo` carries
  /// the int64 all-reduce. Blocking. `send == recv` is allowed. The int64 accumulator is kept
  /// per calling thread and reused by the next call with the same layout.
  void allreduce_reproducible(const float* send, float* recv, std::size_t count,
                              Algorithm algo = Algorithm::automatic,
                              std::size_t block_elements = kReproducibleBlockElements);
  void allreduce_reproducible(const double* send, double* recv, std::size_t count,
                              Algorithm algo = Algorithm::automatic,
                              std::size_t block_elements = kReproducibleBlockElements);

  // Reduce-scatter and all-gather take `algo`: Algorithm::ring (the all-reduce ring's two
  // phases), Algorithm::rabenseifner (its two halves: recursive halving / recursive doubling
  // over the same blocks, lg p steps; any rank count, the extra ranks folded in pairs),
  // Algorithm::shm (single copy through node shared memory, every rank on one node; otherwise
  // hpctrain::Error naming it) or Algorithm::automatic (the cheapest of the three in the cost
  // model, Tuning::choose_reduce_scatter / choose_allgather).
  // Any other algorithm throws hpctrain::Error naming it. The block layout is the same for
  // every algorithm; float sums may differ in the last bits between algorithms (another
  // combination order), integer ones never.

  /// MPI_Reduce_scatter_block semantics: `send` holds size()*recv_count elements; rank r
  /// receives the reduction of block r.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                      ReduceOp op, Algorithm algo = Algorithm::automatic);
  /// `recv` (size()*count elements) receives every rank's `count` elements in rank order.
  /// `send` may point at this rank's block of `recv` (in place).
  void allgather(const void* send, void* recv, std::size_t count, DataType type,
                 Algorithm algo = Algorithm::automatic);
  /// Non-blocking reduce_scatter (same semantics, same algorithms); buffers must stay valid and
  /// untouched until wait() returns. Runs on the progress thread in submission order.
  Work ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type, ReduceOp op,
                       Algorithm algo = Algorithm::automatic);
  /// Non-blocking allgather (same semantics, same algorithms).
  Work iallgather(const void* send, void* recv, std::size_t count, DataType type,
                  Algorithm algo = Algorithm::automatic);

  /// In-place reduce-scatter over the balanced partition of `count` elements (block b is
  /// balanced_block(count, size(), b); blocks differ in length by at most one, so any count
  /// works without padding): afterwards block rank() of `buf` holds the reduction over the
  /// ranks of their block rank(); the other blocks hold partial reductions (unspecified). No
  /// copy of `buf` is made: this is what a sharded optimiser runs on a gradient bucket.
  /// Non-blocking, on the progress thread; `buf` untouched until wait() returns.
  Work ireduce_scatter_in_place(void* buf, std::size_t count, DataType type, ReduceOp op,
                                Algorithm algo = Algorithm::automatic);
  /// In-place all-gather over the same partition: before, block rank() of `buf` holds this
  /// rank's data; afterwards every block holds its owner's. Non-blocking.
  Work iallgather_in_place(void* buf, std::size_t count, DataType type, Algorithm algo = Algorithm::automatic);
  /// Sparse all-to-all without packing: sends every message of `sends`, receives every one of
  /// `recvs`. The k-th message a rank sends to a peer is the k-th that peer receives from it and
  /// must have the same size; a message to oneself is copied. Collective (every rank calls it,
  /// with empty lists where it moves nothing) and blocking.
  void exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs);
  /// Non-blocking exchange(): queued on the progress thread like the other non-blocking
  /// collectives; when the messages have moved, `then` (if given) runs on the progress thread
  /// in the same queued task, before anything queued later (a local step that reads what
  /// arrived, e.g. TreeSum's adds; it must not call this communicator). Buffers untouched until
  /// wait() returns; an error of the exchange skips `then` and is rethrown by wait().
  Work iexchange(std::vector<PeerBuffer> sends, std::vector<PeerBuffer> recvs, std::function<void()> then = {});
  /// Copies root's `count` elements of `buf` to every rank.
  void broadcast(void* buf, std::size_t count, DataType type, int root);
  void barrier();

  /// A communicator over the ranks with the same `color`, ranked by (key, old rank).
  /// Collective; waits for queued non-blocking work first.
  Communicator split(int color, int key) const;

  // Typed conveniences.
  template <class T>
  void allreduce(const T* send, T* recv, std::size_t count, ReduceOp op,
                 Algorithm algo = Algorithm::automatic) {
    allreduce(send, recv, count, data_type_v<T>, op, algo);
  }
  template <class T>
  void allreduce(T* buf, std::size_t count, ReduceOp op, Algorithm algo = Algorithm::automatic) {
    allreduce(buf, buf, count, data_type_v<T>, op, algo);
  }
  template <class T>
  Work iallreduce(T* buf, std::size_t count, ReduceOp op, Algorithm algo = Algorithm::automatic) {
    return iallreduce(buf, buf, count, data_type_v<T>, op, algo);
  }

 private:
  struct Impl;  // communicator_impl.hpp
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpctrain::coll
