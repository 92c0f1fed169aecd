#include "hpctrain/collectives/loopback_transport.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "hpctrain/base/error.hpp"

namespace hpctrain::coll {

namespace {

struct PostedRecv {
  void* buf;
  std::size_t bytes;
  int source;
  Tag tag;
  std::shared_ptr<std::atomic<int>> state;  // 0 pending, 1 done, 2 size mismatch
};

struct Message {
  int source;
  Tag tag;
  std::vector<std::byte> data;
};

struct SplitRound {
  std::vector<std::tuple<int, int, bool>> entries;  // (color, key, present) by old rank
  int arrived = 0;
  int departed = 0;
  std::map<int, std::shared_ptr<struct World>> worlds;
};

/// One heap block shared by the threads of a loopback group (Transport::shared_memory).
struct SharedBlock {
  SharedBlock(std::size_t bytes_per_rank, int ranks)
      : bytes(bytes_per_rank), stride((bytes_per_rank + kPage - 1) / kPage * kPage),
        storage(stride * static_cast<std::size_t>(ranks) + kPage) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
    base = storage.data() + ((kPage - address % kPage) % kPage);
  }
  static constexpr std::size_t kPage = 4096;
  std::size_t bytes, stride;
  std::vector<std::byte> storage;
  std::byte* base;
};

struct SharedRound {
  std::shared_ptr<SharedBlock> block;
  int departed = 0;
};

class LoopbackSharedSegments final : public SharedSegments {
 public:
  explicit LoopbackSharedSegments(std::shared_ptr<SharedBlock> block) : block_(std::move(block)) {}
  std::byte* segment(int rank) const noexcept override {
    return block_->base + static_cast<std::size_t>(rank) * block_->stride;
  }
  std::size_t bytes_per_rank() const noexcept override { return block_->bytes; }

