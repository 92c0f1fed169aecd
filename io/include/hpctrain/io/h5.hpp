#pragma once
/// @file
/// RAII handles for HDF5 identifiers, the HDF5 error check, and the one lock that serialises
/// hpctrain's HDF5 calls.
///
/// Every `hid_t` hpctrain opens lives in one of the handle types below: non-copyable, movable
/// (the source is left empty), closed by the destructor, which never throws. `HPCTRAIN_CHECK_H5`
/// turns a failed call into an `hpctrain::Error` whose message names what was being done (file,
/// dataset) and the reason HDF5 gives, taken from its error stack. HDF5's own printing of the
/// error stack to stderr is switched off the first time any of this is used.
///
/// Thread safety: Debian's (and most sites') parallel HDF5 is built without
/// `--enable-threadsafe`, so two threads must never be inside the library at once. hpctrain's rule:
/// every HDF5 call made by hpctrain code runs while holding `h5_mutex()` (take it with
/// `H5Lock`); handle destructors take it themselves. The lock is recursive, so functions that
/// hold it may call each other.

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/unique_handle.hpp"

namespace hpctrain::io {

/// The process-wide lock around HDF5 calls (see the file comment).
std::recursive_mutex& h5_mutex();

/// Holds `h5_mutex()` for its scope.
class H5Lock {
 public:
  H5Lock() : lock_(h5_mutex()) {}

 private:
  std::lock_guard<std::recursive_mutex> lock_;
};

/// Switches off HDF5's automatic printing of error stacks (once per process; idempotent).
/// Called by every function in this library that touches HDF5; call it yourself before raw
/// HDF5 calls that may fail, so they fail quietly and `HPCTRAIN_CHECK_H5` reports them.
void h5_quiet_errors();

/// The current HDF5 error stack of this thread as one line: the innermost (root) cause first,
/// then the outer descriptions, e.g. "file signature not found (unable to open file)".
/// Empty when the stack is empty.
std::string h5_error_stack_message();

namespace detail {
[[noreturn]] void throw_h5_error(const std::string& what, const char* file, int line);

template <class T, class What>
T check_h5(T result, What&& what, const char* file, int line) {
  if (result < 0) throw_h5_error(what(), file, line);
  return result;
}
}  // namespace detail

/// UniqueHandle traits of an HDF5 identifier closed with `Close`; empty handles hold
/// H5I_INVALID_HID (any negative id taken over counts as empty).
template <herr_t (*Close)(hid_t)>
struct H5Traits {
  using handle_type = hid_t;
  static handle_type null() noexcept { return H5I_INVALID_HID; }
  static bool is_null(handle_type id) noexcept { return id < 0; }
  /// HDF5 re-initialises itself on any call, so whether an identifier may still be closed is
  /// asked per identifier in free() (H5Iis_valid), under the HDF5 lock.
  static bool library_up() noexcept { return true; }
  /// Closes `id` (errors are ignored: this runs in destructors).
  static void free(handle_type id) noexcept {
    try {
      H5Lock lock;
      h5_quiet_errors();
      // After H5close() (at process exit) identifiers are already gone: closing them then would
      // re-initialise the library, so only close identifiers HDF5 still knows.
      if (H5Iis_valid(id) > 0) (void)Close(id);
    } catch (...) {
      // h5_quiet_errors/H5Lock cannot throw in practice; a destructor must not either way.
    }
  }
};

/// A handle owning one HDF5 identifier, closed with `Close` (UniqueHandle: non-copyable,
/// movable with the source left empty, closed by the destructor, which never throws).
template <herr_t (*Close)(hid_t)>
using H5Handle = UniqueHandle<H5Traits<Close>>;

using H5File = H5Handle<&H5Fclose>;
using H5Group = H5Handle<&H5Gclose>;
using H5Dataset = H5Handle<&H5Dclose>;
using H5Dataspace = H5Handle<&H5Sclose>;
using H5PropList = H5Handle<&H5Pclose>;
using H5Type = H5Handle<&H5Tclose>;
using H5Attribute = H5Handle<&H5Aclose>;

// ---- small helpers shared by datasets and checkpoints -----------------------------------

/// Whether `path` (absolute, e.g. "/labels" or "/a/b") names an object in `file`; each path
/// component is checked, so a missing parent is "no" rather than an error.
bool h5_exists(hid_t loc, const std::string& path);

/// The dimensions of a dataspace.
std::vector<hsize_t> h5_dims(hid_t space);

/// Writes a scalar or 1-D attribute named `name` on object `obj`.
void h5_write_attribute(hid_t obj, const std::string& name, std::int64_t value);
void h5_write_attribute(hid_t obj, const std::string& name, double value);
void h5_write_attribute(hid_t obj, const std::string& name, const std::vector<std::int64_t>& values);
/// A variable-length UTF-8 string (what h5py returns as `str`).
void h5_write_attribute(hid_t obj, const std::string& name, const std::string& value);
void h5_write_attribute(hid_t obj, const std::string& name, const std::vector<std::string>& values);

bool h5_has_attribute(hid_t obj, const std::string& name);
/// Readers: the attribute must exist and have a compatible class (integers convert to the
/// requested width, a 1-element array reads as a scalar); otherwise hpctrain::Error naming
/// `where` (e.g. "data set 'x.h5' /samples").
std::int64_t h5_read_int_attribute(hid_t obj, const std::string& name, const std::string& where);
double h5_read_double_attribute(hid_t obj, const std::string& name, const std::string& where);
std::vector<std::int64_t> h5_read_int_array_attribute(hid_t obj, const std::string& name,
                                                      const std::string& where);
std::string h5_read_string_attribute(hid_t obj, const std::string& name, const std::string& where);
std::vector<std::string> h5_read_string_array_attribute(hid_t obj, const std::string& name,
                                                        const std::string& where);

}  // namespace hpctrain::io

/// Evaluates the HDF5 call `call`; if it returns a negative value (failure for herr_t, hid_t and
/// htri_t alike) throws hpctrain::Error "<what>: <HDF5 reason>". `what` is evaluated only on
/// failure and should name the file/dataset, e.g. `"open data set '" + path + "'"`.
/// Returns the call's value, so `hid_t id = HPCTRAIN_CHECK_H5(H5Fopen(...), "...");` works.
#define HPCTRAIN_CHECK_H5(call, what)                                                 \
  (::hpctrain::io::h5_quiet_errors(),                                                   \
   ::hpctrain::io::detail::check_h5(                                                    \
       (call), [&]() -> std::string { return std::string(what); }, __FILE__, __LINE__))
