#include "hpctrain/collectives/agreement.hpp"

#include <exception>

#include "hpctrain/base/error.hpp"

namespace hpctrain::coll {

void agree_with_rank0(Communicator& comm, const std::exception_ptr& error) {
  std::string what;
  if (comm.rank() == 0 && error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "unknown error";
    }
    if (what.empty()) what = "error";
  }
  const std::string verdict = broadcast_string(comm, what);
  if (verdict.empty()) return;
  if (comm.rank() == 0) std::rethrow_exception(error);
  throw PeerReportedError("stopping because rank 0 failed: " + verdict, __FILE__, __LINE__);
}

void rank0_decides(Communicator& comm, const std::function<void()>& check) {
  std::exception_ptr error;
  if (comm.rank() == 0) {
    try {
      check();
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_with_rank0(comm, error);
}

}  // namespace hpctrain::coll
