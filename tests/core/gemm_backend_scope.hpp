#pragma once
// Test helper: run a test body with float gemms on one backend, restoring the previous one.
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/gemm.hpp"

#include <vector>

namespace hpctrain::testing {

/// Whether this build (and CPU) has gemm backend `b`.
inline bool gemm_backend_built(core::GemmBackend b) {
  if (b == core::GemmBackend::onednn) return core::onednn_available();
  if (b == core::GemmBackend::libxsmm) return core::libxsmm_available();
  return true;
}

/// Every gemm backend, built or not (tests skip the ones gemm_backend_built() says are missing).
inline std::vector<core::GemmBackend> all_gemm_backends() {
  return {core::GemmBackend::blas, core::GemmBackend::onednn, core::GemmBackend::libxsmm};
}

class GemmBackendScope {
 public:
  explicit GemmBackendScope(core::GemmBackend b) : saved_(core::gemm_backend()) {
    core::set_gemm_backend(b);
  }
  ~GemmBackendScope() { core::set_gemm_backend(saved_); }
  GemmBackendScope(const GemmBackendScope&) = delete;
  GemmBackendScope& operator=(const GemmBackendScope&) = delete;

 private:
  core::GemmBackend saved_;
};

}  // namespace hpctrain::testing
