// The UCX transport: UCP tag messages on a worker of its own.
//
// Bootstrap: ucp_init (tag feature) -> one worker -> its address exchanged with MPI_Allgatherv
// over a duplicate of the caller's communicator. Endpoints are created on first use per peer,
// with peer-failure error handling so that a peer that dies turns pending sends into errors
// (receives from it fail once its endpoint reports the failure; otherwise the collectives'
// timeout applies).
//
// Tags: the 64-bit UCP tag is (sender rank << 32) | our Tag, matched with a full mask, so a
// receive matches exactly one sender and one tag. Two transports never share a worker, so two
// communicators cannot see each other's messages whatever their tags.
//
// Requests: ucp_tag_{send,recv}_nbx return a UCX request (or complete at once); it sits in a
// slot whose address is the completion callback's user data. The callback (run inside
// ucp_worker_progress, which test() calls) records status and received length; test() then
// frees the request. Receives never complete immediately (see irecv).
//
// Idle progress: a completed request does not mean UCX owes the peer nothing. After a
// rendezvous receive the protocol's acknowledgement to the sender may still sit in our pending
// queue (the shared-memory FIFO was full), and it leaves only during ucp_worker_progress. A
// rank that finished its collective and went on to an MPI call or to computation then hung its
// peer's send: the 3-rank ring over sm hung in most runs. MPI libraries progress in every MPI
// call; we have no such hook, so a helper thread progresses the worker when the owner has left
// it alone for a whole interval (HPCTRAIN_UCX_IDLE_PROGRESS_US). The worker is
// UCS_THREAD_MODE_SERIALIZED; WorkerGate keeps the two threads out of it at the same time.
// It used to be a mutex, which cost the owner a lock/unlock per call and, worse, let the
// helper take the worker in the middle of a collective (while the owner reduced a segment) and
// hold it through a whole rendezvous copy while the owner slept on the mutex: see docs/ucx.md
// for the measurements.

#include "hpctrain/collectives/ucx_transport.hpp"

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/unique_handle.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "mpi_comm_handle.hpp"

/// Throws hpctrain::Error naming `what` and UCX's status string unless `call` returns UCS_OK.
#define HPCTRAIN_CHECK_UCX(call, what)                                                      \
  do {                                                                                      \
    const ucs_status_t hpctrain_ucx_status_ = (call);                                       \
    if (hpctrain_ucx_status_ != UCS_OK)                                                     \
      throw ::hpctrain::Error(std::string(what) + " failed: " +                             \
                                  ucs_status_string(hpctrain_ucx_status_) + " (" #call ")", \
                              __FILE__, __LINE__);                                          \
  } while (0)

