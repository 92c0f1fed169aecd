#pragma once
/// @file
/// UniqueHandle: the one RAII shape for a library handle (MPI_Comm, ucp_worker_h, hid_t, ...).
///
/// Non-copyable; movable with the source left empty; the destructor frees the handle only while
/// its library is up and never throws. What "empty", "free" and "up" mean comes from a traits
/// class:
///
/// ```
///   struct Traits {
///     using handle_type = ...;
///     static handle_type null() noexcept;              // the empty value
///     static bool is_null(handle_type h) noexcept;     // empty? (e.g. h < 0 for hid_t)
///     static bool library_up() noexcept;               // may handles be freed now?
///     void free(handle_type h) const noexcept;         // static, or using the traits' state
///   };
/// ```
///
/// Traits may carry state that `free` needs (the UCX context a memory registration belongs
/// to); it moves with the handle.

#include <utility>

namespace hpctrain {

template <class Traits>
class UniqueHandle {
 public:
  using handle_type = typename Traits::handle_type;

  UniqueHandle() noexcept = default;
  /// Takes ownership of `handle` (which may be empty).
  explicit UniqueHandle(handle_type handle, Traits traits = Traits{}) noexcept
      : handle_(Traits::is_null(handle) ? Traits::null() : handle), traits_(std::move(traits)) {}
  ~UniqueHandle() { reset(); }

  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  UniqueHandle(UniqueHandle&& other) noexcept
      : handle_(std::exchange(other.handle_, Traits::null())), traits_(other.traits_) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Traits::null());
      traits_ = other.traits_;
    }
    return *this;
  }

  handle_type get() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return !Traits::is_null(handle_); }
  const Traits& traits() const noexcept { return traits_; }

  /// Gives up ownership without freeing.
  handle_type release() noexcept { return std::exchange(handle_, Traits::null()); }
  /// Frees the handle now (if the library is up; otherwise it is dropped) and leaves it empty.
  void reset() noexcept {
    const handle_type old = release();
    if (!Traits::is_null(old) && Traits::library_up()) traits_.free(old);
  }

 private:
  handle_type handle_ = Traits::null();
  Traits traits_{};
};

/// Traits of a pointer handle freed by the one call `Release(handle)` (its result ignored) of a
/// library that is always up, or that tolerates a late call (UCX contexts and workers, CUDA
/// streams, NCCL communicators): `UniqueHandle<PointerHandleTraits<cudaStream_t, &cudaStreamDestroy>>`.
template <class Handle, auto Release>
struct PointerHandleTraits {
  using handle_type = Handle;
  static handle_type null() noexcept { return nullptr; }
  static bool is_null(handle_type h) noexcept { return h == nullptr; }
  static bool library_up() noexcept { return true; }
  static void free(handle_type h) noexcept { (void)Release(h); }
};

}  // namespace hpctrain
