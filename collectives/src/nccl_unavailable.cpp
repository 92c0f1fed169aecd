// The `nccl` algorithm in a build without NCCL (nccl_allreduce.hpp): every entry refuses with the
// reason, so selecting `nccl` fails with one clear error instead of an unknown-algorithm one.
// Builds with HPCTRAIN_ENABLE_NCCL compile nccl_allreduce.cpp instead.

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/device_memory.hpp"
#include "nccl_allreduce.hpp"

namespace hpctrain::coll {

bool nccl_built() noexcept { return false; }

namespace detail {

void NcclCommDelete::operator()(NcclComm* /*never created in this build*/) const noexcept {}

std::string nccl_build_problem() {
  return "this build has no NCCL (configure with -DHPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON and NCCL installed; "
         "docs/collectives.md, \"Device buffers\")";
}

std::string nccl_local_problem(const void*, const void*, int&) { return nccl_build_problem(); }

void nccl_unique_id(void*) { HPCTRAIN_FAIL("nccl: " + nccl_build_problem()); }

NcclCommPtr make_nccl_comm(const void*, int, int, int) { HPCTRAIN_FAIL("nccl: " + nccl_build_problem()); }

void nccl_allreduce(NcclComm&, const void*, void*, std::size_t, DataType, ReduceOp) {
  HPCTRAIN_FAIL("nccl: " + nccl_build_problem());
}

}  // namespace detail
}  // namespace hpctrain::coll