namespace hpctrain::coll {

namespace {

using detail::CommHandle;
using detail::mpi_is_up;

// ---- RAII UCX handles (UniqueHandle; UCX has no global finalisation, so it is always up) ----

/// UniqueHandle traits of a UCX object released by `Release` alone (a context, a worker).
template <class Handle, void (*Release)(Handle)>
using UcpTraits = PointerHandleTraits<Handle, Release>;
/// A ucp_context_h (ucp_cleanup).
using UcpContext = UniqueHandle<UcpTraits<ucp_context_h, &ucp_cleanup>>;
/// A ucp_worker_h (ucp_worker_destroy; endpoints still open are released with it).
using UcpWorker = UniqueHandle<UcpTraits<ucp_worker_h, &ucp_worker_destroy>>;

/// A UCP context with the tag feature, sized for `estimated_endpoints` peers.
UcpContext make_ucp_context(std::size_t estimated_endpoints) {
  ucp_config_t* config = nullptr;
  HPCTRAIN_CHECK_UCX(ucp_config_read(nullptr, nullptr, &config),
                     "UCX initialisation (reading UCX_* settings)");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG;
  params.mt_workers_shared = 0;
  params.estimated_num_eps = estimated_endpoints;
  ucp_context_h context = nullptr;
  const ucs_status_t status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  HPCTRAIN_CHECK_UCX(status, "UCX initialisation (ucp_init with the tag feature; check UCX_TLS)");
  return UcpContext(context);
}

UcpWorker make_ucp_worker(ucp_context_h context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time (the Communicator's progress thread or its caller), never two.
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  HPCTRAIN_CHECK_UCX(ucp_worker_create(context, &params, &worker), "UCX worker creation");
  return UcpWorker(worker);
}

/// UniqueHandle traits of a worker's packed address (ucp_worker_release_address).
struct UcpAddressTraits {
  using handle_type = ucp_address_t*;
  ucp_worker_h worker = nullptr;
  static handle_type null() noexcept { return nullptr; }
  static bool is_null(handle_type h) noexcept { return h == nullptr; }
  static bool library_up() noexcept { return true; }
  void free(handle_type h) const noexcept { ucp_worker_release_address(worker, h); }
};

/// The packed address of a worker and its length.
struct UcpWorkerAddress {
  explicit UcpWorkerAddress(ucp_worker_h worker) {
    ucp_address_t* address = nullptr;
    HPCTRAIN_CHECK_UCX(ucp_worker_get_address(worker, &address, &length), "UCX worker address query");
    handle = UniqueHandle<UcpAddressTraits>(address, UcpAddressTraits{worker});
  }
  const void* data() const noexcept { return handle.get(); }
  std::size_t size() const noexcept { return length; }

  UniqueHandle<UcpAddressTraits> handle;
  std::size_t length = 0;
};

/// UniqueHandle traits of a registration of existing memory (ucp_mem_map / ucp_mem_unmap).
struct UcpMemTraits {
  using handle_type = ucp_mem_h;
  ucp_context_h context = nullptr;
  static handle_type null() noexcept { return nullptr; }
  static bool is_null(handle_type h) noexcept { return h == nullptr; }
  static bool library_up() noexcept { return true; }
  void free(handle_type h) const noexcept { ucp_mem_unmap(context, h); }
};
using UcpMemHandle = UniqueHandle<UcpMemTraits>;

/// Registers [address, address+length); on failure the handle is empty (callers then send
/// without a handle and UCX registers on its own).
UcpMemHandle register_memory(ucp_context_h context, void* address, std::size_t length) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = address;
  params.length = length;
  ucp_mem_h memh = nullptr;
  if (ucp_mem_map(context, &params, &memh) != UCS_OK) memh = nullptr;
  return UcpMemHandle(memh, UcpMemTraits{context});
}

/// Progresses `worker` until `req` (a UCX request or nullptr/error) completes or `deadline`
/// passes; frees the request. True when it completed in time.
bool progress_until_done(ucp_worker_h worker, ucs_status_ptr_t req,
                         std::chrono::steady_clock::time_point deadline) noexcept {
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return true;
  while (ucp_request_check_status(req) == UCS_INPROGRESS) {
    if (ucp_worker_progress(worker) == 0 && std::chrono::steady_clock::now() > deadline) {
      ucp_request_free(req);  // releases our handle; the worker's destruction ends the operation
      return false;
    }
  }
  ucp_request_free(req);
  return true;
}

/// An endpoint to one peer. Closed by the owner (UcpEndpoint::close) so that all endpoints of a
/// worker close in parallel under one deadline; the destructor closes by force as a last resort.
class UcpEndpoint {
 public:
  UcpEndpoint() = default;
  UcpEndpoint(ucp_worker_h worker, ucp_ep_h ep) noexcept : worker_(worker), ep_(ep) {}
  ~UcpEndpoint() { close(true, std::chrono::steady_clock::now() + std::chrono::seconds(1)); }
  UcpEndpoint(UcpEndpoint&& o) noexcept : worker_(o.worker_), ep_(std::exchange(o.ep_, nullptr)) {}
  UcpEndpoint& operator=(UcpEndpoint&& o) noexcept {
    if (this != &o) {
      UcpEndpoint old(std::move(*this));
      worker_ = o.worker_;
      ep_ = std::exchange(o.ep_, nullptr);
    }
    return *this;
  }
  UcpEndpoint(const UcpEndpoint&) = delete;
  UcpEndpoint& operator=(const UcpEndpoint&) = delete;
  ucp_ep_h get() const noexcept { return ep_; }
  explicit operator bool() const noexcept { return ep_ != nullptr; }

