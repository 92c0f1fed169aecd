// PLACEHOLDER (skeleton for issue 3): replaced by the implementation.
#include "algorithms.hpp"
#include "hpctrain/collectives/error.hpp"

namespace hpctrain::coll::detail {
void rabenseifner_allreduce(CollContext&, void*, std::size_t, DataType, ReduceOp) { HPCTRAIN_FAIL("rabenseifner_allreduce: not built yet"); }
}  // namespace hpctrain::coll::detail
