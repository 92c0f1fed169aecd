#include "hpctrain/collectives/agreement.hpp"

#include <cstdint>
#include <cstring>
#include <exception>
#include <vector>

#include "hpctrain/base/error.hpp"

namespace hpctrain::coll {

std::string broadcast_string(Communicator& comm, const std::string& s) {
  std::int64_t length = comm.rank() == 0 ? static_cast<std::int64_t>(s.size()) : 0;
  comm.broadcast(&length, 1, DataType::i64, 0);
  std::vector<std::int64_t> words(static_cast<std::size_t>((length + 7) / 8), 0);
  if (comm.rank() == 0 && !s.empty()) std::memcpy(words.data(), s.data(), s.size());
  comm.broadcast(words.data(), words.size(), DataType::i64, 0);
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(length));
}

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