  /// Starts closing: flush (pending sends delivered) or, with `force`, at once. Returns the
  /// close request to progress (nullptr when already done).
  ucs_status_ptr_t start_close(bool force) noexcept {
    if (!ep_) return nullptr;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(std::exchange(ep_, nullptr), &param);
    return req;
  }
  void close(bool force, std::chrono::steady_clock::time_point deadline) noexcept {
    if (ep_) progress_until_done(worker_, start_close(force), deadline);
  }
  /// Forgets the endpoint without closing it (the process is about to end; see ~UcxTransport).
  void leak() noexcept { ep_ = nullptr; }

 private:
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

/// Keeps the owner (the transport's user: one thread at a time) and the idle-progress helper
/// out of the worker at the same time, without a mutex on the owner's path.
///
/// Dekker-style: each side raises its flag (sequentially consistent), then looks at the other's.
/// The owner never backs off: it waits only while the helper is inside one ucp_worker_progress
/// call, and the helper re-checks the owner's flag between calls and leaves. The helper backs off
/// whenever the owner's flag is up, and (the caller's policy) whenever the owner has used the
/// worker since the helper last looked: an owner that is active progresses the worker itself.
class WorkerGate {
 public:
  void owner_enter() noexcept {
    owner_.store(true, std::memory_order_seq_cst);
    for (unsigned spins = 0; helper_.load(std::memory_order_seq_cst); ++spins) {
      // The helper is inside one progress call (which may be a rendezvous copy): pause, and on
      // an oversubscribed node give it the core.
      if (spins < 128) pause();
      else std::this_thread::yield();
    }
  }
  void owner_leave() noexcept {
    uses_.store(uses_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    owner_.store(false, std::memory_order_release);
  }
  /// Helper: true when it now holds the worker (call helper_leave); false when the owner is in.
  bool helper_try_enter() noexcept {
    helper_.store(true, std::memory_order_seq_cst);
    if (!owner_.load(std::memory_order_seq_cst)) return true;
    helper_.store(false, std::memory_order_release);
    return false;
  }
  void helper_leave() noexcept { helper_.store(false, std::memory_order_release); }
  /// The owner wants the worker (the helper should leave after its current call).
  bool owner_waiting() const noexcept { return owner_.load(std::memory_order_relaxed); }
  /// Counts the owner's calls (a hint: changes while the owner is active).
  std::uint64_t uses() const noexcept { return uses_.load(std::memory_order_relaxed); }

 private:
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }
  std::atomic<bool> owner_{false};
  std::atomic<bool> helper_{false};
  std::atomic<std::uint64_t> uses_{0};
};

/// The owner's hold on the worker for one transport call.
class OwnerScope {
 public:
  explicit OwnerScope(WorkerGate& gate) noexcept : gate_(gate) { gate_.owner_enter(); }
  ~OwnerScope() { gate_.owner_leave(); }
  OwnerScope(const OwnerScope&) = delete;
  OwnerScope& operator=(const OwnerScope&) = delete;

 private:
  WorkerGate& gate_;
};

constexpr std::uint64_t kFullTagMask = ~std::uint64_t{0};

std::uint64_t ucp_tag_of(int sender, Tag tag) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(sender)) << 32) | tag;
}

