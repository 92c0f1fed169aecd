#include "hpctrain/collectives/loopback_transport.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "hpctrain/collectives/error.hpp"

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

/// The shared state of one loopback group: every rank's unexpected messages and posted receives.
struct World {
  explicit World(int n) : ranks(n), unexpected(static_cast<std::size_t>(n)), posted(static_cast<std::size_t>(n)) {}
  int ranks;
  std::mutex mutex;
  std::condition_variable split_cv;
  std::vector<std::deque<Message>> unexpected;   // by destination
  std::vector<std::deque<PostedRecv>> posted;    // by destination
  std::map<std::uint64_t, SplitRound> splits;    // by split sequence number
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

}  // namespace hpctrain::coll
