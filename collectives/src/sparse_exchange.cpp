// Communicator::exchange: the k-th message between two ranks carries tag phase k mod 256 (the
// transports match messages of one tag in order, so a wrap cannot mismatch them).

#include <cstring>
#include <vector>

#include "algorithms.hpp"
#include "hpctrain/base/error.hpp"

namespace hpctrain::coll::detail {

void sparse_exchange(CollContext& ctx, const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs) {
  Transport& t = ctx.transport;
  const int me = t.rank();
  const auto p = static_cast<std::size_t>(t.size());
  std::vector<std::uint32_t> sent(p, 0), received(p, 0);
  std::vector<const PeerBuffer*> to_self;
  std::vector<Request> reqs;
  reqs.reserve(sends.size() + recvs.size());
  for (const PeerBuffer& m : recvs) {
    if (m.peer == me) continue;
    const Tag phase = received[static_cast<std::size_t>(m.peer)]++ & 0xffu;
    reqs.push_back(t.irecv(m.data, m.bytes, m.peer, ctx.base_tag | phase));
  }
  for (const PeerBuffer& m : sends) {
    if (m.peer == me) {
      to_self.push_back(&m);
      continue;
    }
    const Tag phase = sent[static_cast<std::size_t>(m.peer)]++ & 0xffu;
    reqs.push_back(t.isend(m.data, m.bytes, m.peer, ctx.base_tag | phase));
  }
  std::size_t k = 0;
  for (const PeerBuffer& m : recvs) {
    if (m.peer != me) continue;
    HPCTRAIN_REQUIRE(k < to_self.size() && to_self[k]->bytes == m.bytes,
                     "exchange: rank " + std::to_string(me) + "'s messages to itself do not match its receives");
    if (m.bytes && m.data != to_self[k]->data) std::memcpy(m.data, to_self[k]->data, m.bytes);
    ++k;
  }
  HPCTRAIN_REQUIRE(k == to_self.size(), "exchange: rank " + std::to_string(me) + " sends itself " +
                                            std::to_string(to_self.size()) + " messages but receives " +
                                            std::to_string(k));
  wait_all(t, reqs, ctx.policy);
}

}  // namespace hpctrain::coll::detail