class UcxTransport final : public Transport {
 public:
  UcxTransport(MPI_Comm parent, const Tuning& tuning) : tuning_(tuning), comm_(duplicate(parent)) {
    HPCTRAIN_CHECK_MPI(MPI_Comm_rank(comm_.get(), &rank_));
    HPCTRAIN_CHECK_MPI(MPI_Comm_size(comm_.get(), &size_));
    HPCTRAIN_CHECK_MPI(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN));
    // Every rank must learn whether the others initialised: a rank that throws alone would
    // leave the rest in the address exchange.
    std::string failure;
    try {
      context_ = make_ucp_context(static_cast<std::size_t>(size_));
      worker_ = make_ucp_worker(context_.get());
    } catch (const Error& e) {
      failure = e.reason();
    }
    int ok = failure.empty() ? 1 : 0, all_ok = 0;
    HPCTRAIN_CHECK_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_.get()));
    HPCTRAIN_REQUIRE(failure.empty(), failure);
    HPCTRAIN_REQUIRE(all_ok, "UCX transport: another rank failed to initialise UCX (see its message)");
    exchange_addresses();
    peers_.resize(static_cast<std::size_t>(size_));
    if (tuning_.ucx_idle_progress_us > 0) idle_thread_ = std::thread([this] { idle_progress(); });
  }

  ~UcxTransport() override {
    if (idle_thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(stop_mutex_);
        stopping_ = true;
      }
      stop_cv_.notify_all();
      idle_thread_.join();
    }
    ucp_worker_h worker = worker_.get();
    if (!worker) return;
    if (unwinding_from_error()) {
      // An error is on its way to abort_job, which ends the job. Closing would flush to peers
      // that may be unreachable: after a cut link (tests/cluster, link_cut_ucx) each of
      // hierarchical's three transports waited out its close deadline and ucp_worker_destroy
      // then blocked for up to ~100 s, so the job ended long after the timeout. Leak instead.
      for (Peer& p : peers_) p.endpoint.leak();
      for (auto& entry : registrations_) entry.second.release();
      worker_.release();
      context_.release();
      return;
    }
    // Requests left behind by an aborted collective: receives are cancelled, sends released
    // (their endpoints are closed by force below if they cannot flush).
    for (Slot& s : slots_) {
      if (!s.request) continue;
      if (s.is_recv) ucp_request_cancel(worker, s.request);
      ucp_request_free(s.request);
      s.request = nullptr;
    }
    // Close every endpoint at once (flush; force for a peer known to be gone), then progress
    // them together under one deadline. A close still pending then is released and the worker's
    // destruction tears the endpoint down.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(tuning_.ucx_close_timeout_s));
    std::vector<ucs_status_ptr_t> closing;
    for (Peer& p : peers_) closing.push_back(p.endpoint.start_close(p.failed != UCS_OK));
    for (ucs_status_ptr_t req : closing) progress_until_done(worker, req, deadline);
    // Members go in reverse order: registrations, worker, context, communicator.
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string name() const override { return "ucx"; }

  Request isend(const void* buf, std::size_t bytes, int peer, Tag tag) override {
    check_peer(peer, "isend");
    const OwnerScope owner(gate_);
    Peer& p = endpoint(peer);
    const std::int32_t slot = acquire_slot(bytes, false);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &UcxTransport::on_send_complete;
    param.user_data = &slots_[static_cast<std::size_t>(slot)];
    set_memh(param, const_cast<void*>(buf), bytes);
    ucs_status_ptr_t req = ucp_tag_send_nbx(p.endpoint.get(), buf, bytes, ucp_tag_of(rank_, tag), &param);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {
      release_slot(slot);
      if (req == nullptr) return Request{-1, peer, true};  // completed at once
      fail("tag send of " + std::to_string(bytes) + " bytes to", peer, UCS_PTR_STATUS(req));
    }
    slots_[static_cast<std::size_t>(slot)].request = req;
    return Request{slot, peer, true};
  }

  Request irecv(void* buf, std::size_t bytes, int peer, Tag tag) override {
    check_peer(peer, "irecv");
    const OwnerScope owner(gate_);
    const std::int32_t slot = acquire_slot(bytes, true);
    ucp_request_param_t param{};
    // No immediate completion: UCX 1.13.1 reports length 0 for a receive that completes at once
    // from an already-arrived (unexpected) message, even through UCP_OP_ATTR_FIELD_RECV_INFO
    // (re-checked: tests ArrivedMessage* fail with it), so its length could not be checked.
    // With NO_IMM_CMPL every receive returns a request and reports its length in the callback.
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = &UcxTransport::on_recv_complete;
    param.user_data = &slots_[static_cast<std::size_t>(slot)];
    set_memh(param, buf, bytes);
    ucs_status_ptr_t req =
        ucp_tag_recv_nbx(worker_.get(), buf, bytes, ucp_tag_of(peer, tag), kFullTagMask, &param);
    if (UCS_PTR_IS_ERR(req)) {
      release_slot(slot);
      fail("tag receive of " + std::to_string(bytes) + " bytes from", peer, UCS_PTR_STATUS(req));
    }
    HPCTRAIN_REQUIRE(req != nullptr, "UCX tag receive completed at once despite UCP_OP_ATTR_FLAG_NO_IMM_CMPL");
    slots_[static_cast<std::size_t>(slot)].request = req;
    return Request{slot, peer, false};
  }

  bool test(Request& r) override {
    if (r.done()) return true;
    const OwnerScope owner(gate_);
    Slot& s = slots_[static_cast<std::size_t>(r.slot)];
    if (!s.completed) ucp_worker_progress(worker_.get());
    if (!s.completed) {
      // A receive is not tied to an endpoint, so UCX does not fail it when the sender dies;
      // the sender's endpoint (if we have one) tells us.
      const ucs_status_t peer_status = peers_[static_cast<std::size_t>(r.peer)].failed;
      if (s.is_recv && peer_status != UCS_OK) fail("tag receive from", r.peer, peer_status);
      return false;
    }
    const std::size_t expected = s.bytes, received = s.received;
    const bool is_recv = s.is_recv;
    const ucs_status_t status = s.status;
    ucp_request_free(s.request);
    release_slot(r.slot);
    r.slot = -1;
    if (status != UCS_OK) {
      fail(is_recv ? "tag receive of " + std::to_string(expected) + " bytes from"
                   : "tag send of " + std::to_string(expected) + " bytes to",
           r.peer, status);
    }
    if (is_recv) check_length(received, expected, r.peer);
    return true;
  }

  std::unique_ptr<Transport> split(int color, int key) override {
    HPCTRAIN_REQUIRE(color >= 0, "split: color must be non-negative, got " + std::to_string(color));
    MPI_Comm sub = MPI_COMM_NULL;
    HPCTRAIN_CHECK_MPI(MPI_Comm_split(comm_.get(), color, key, &sub));
    CommHandle owner(sub);  // the new transport makes its own duplicate
    return std::make_unique<UcxTransport>(sub, tuning_);
  }

  // Node shared memory comes from the MPI communicator this transport was built from (UCX has
  // no portable shared-allocation API): the shm and hierarchical algorithms then move their
  // intra-node data through an MPI-3 window and their inter-node data through UCX.
  int world_rank(int peer) const noexcept override { return detail::mpi_world_rank(comm_.get(), peer); }
  std::vector<int> shared_memory_domains() override {
    return detail::mpi_shared_memory_domains(comm_.get());
  }
  std::unique_ptr<SharedSegments> shared_memory(std::size_t bytes_per_rank) override {
    return detail::mpi_shared_memory(comm_.get(), bytes_per_rank, name());
  }

 private:
  struct Peer {
    UcpEndpoint endpoint;
    ucs_status_t failed = UCS_OK;  // set by the endpoint's error handler
  };
  struct Slot {
    void* request = nullptr;
    std::size_t bytes = 0;
    bool is_recv = false;
    bool completed = false;  // set by the completion callback
    ucs_status_t status = UCS_OK;
    std::size_t received = 0;
  };

  static void on_send_complete(void*, ucs_status_t status, void* user_data) noexcept {
    auto* s = static_cast<Slot*>(user_data);
    s->status = status;
    s->completed = true;
  }
  static void on_recv_complete(void*, ucs_status_t status, const ucp_tag_recv_info_t* info,
                               void* user_data) noexcept {
    auto* s = static_cast<Slot*>(user_data);
    s->status = status;
    s->received = info ? info->length : 0;
    s->completed = true;
  }

  /// The helper thread: every ucx_idle_progress_us, progress the worker if the owner has not
  /// touched it since the last look. An owner in the middle of a collective calls test()
  /// constantly, so the helper stays out of its way (and off its core) until it has stopped.
  void idle_progress() noexcept {
    const auto interval = std::chrono::microseconds(tuning_.ucx_idle_progress_us);
    std::uint64_t seen = gate_.uses();
    std::unique_lock<std::mutex> stop_lock(stop_mutex_);
    while (!stop_cv_.wait_for(stop_lock, interval, [this] { return stopping_; })) {
      const std::uint64_t uses = gate_.uses();
      if (uses != seen) {
        seen = uses;
        continue;
      }
      if (!gate_.helper_try_enter()) continue;
      while (ucp_worker_progress(worker_.get()) != 0 && !gate_.owner_waiting()) {
      }
      gate_.helper_leave();
    }
  }

  static CommHandle duplicate(MPI_Comm parent) {
    HPCTRAIN_REQUIRE(mpi_is_up(), "UcxTransport: MPI is not initialised (or already finalised)");
    return duplicate_comm(parent);
  }

  void exchange_addresses() {
    const UcpWorkerAddress mine(worker_.get());
    HPCTRAIN_REQUIRE(mine.size() <= static_cast<std::size_t>(INT32_MAX), "UCX worker address too large");
    const int my_length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<std::size_t>(size_)), offsets(static_cast<std::size_t>(size_));
    HPCTRAIN_CHECK_MPI(MPI_Allgather(&my_length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_.get()));
    long long total = 0;
    for (int q = 0; q < size_; ++q) {
      offsets[static_cast<std::size_t>(q)] = static_cast<int>(total);
      total += lengths[static_cast<std::size_t>(q)];
    }
    HPCTRAIN_REQUIRE(total <= INT32_MAX, "UCX worker addresses exceed 2 GiB in total");
    addresses_.resize(static_cast<std::size_t>(total));
    HPCTRAIN_CHECK_MPI(MPI_Allgatherv(mine.data(), my_length, MPI_BYTE, addresses_.data(), lengths.data(),
                                      offsets.data(), MPI_BYTE, comm_.get()));
    address_offsets_.assign(offsets.begin(), offsets.end());
  }

  static void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) noexcept {
    auto* p = static_cast<Peer*>(arg);
    if (p->failed == UCS_OK) p->failed = status == UCS_OK ? UCS_ERR_CONNECTION_RESET : status;
  }

  /// The peer's endpoint, created on first use.
  Peer& endpoint(int peer) {
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (p.failed != UCS_OK) fail("send to", peer, p.failed);
    if (p.endpoint) return p;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses_.data() +
                                                             address_offsets_[static_cast<std::size_t>(peer)]);
    // Peer mode: a peer that dies fails our operations to it instead of hanging them. Only on
    // request: UCX 1.13's shared-memory transports have no peer failure handler, so in peer
    // mode a peer on the same node is unreachable over sm.
    params.err_mode = tuning_.ucx_peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb = &UcxTransport::on_endpoint_error;
    params.err_handler.arg = &p;
    ucp_ep_h ep = nullptr;
    const ucs_status_t status = ucp_ep_create(worker_.get(), &params, &ep);
    if (status != UCS_OK) {
      fail(std::string("endpoint creation (no UCX transport reaches it? UCX_TLS=") +
               (std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "<unset>") +
               (peer == rank_ ? "; a rank sending to itself needs 'self'" : "") + ") to",
           peer, status);
    }
    p.endpoint = UcpEndpoint(worker_.get(), ep);
    return p;
  }

  /// Attaches a cached registration of [buf, buf+bytes) when the cache is on and the message is
  /// large enough.
  void set_memh(ucp_request_param_t& param, void* buf, std::size_t bytes) {
    if (tuning_.ucx_reg_min_bytes == 0 || bytes < tuning_.ucx_reg_min_bytes) return;
    const auto key = std::make_pair(reinterpret_cast<std::uintptr_t>(buf), bytes);
    auto it = registrations_.find(key);
    if (it == registrations_.end()) {
      if (registrations_.size() >= tuning_.ucx_reg_max_entries) return;
      it = registrations_.emplace(key, register_memory(context_.get(), buf, bytes)).first;
    }
    if (it->second.get() == nullptr) return;  // registration failed once: UCX registers itself
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = it->second.get();
  }

  std::int32_t acquire_slot(std::size_t bytes, bool is_recv) {
    std::int32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      slots_.emplace_back();  // a deque: the addresses of existing slots (callback data) stay put
      s = static_cast<std::int32_t>(slots_.size() - 1);
    }
    slots_[static_cast<std::size_t>(s)] = Slot{nullptr, bytes, is_recv, false, UCS_OK, 0};
    return s;
  }
  void release_slot(std::int32_t s) {
    slots_[static_cast<std::size_t>(s)].request = nullptr;
    free_.push_back(s);
  }

  void check_peer(int peer, const char* what) const {
    HPCTRAIN_REQUIRE(peer >= 0 && peer < size_, std::string(what) + ": peer " + std::to_string(peer) +
                                                     " outside [0, " + std::to_string(size_) + ")");
  }
  void check_length(std::size_t got, std::size_t expected, int peer) const {
    HPCTRAIN_REQUIRE(got == expected, "UCX tag receive from rank " + std::to_string(peer) + ": expected " +
                                          std::to_string(expected) + " bytes, got " + std::to_string(got));
  }
  [[noreturn]] void fail(const std::string& what, int peer, ucs_status_t status) const {
    HPCTRAIN_FAIL("UCX " + what + " rank " + std::to_string(peer) + " failed: " + ucs_status_string(status) +
                  (status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_ENDPOINT_TIMEOUT ||
                           status == UCS_ERR_UNREACHABLE
                       ? " (has that rank died?)"
                       : ""));
  }

  Tuning tuning_;
  CommHandle comm_;
  int rank_ = 0;
  int size_ = 1;
  // Before the worker: completion callbacks of released requests may still run while the
  // worker is destroyed, and they write into these slots.
  std::deque<Slot> slots_;
  std::vector<std::int32_t> free_;
  UcpContext context_;
  UcpWorker worker_;
  std::map<std::pair<std::uintptr_t, std::size_t>, UcpMemHandle> registrations_;
  std::vector<unsigned char> addresses_;
  std::vector<std::size_t> address_offsets_;
  std::vector<Peer> peers_;  // sized once: the error handlers hold pointers into it
  WorkerGate gate_;           // the owner's calls vs the idle-progress thread
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread idle_thread_;   // last: started after everything above exists
};

}  // namespace

std::unique_ptr<Transport> make_ucx_transport(MPI_Comm comm, const Tuning& tuning) {
  return std::make_unique<UcxTransport>(comm, tuning);
}

std::unique_ptr<Transport> make_ucx_transport(MPI_Comm comm) {
  return make_ucx_transport(comm, Tuning::from_environment());
}

}  // namespace hpctrain::coll