 private:
  std::shared_ptr<SharedBlock> block_;
};

/// The shared state of one loopback group: every rank's unexpected messages and posted receives.
struct World {
  explicit World(int n) : ranks(n), unexpected(static_cast<std::size_t>(n)), posted(static_cast<std::size_t>(n)) {}
  int ranks;
  std::mutex mutex;
  std::condition_variable split_cv;
  std::vector<std::deque<Message>> unexpected;   // by destination
  std::vector<std::deque<PostedRecv>> posted;    // by destination
  std::map<std::uint64_t, SplitRound> splits;    // by split sequence number
  std::map<std::uint64_t, SharedRound> shared;   // by shared_memory sequence number
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<World> world, int rank) : world_(std::move(world)), rank_(rank) {}

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return world_->ranks; }
  std::string name() const override { return "loopback"; }

  Request isend(const void* buf, std::size_t bytes, int peer, Tag tag) override {
    check_peer(peer, "isend");
    std::lock_guard<std::mutex> lock(world_->mutex);
    auto& waiting = world_->posted[static_cast<std::size_t>(peer)];
    auto match = std::find_if(waiting.begin(), waiting.end(), [&](const PostedRecv& p) {
      return p.source == rank_ && p.tag == tag;
    });
    if (match != waiting.end()) {
      if (match->bytes == bytes) {
        if (bytes) std::memcpy(match->buf, buf, bytes);
        match->state->store(1, std::memory_order_release);
      } else {
        match->state->store(2, std::memory_order_release);
      }
      waiting.erase(match);
    } else {
      const auto* p = static_cast<const std::byte*>(buf);
      world_->unexpected[static_cast<std::size_t>(peer)].push_back(
          Message{rank_, tag, std::vector<std::byte>(p, p + bytes)});
    }
    return Request{-1, peer, true};  // eager: complete at once
  }

  Request irecv(void* buf, std::size_t bytes, int peer, Tag tag) override {
    check_peer(peer, "irecv");
    auto state = std::make_shared<std::atomic<int>>(0);
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      auto& queue = world_->unexpected[static_cast<std::size_t>(rank_)];
      auto match = std::find_if(queue.begin(), queue.end(), [&](const Message& m) {
        return m.source == peer && m.tag == tag;
      });
      if (match != queue.end()) {
        if (match->data.size() == bytes) {
          if (bytes) std::memcpy(buf, match->data.data(), bytes);
          state->store(1);
        } else {
          state->store(2);
        }
        queue.erase(match);
      } else {
        world_->posted[static_cast<std::size_t>(rank_)].push_back(PostedRecv{buf, bytes, peer, tag, state});
      }
    }
    const auto slot = static_cast<std::int32_t>(slots_.size());
    if (!free_.empty()) {
      const auto s = free_.back();
      free_.pop_back();
      slots_[static_cast<std::size_t>(s)] = {state, bytes};
      return Request{s, peer, false};
    }
    slots_.push_back({state, bytes});
    return Request{slot, peer, false};
  }

  bool test(Request& r) override {
    if (r.done()) return true;
    auto& slot = slots_[static_cast<std::size_t>(r.slot)];
    const int s = slot.state->load(std::memory_order_acquire);
    if (s == 0) return false;
    HPCTRAIN_REQUIRE(s == 1, "loopback: message from rank " + std::to_string(r.peer) + " to rank " +
                                 std::to_string(rank_) + " does not have the " +
                                 std::to_string(slot.bytes) + " bytes the receive expects");
    slot.state.reset();
    free_.push_back(r.slot);
    r.slot = -1;
    return true;
  }

  std::unique_ptr<Transport> split(int color, int key) override {
    HPCTRAIN_REQUIRE(color >= 0, "split: color must be non-negative, got " + std::to_string(color));
    const std::uint64_t round_id = splits_++;
    std::unique_lock<std::mutex> lock(world_->mutex);
    auto& round = world_->splits[round_id];
    if (round.entries.empty()) round.entries.resize(static_cast<std::size_t>(world_->ranks));
    round.entries[static_cast<std::size_t>(rank_)] = {color, key, true};
    ++round.arrived;
    world_->split_cv.notify_all();
    world_->split_cv.wait(lock, [&] { return round.arrived == world_->ranks; });
    std::vector<std::pair<int, int>> members;  // (key, old rank) with my color
    for (int r = 0; r < world_->ranks; ++r) {
      const auto& [c, k, present] = round.entries[static_cast<std::size_t>(r)];
      if (present && c == color) members.emplace_back(k, r);
    }
    std::sort(members.begin(), members.end());
    auto& sub = round.worlds[color];
    if (!sub) sub = std::make_shared<World>(static_cast<int>(members.size()));
    const int new_rank = static_cast<int>(
        std::find_if(members.begin(), members.end(), [&](auto& m) { return m.second == rank_; }) -
        members.begin());
    auto result = std::make_unique<LoopbackTransport>(sub, new_rank);
    if (++round.departed == world_->ranks) world_->splits.erase(round_id);
    return result;
  }

  std::vector<int> shared_memory_domains() override {
    return std::vector<int>(static_cast<std::size_t>(world_->ranks), 0);  // threads of one process
  }

  std::unique_ptr<SharedSegments> shared_memory(std::size_t bytes_per_rank) override {
    // The first rank to arrive allocates; the others take the same block. No rank waits: the
    // block exists once the first one returns, and its users order their own accesses.
    const std::uint64_t round_id = shared_calls_++;
    std::lock_guard<std::mutex> lock(world_->mutex);
    auto& round = world_->shared[round_id];
    if (!round.block) round.block = std::make_shared<SharedBlock>(bytes_per_rank, world_->ranks);
    auto block = round.block;
    if (++round.departed == world_->ranks) world_->shared.erase(round_id);
    HPCTRAIN_REQUIRE(block->bytes == bytes_per_rank,
                     "loopback shared_memory: rank " + std::to_string(rank_) + " asked for " +
                         std::to_string(bytes_per_rank) + " bytes per rank, another rank for " +
                         std::to_string(block->bytes));
    return std::make_unique<LoopbackSharedSegments>(std::move(block));
  }

 private:
  void check_peer(int peer, const char* what) const {
    HPCTRAIN_REQUIRE(peer >= 0 && peer < world_->ranks,
                     std::string(what) + ": peer " + std::to_string(peer) + " outside [0, " +
                         std::to_string(world_->ranks) + ")");
  }

  struct Slot {
    std::shared_ptr<std::atomic<int>> state;
    std::size_t bytes = 0;
  };
  std::shared_ptr<World> world_;
  int rank_;
  std::uint64_t splits_ = 0;
  std::uint64_t shared_calls_ = 0;
  std::vector<Slot> slots_;
  std::vector<std::int32_t> free_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_loopback_group(int ranks) {
  HPCTRAIN_REQUIRE(ranks >= 1, "make_loopback_group: need at least one rank, got " + std::to_string(ranks));
  auto world = std::make_shared<World>(ranks);
  std::vector<std::unique_ptr<Transport>> group;
  group.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) group.push_back(std::make_unique<LoopbackTransport>(world, r));
  return group;
}

void run_loopback_ranks(int ranks, const Tuning& tuning, const std::function<void(Communicator&)>& fn) {
  auto group = make_loopback_group(ranks);
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex error_mutex;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(std::move(group[static_cast<std::size_t>(r)]), tuning);
        fn(comm);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace hpctrain::coll
