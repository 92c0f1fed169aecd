#pragma once
/// @file
/// StandInDevice: a "device" memory space for tests on CPU builds. Allocations live in a memfd
/// mapped twice: the address handed out (the "device pointer") is mapped PROT_NONE for its whole
/// life, so any host access by the collectives crashes the process; the copies go through a
/// second, private read-write mapping of the same pages. Copies run on one background thread
/// per stream (so a pipeline's overlap is real), optionally slowed down, and are counted.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "hpctrain/collectives/device_memory.hpp"

namespace hpctrain::coll {

class StandInDevice final : public DeviceMemory {
 public:
  struct Counters {
    std::uint64_t bytes_to_host = 0;
    std::uint64_t bytes_to_device = 0;
    std::uint64_t copies = 0;
    /// Most copies issued and not yet finished at one moment (over both streams).
    std::uint64_t max_in_flight = 0;
  };

  StandInDevice();
  ~StandInDevice() override;
  StandInDevice(const StandInDevice&) = delete;
  StandInDevice& operator=(const StandInDevice&) = delete;

  /// `bytes` of device memory (zeroed; bytes == 0 gives a valid, empty allocation). The
  /// pointer must not be dereferenced on the host: use the copies.
  void* allocate(std::size_t bytes);
  void deallocate(void* device_ptr);

  /// Each copy sleeps this long before it runs (makes overlap observable on a loaded machine).
  void set_copy_delay_us(unsigned us) { delay_us_ = us; }
  /// The copy number `n` (0-based, counted from now) fails with an error.
  void fail_copy(std::uint64_t n);
  /// What transport_can_read() reports (default false). True is only safe for algorithms that
  /// stage anyway (all but mpi): no transport can read this memory.
  void set_transport_can_read(bool can) { transport_can_read_ = can; }
  bool transport_can_read() const override { return transport_can_read_; }
  Counters counters() const;
  void reset_counters();

  std::string name() const override { return "stand-in"; }
  void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes, int stream) override;
  void copy_to_device(void* device_dst, const void* host_src, std::size_t bytes, int stream) override;
  void synchronize(int stream) override;

 private:
  struct State;
  void enqueue(int stream, std::size_t bytes, bool to_host, std::function<void()> copy);
  std::unique_ptr<State> state_;
  std::atomic<unsigned> delay_us_{0};
  bool transport_can_read_ = false;
};

}  // namespace hpctrain::coll
