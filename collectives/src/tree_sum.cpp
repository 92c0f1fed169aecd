// TreeSum (tree_sum.hpp). One rule builds every node, on every rank: a stack of nodes in term
// order where the top is promoted while its right sibling is empty and merged into the node
// below while that is its left sibling (settle()). A rank runs it on its own terms as they
// arrive; the owner of a block runs it on all ranks' maximal nodes; maximal_nodes() runs it on
// the shapes alone, so every rank knows what every other rank sends.

#include "hpctrain/collectives/tree_sum.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/vector_clones.hpp"
#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::coll {

namespace {

int root_level(std::int64_t total) {
  int level = 0;
  while ((std::int64_t{1} << level) < total) ++level;
  return level;
}

std::int64_t first_term(const TreeNode& n) { return n.index << n.level; }

/// Settles `stack` after a push: promotes the top while its right sibling holds no term and
/// merges it into the node below while that is its left sibling; merge(below, top) adds top
/// into below. Node is anything with a `node` member.
template <class Node, class Merge>
void settle(std::vector<Node>& stack, std::int64_t total, int root, Merge&& merge) {
  while (true) {
    TreeNode& top = stack.back().node;
    if (top.level < root && top.index % 2 == 0 && ((top.index + 1) << top.level) >= total) {
      ++top.level;
      top.index /= 2;
      continue;
    }
    if (stack.size() < 2) return;
    Node& below = stack[stack.size() - 2];
    if (below.node.level != top.level || below.node.index % 2 != 0 || below.node.index + 1 != top.index) return;
    merge(below, stack.back());
    ++below.node.level;
    below.node.index /= 2;
    stack.pop_back();
  }
}

HPCTRAIN_VECTOR_CLONES void add_into(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

struct Shape {
  TreeNode node;
};

/// The stack of node shapes after `ranges`' terms were added in order (the maximal nodes), and
/// the most nodes it held at once after a term had settled.
struct ShapeStack {
  std::vector<Shape> stack;
  std::size_t most = 0;            ///< the most nodes held after a term's merges
  std::size_t most_computing = 0;  ///< the most slots in use while a term is computed in one
};

ShapeStack stack_of(const std::vector<TermRange>& ranges, std::int64_t total_terms) {
  const int root = root_level(total_terms);
  ShapeStack out;
  for (const TermRange& r : ranges) {
    for (std::int64_t t = r.begin; t < r.end; ++t) {
      // The first term is lent from the caller's buffer (and stays the first held node); a
      // later one is computed in a slot while the held nodes but the first keep theirs.
      if (!out.stack.empty()) out.most_computing = std::max(out.most_computing, out.stack.size());
      out.stack.push_back(Shape{TreeNode{0, t}});
      settle(out.stack, total_terms, root, [](Shape&, Shape&) {});
      out.most = std::max(out.most, out.stack.size());
    }
  }
  return out;
}

}  // namespace

std::vector<TreeNode> maximal_nodes(const std::vector<TermRange>& ranges, std::int64_t total_terms) {
  const ShapeStack s = stack_of(ranges, total_terms);
  std::vector<TreeNode> out;
  out.reserve(s.stack.size());
  for (const Shape& shape : s.stack) out.push_back(shape.node);
  return out;
}

std::size_t TreeSum::workspace_floats(std::size_t count, std::int64_t total_terms,
                                      const std::vector<std::vector<TermRange>>& ranges, int rank,
                                      bool term_buffers) {
  // A held node has a slot; a term merged on arrival needs none, unless it is computed in one.
  const ShapeStack mine = stack_of(ranges.at(static_cast<std::size_t>(rank)), total_terms);
  const std::size_t most = term_buffers ? mine.most_computing : mine.most;
  const int p = static_cast<int>(ranges.size());
  std::size_t others = 0;
  for (int r = 0; r < p; ++r) {
    if (r != rank && p > 1) others += stack_of(ranges[static_cast<std::size_t>(r)], total_terms).stack.size();
  }
  return most * count + others * balanced_block(count, p, rank).count;
}

TreeSum::TreeSum(std::size_t count) : count_(count) {}

void TreeSum::begin(std::int64_t total_terms, const std::vector<std::vector<TermRange>>& ranges, int rank) {
  HPCTRAIN_REQUIRE(total_terms >= 1, "TreeSum: a sum of " + std::to_string(total_terms) + " terms");
  HPCTRAIN_REQUIRE(rank >= 0 && static_cast<std::size_t>(rank) < ranges.size(),
                   "TreeSum: rank " + std::to_string(rank) + " outside the " + std::to_string(ranges.size()) +
                       " ranks' ranges");
  if (total_terms != total_ || ranges != ranges_) {
    std::vector<TermRange> all;
    for (std::size_t r = 0; r < ranges.size(); ++r) {
      std::int64_t last = 0;
      for (const TermRange& t : ranges[r]) {
        HPCTRAIN_REQUIRE(t.begin >= last && t.end >= t.begin && t.end <= total_terms,
                         "TreeSum: rank " + std::to_string(r) + "'s term range [" + std::to_string(t.begin) + ", " +
                             std::to_string(t.end) + ") is not ascending inside [0, " + std::to_string(total_terms) +
                             ")");
        last = t.end;
        if (t.end > t.begin) all.push_back(t);
      }
    }
    std::sort(all.begin(), all.end(), [](const TermRange& a, const TermRange& b) { return a.begin < b.begin; });
    std::int64_t covered = 0;
    for (const TermRange& t : all) {
      HPCTRAIN_REQUIRE(t.begin == covered, "TreeSum: the ranks' ranges do not tile [0, " +
                                               std::to_string(total_terms) + ") at term " + std::to_string(covered));
      covered = t.end;
    }
    HPCTRAIN_REQUIRE(covered == total_terms, "TreeSum: the ranks' ranges end at term " + std::to_string(covered) +
                                                 " of " + std::to_string(total_terms));
    ranges_ = ranges;
    total_ = total_terms;
    root_ = root_level(total_);
    nodes_.clear();
    for (const auto& r : ranges_) nodes_.push_back(maximal_nodes(r, total_));
  }
  rank_ = rank;
  stack_.clear();
  used_slots_ = 0;
  added_ = 0;
  expected_ = 0;
  for (const TermRange& t : ranges_[static_cast<std::size_t>(rank)]) expected_ += t.end - t.begin;
  free_.clear();
}

float* TreeSum::slot() {
  if (!free_.empty()) {
    float* s = free_.back();
    free_.pop_back();
    return s;
  }
  if (used_slots_ == slots_.size()) slots_.emplace_back(count_);
  return slots_[used_slots_++].data();
}

float* TreeSum::term_buffer() {
  HPCTRAIN_REQUIRE(added_ < expected_, "TreeSum::term_buffer: rank " + std::to_string(rank_) + " has added all its " +
                                           std::to_string(expected_) + " terms");
  return slot();
}

bool TreeSum::is_slot(const float* data) const noexcept {
  return std::any_of(slots_.begin(), slots_.end(), [&](const auto& s) { return s.data() == data; });
}

void TreeSum::add(std::int64_t term, float* data, bool lend) { add_node(TreeNode{0, term}, data, lend); }

void TreeSum::add_node(const TreeNode& node, float* data, bool lend) {
  // The node's terms must be this rank's next ones, inside one of its ranges.
  HPCTRAIN_REQUIRE(node.level >= 0 && node.level <= root_ && node.index >= 0,
                   "TreeSum::add_node: node (" + std::to_string(node.level) + ", " + std::to_string(node.index) +
                       ") is not in the tree of " + std::to_string(total_) + " terms");
  const std::int64_t first = first_term(node);
  const std::int64_t count = std::min((node.index + 1) << node.level, total_) - first;
  const auto& mine = ranges_[static_cast<std::size_t>(rank_)];
  std::int64_t expected = -1, room = 0, seen = 0;
  for (const TermRange& t : mine) {
    if (added_ < seen + (t.end - t.begin)) {
      expected = t.begin + (added_ - seen);
      room = t.end - expected;
      break;
    }
    seen += t.end - t.begin;
  }
  if (first != expected || count > room || count < 1) {
    const std::string what = count == 1 ? "term " + std::to_string(first)
                                        : "terms [" + std::to_string(first) + ", " + std::to_string(first + count) + ")";
    const std::string next = expected < 0 ? std::string("none")
                                          : std::to_string(expected) + (first == expected ? ", in a range ending at " +
                                                                                                std::to_string(expected + room)
                                                                                          : std::string());
    HPCTRAIN_FAIL("TreeSum::add: rank " + std::to_string(rank_) + " added " + what + " where its next term is " + next);
  }
  added_ += count;
  // The merges this term sets off form a chain (each adds the node above into the one below);
  // run it in cache-sized chunks, so every vector is read once.
  stack_.push_back(Held{node, data});
  chain_.clear();
  settle(stack_, total_, root_, [&](Held& below, Held& top) {
    chain_.emplace_back(below.data, top.data);
    if (is_slot(top.data)) free_.push_back(top.data);  // read by the chain below, reused only later
  });
  if (chain_.empty()) {
    if (!lend) {  // the new node stays: keep a copy
      float* s = slot();
      std::memcpy(s, data, count_ * sizeof(float));
      stack_.back().data = s;
    }
    return;
  }
  constexpr std::size_t kChunk = 4096;  // 16 KiB per vector
  for (std::size_t c = 0; c < count_; c += kChunk) {
    const std::size_t n = std::min(kChunk, count_ - c);
    for (const auto& [dst, src] : chain_) add_into(dst + c, src + c, n);
  }
}

void TreeSum::finish(Communicator& comm, float* result) {
  HPCTRAIN_REQUIRE(comm.size() == static_cast<int>(ranges_.size()) && comm.rank() == rank_,
                   "TreeSum::finish: the communicator (rank " + std::to_string(comm.rank()) + " of " +
                       std::to_string(comm.size()) + ") is not the one begin() was given");
  HPCTRAIN_REQUIRE(added_ == expected_, "TreeSum::finish: rank " + std::to_string(rank_) + " added " +
                                            std::to_string(added_) + " of its " + std::to_string(expected_) +
                                            " terms");
  const int p = comm.size();
  if (p == 1) {
    HPCTRAIN_REQUIRE(stack_.size() == 1, "TreeSum: one rank holds every term but not one root node");
    if (stack_[0].data != result) std::memcpy(result, stack_[0].data, count_ * sizeof(float));
    return;
  }
  // Block q of every maximal node to rank q; block rank() of the others' nodes to here.
  const BlockRange mine = balanced_block(count_, p, rank_);
  std::vector<PeerBuffer> sends, recvs;
  for (const Held& h : stack_) {
    for (int q = 0; q < p; ++q) {
      const BlockRange b = balanced_block(count_, p, q);
      if (q != rank_ && b.count) sends.push_back(PeerBuffer{q, h.data + b.offset, b.count * sizeof(float)});
    }
  }
  std::size_t others = 0;
  for (int r = 0; r < p; ++r) {
    if (r != rank_) others += nodes_[static_cast<std::size_t>(r)].size();
  }
  received_.resize(others * mine.count);
  // Every rank's nodes in term order, with where block rank() of each lies.
  std::vector<Held> all;
  std::size_t k = 0, own = 0;
  for (int r = 0; r < p; ++r) {
    for (const TreeNode& n : nodes_[static_cast<std::size_t>(r)]) {
      if (r == rank_) {
        all.push_back(Held{n, stack_.at(own++).data + mine.offset});
        continue;
      }
      float* at = received_.data() + k++ * mine.count;
      if (mine.count) recvs.push_back(PeerBuffer{r, at, mine.count * sizeof(float)});
      all.push_back(Held{n, at});
    }
  }
  comm.exchange(sends, recvs);
  std::sort(all.begin(), all.end(),
            [](const Held& a, const Held& b) { return first_term(a.node) < first_term(b.node); });
  std::vector<Held> stack;
  for (const Held& h : all) {
    stack.push_back(h);
    settle(stack, total_, root_, [&](Held& below, Held& top) { add_into(below.data, top.data, mine.count); });
  }
  HPCTRAIN_REQUIRE(stack.size() == 1 && stack[0].node == (TreeNode{root_, 0}),
                   "TreeSum: the ranks' nodes do not form the tree of " + std::to_string(total_) + " terms");
  float* out = result + mine.offset;
  if (mine.count && stack[0].data != out) std::memcpy(out, stack[0].data, mine.count * sizeof(float));
  comm.iallgather_in_place(result, count_, DataType::f32).wait();
}

}  // namespace hpctrain::coll
