// Which ranks of a communicator share a node, and the node's group for the shared-memory
// algorithms (shm, hierarchical): sub-transports and one shared segment per local rank.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "communicator_impl.hpp"
#include "hpctrain/base/error.hpp"
#include "vendor_call_watchdog.hpp"

namespace hpctrain::coll {

const std::vector<int>& Communicator::Impl::node_of_rank() {
  if (!node_of_rank_.empty()) return node_of_rank_;
  const int p = size();
  std::vector<int> node_index(static_cast<std::size_t>(p));
  if (tuning.ranks_per_node > 0) {
    for (int r = 0; r < p; ++r) node_index[static_cast<std::size_t>(r)] = r / tuning.ranks_per_node;
  } else {
    // Machines numbered in order of their first rank.
    const std::vector<int> domains = transport->shared_memory_domains();
    HPCTRAIN_REQUIRE(domains.size() == static_cast<std::size_t>(p),
                     "shared_memory_domains: " + std::to_string(domains.size()) + " entries for " +
                         std::to_string(p) + " ranks");
    std::vector<int> seen;
    for (int r = 0; r < p; ++r) {
      const int d = domains[static_cast<std::size_t>(r)];
      const auto it = std::find(seen.begin(), seen.end(), d);
      node_index[static_cast<std::size_t>(r)] = static_cast<int>(it - seen.begin());
      if (it == seen.end()) seen.push_back(d);
    }
  }
  node_of_rank_ = std::move(node_index);
  return node_of_rank_;
}

int Communicator::Impl::ranks_per_node() {
  if (ranks_per_node_ > 0) return ranks_per_node_;
  const auto& node_index = node_of_rank();
  std::vector<int> count(node_index.size(), 0);
  for (int n : node_index) ++count[static_cast<std::size_t>(n)];
  ranks_per_node_ = *std::max_element(count.begin(), count.end());
  uniform_nodes_ = std::all_of(count.begin(), count.end(), [this](int c) { return c == 0 || c == ranks_per_node_; });
  return ranks_per_node_;
}

bool Communicator::Impl::uniform_nodes() {
  ranks_per_node();  // computes both, once
  return uniform_nodes_;
}

detail::NodeGroup& Communicator::Impl::node_group(const WaitPolicy& wait_policy) {
  if (node) {
    HPCTRAIN_REQUIRE(!node->broken, "allreduce(" + std::string(to_string(wait_policy.algorithm)) +
                                        "): an earlier shared-memory all-reduce on this communicator "
                                        "failed part-way; its node barrier state is inconsistent");
    return *node;
  }
  const auto& node_index = node_of_rank();
  const int me = rank(), my_node = node_index[static_cast<std::size_t>(me)];
  const int nodes = *std::max_element(node_index.begin(), node_index.end()) + 1;
  std::vector<int> sizes(static_cast<std::size_t>(nodes), 0);
  for (int n : node_index) ++sizes[static_cast<std::size_t>(n)];
  const detail::VendorCallWatch watch(
      {"MPI_Comm_split, MPI_Win_allocate_shared", "shared-memory set-up", wait_policy.sequence, 0, DataType::f32, size()},
      tuning.timeout_s);
  auto g = std::make_unique<detail::NodeGroup>();
  g->members.resize(static_cast<std::size_t>(nodes));
  for (int r = 0; r < size(); ++r) g->members[static_cast<std::size_t>(node_index[static_cast<std::size_t>(r)])].push_back(r);
  g->parent_rank = g->members[static_cast<std::size_t>(my_node)];
  g->nodes = nodes;
  g->slices = *std::min_element(sizes.begin(), sizes.end());
  g->local = transport->split(my_node, me);
  if (nodes > 1) g->inter = transport->split(g->local->rank(), me);
  // Staging buffers a whole number of cache lines, so every segment's buffers stay aligned.
  g->segment_bytes = (tuning.shm_segment_bytes + 63) / 64 * 64;
  g->memory = g->local->shared_memory(detail::shm_bytes_per_rank(g->segment_bytes));
  detail::CollContext local_ctx{*g->local, tuning, wait_policy, detail::sequence_tag(0), scratch};
  detail::shm_prepare(local_ctx, *g);
  node = std::move(g);
  return *node;
}

}  // namespace hpctrain::coll
