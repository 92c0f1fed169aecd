#pragma once
// Test helper: run a test body with float gemms on one backend, restoring the previous one.
#include "hpctrain/core/gemm.hpp"

namespace hpctrain::testing {

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
