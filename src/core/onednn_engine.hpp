#pragma once
// Internal to hpctrain::core: the one oneDNN CPU engine every oneDNN-backed kernel (convolution,
// gemm, eltwise) creates its primitives on, and the primitive cache they share. Built only with
// HPCTRAIN_ENABLE_ONEDNN.

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <map>
#include <mutex>

namespace hpctrain::core::onednn {

/// The process's CPU engine (created on first use; oneDNN engines are thread-safe).
dnnl::engine& cpu_engine();

/// A stream on cpu_engine() for the calling thread (streams are not shared between threads).
dnnl::stream& thread_stream();

/// The cached value make(key) for `key`, one cache per (Key, Entry, Make) instantiation. Each
/// cache is process-wide (a model uses a handful of shapes: its layers at the training,
/// last-partial and evaluation batch sizes); it is emptied when it grows past kMaxEntries so a
/// program that sweeps shapes cannot grow it without bound. Returns a copy: oneDNN objects are
/// shared handles.
template <class Key, class Entry, class Make>
inline Entry cached(const Key& key, Make make) {
  constexpr std::size_t kMaxEntries = 512;
  static std::mutex mutex;
  static std::map<Key, Entry> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kMaxEntries) cache.clear();
    it = cache.emplace(key, make(key)).first;
  }
  return it->second;
}

}  // namespace hpctrain::core::onednn
