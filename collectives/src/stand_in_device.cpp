// StandInDevice (stand_in_device.hpp): device memory for tests, unreadable by the host, copied
// on one thread per stream.

#include "hpctrain/collectives/stand_in_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "hpctrain/base/error.hpp"

namespace hpctrain::coll {

namespace {

/// One stream: a worker thread running queued copies in order; the first failure is kept
/// until synchronize() reports it.
class CopyStream {
 public:
  CopyStream() : worker_([this] { run(); }) {}
  ~CopyStream() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void push(std::function<void()> copy) {
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.push_back(std::move(copy));
    }
    cv_.notify_all();
  }
  void synchronize() {
    std::unique_lock<std::mutex> lock(m_);
    done_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      auto copy = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr failed;
      try {
        copy();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !error_) error_ = failed;
      busy_ = false;
      done_cv_.notify_all();
    }
  }

  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;  // last: starts after the members above exist
};

struct Allocation {
  std::byte* backing = nullptr;  // the read-write mapping the copies use
  std::size_t bytes = 0;         // requested size
  std::size_t mapped = 0;        // page-rounded size of both mappings
};

std::size_t page_round(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return std::max(page, (bytes + page - 1) / page * page);
}

}  // namespace

struct StandInDevice::State {
  mutable std::mutex m;
  std::map<const std::byte*, Allocation> allocations;  // keyed by the PROT_NONE address
  Counters counters;
  std::uint64_t in_flight = 0;
  std::uint64_t fail_at = UINT64_MAX;  // copy number that fails
  CopyStream streams[kStagingStreams];

  /// The backing address of [device, device + bytes); throws unless it lies in one allocation.
  std::byte* backing(const void* device, std::size_t bytes) {
    const auto* p = static_cast<const std::byte*>(device);
    std::lock_guard<std::mutex> lock(m);
    auto it = allocations.upper_bound(p);
    HPCTRAIN_REQUIRE(it != allocations.begin(), "stand-in device: pointer is not a device allocation");
    --it;
    const std::size_t offset = static_cast<std::size_t>(p - it->first);
    HPCTRAIN_REQUIRE(offset + bytes <= it->second.bytes,
                     "stand-in device: copy of " + std::to_string(bytes) + " bytes at offset " +
                         std::to_string(offset) + " overruns an allocation of " +
                         std::to_string(it->second.bytes) + " bytes");
    return it->second.backing + offset;
  }
};

StandInDevice::StandInDevice() : state_(std::make_unique<State>()) {}

StandInDevice::~StandInDevice() {
  for (int s = 0; s < kStagingStreams; ++s) {
    try {
      state_->streams[s].synchronize();
    } catch (...) {  // an unreported copy error: nobody is left to tell
    }
  }
  for (auto& [device, a] : state_->allocations) {
    munmap(const_cast<std::byte*>(device), a.mapped);
    munmap(a.backing, a.mapped);
  }
}

void* StandInDevice::allocate(std::size_t bytes) {
  const std::size_t mapped = page_round(bytes);
  const int fd = memfd_create("hpctrain-stand-in-device", 0);
  HPCTRAIN_REQUIRE(fd >= 0, "stand-in device: memfd_create failed: " + std::string(std::strerror(errno)));
  const bool sized = ftruncate(fd, static_cast<off_t>(mapped)) == 0;
  void* device = sized ? mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0) : MAP_FAILED;
  void* backing = sized ? mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int err = errno;
  close(fd);
  if (device == MAP_FAILED || backing == MAP_FAILED) {
    if (device != MAP_FAILED) munmap(device, mapped);
    if (backing != MAP_FAILED) munmap(backing, mapped);
    HPCTRAIN_FAIL("stand-in device: mapping " + std::to_string(bytes) + " bytes failed: " + std::strerror(err));
  }
  std::lock_guard<std::mutex> lock(state_->m);
  state_->allocations[static_cast<std::byte*>(device)] = {static_cast<std::byte*>(backing), bytes, mapped};
  return device;
}

void StandInDevice::deallocate(void* device_ptr) {
  if (!device_ptr) return;
  for (auto& s : state_->streams) s.synchronize();
  std::lock_guard<std::mutex> lock(state_->m);
  auto it = state_->allocations.find(static_cast<std::byte*>(device_ptr));
  HPCTRAIN_REQUIRE(it != state_->allocations.end(), "stand-in device: deallocate of an unknown pointer");
  munmap(device_ptr, it->second.mapped);
  munmap(it->second.backing, it->second.mapped);
  state_->allocations.erase(it);
}

void StandInDevice::fail_copy(std::uint64_t n) {
  std::lock_guard<std::mutex> lock(state_->m);
  state_->fail_at = state_->counters.copies + n;
}

StandInDevice::Counters StandInDevice::counters() const {
  std::lock_guard<std::mutex> lock(state_->m);
  return state_->counters;
}

void StandInDevice::reset_counters() {
  std::lock_guard<std::mutex> lock(state_->m);
  state_->counters = Counters{};
  state_->fail_at = UINT64_MAX;
}

namespace {

void check_stream(int stream) {
  HPCTRAIN_REQUIRE(stream >= 0 && stream < DeviceMemory::kStagingStreams,
                   "stand-in device: stream " + std::to_string(stream) + " out of range");
}

}  // namespace

void StandInDevice::copy_to_host(void* host_dst, const void* device_src, std::size_t bytes, int stream) {
  check_stream(stream);
  std::byte* src = bytes ? state_->backing(device_src, bytes) : nullptr;
  enqueue(stream, bytes, /*to_host=*/true, [=] { std::memcpy(host_dst, src, bytes); });
}

void StandInDevice::copy_to_device(void* device_dst, const void* host_src, std::size_t bytes, int stream) {
  check_stream(stream);
  std::byte* dst = bytes ? state_->backing(device_dst, bytes) : nullptr;
  enqueue(stream, bytes, /*to_host=*/false, [=] { std::memcpy(dst, host_src, bytes); });
}

void StandInDevice::enqueue(int stream, std::size_t bytes, bool to_host, std::function<void()> copy) {
  State* st = state_.get();
  bool fail = false;
  {
    std::lock_guard<std::mutex> lock(st->m);
    fail = st->counters.copies++ == st->fail_at;
    st->counters.max_in_flight = std::max(st->counters.max_in_flight, ++st->in_flight);
  }
  const unsigned delay = delay_us_;
  st->streams[stream].push([st, bytes, to_host, fail, delay, copy = std::move(copy)] {
    if (delay) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    auto finished = [&](std::size_t moved) {
      std::lock_guard<std::mutex> lock(st->m);
      --st->in_flight;
      (to_host ? st->counters.bytes_to_host : st->counters.bytes_to_device) += moved;
    };
    if (fail) {
      finished(0);
      HPCTRAIN_FAIL(std::string("stand-in device: injected failure of a copy to the ") +
                    (to_host ? "host" : "device") + " (" + std::to_string(bytes) + " bytes)");
    }
    if (bytes) copy();
    finished(bytes);
  });
}

void StandInDevice::synchronize(int stream) {
  check_stream(stream);
  state_->streams[stream].synchronize();
}

}  // namespace hpctrain::coll
