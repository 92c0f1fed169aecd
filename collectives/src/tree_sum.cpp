// TreeSum (tree_sum.hpp). One rule builds every node, on every rank: a stack of nodes in term
// order where the top is promoted while its right sibling is empty and merged into the node
// below while that is its left sibling (settle()). A rank runs it on its own terms as they
// arrive; the owner of a block runs it on all ranks' maximal nodes; maximal_nodes() runs it on
// the shapes alone, so every rank knows what every other rank sends.

#include "hpctrain/collectives/tree_sum.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
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
    // Two ranks holding one node each, the root's two children: the root is one addition per
    // element, which any all-reduce of the two nodes computes with the same bits.
    two_halves_ = false;
    if (nodes_.size() == 2 && nodes_[0].size() == 1 && nodes_[1].size() == 1) {
      std::vector<Shape> both{Shape{nodes_[0][0]}, Shape{nodes_[1][0]}};
      int adds = 0;
      settle(both, total_, root_, [&](Shape&, Shape&) { ++adds; });
      two_halves_ = adds == 1 && both.size() == 1 && both[0].node == (TreeNode{root_, 0});
    }
  }
  if (!work_.empty()) {  // a sum whose finish failed: let its collectives end before reusing buffers
    (void)wait_all();
    work_.clear();
  }
  segments_.clear();
  segment_work_.clear();
  chain_.clear();
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

void TreeSum::push_node(const TreeNode& node, float* data) {
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
  // The merges this node sets off form a chain (each adds the node above into the one below).
  stack_.push_back(Held{node, data});
  chain_.clear();
  settle(stack_, total_, root_, [&](Held& below, Held& top) {
    chain_.emplace_back(below.data, top.data);
    if (is_slot(top.data)) free_.push_back(top.data);  // read by the chain below, reused only later
  });
}

void TreeSum::run_chain(std::size_t offset, std::size_t n) {
  // In cache-sized chunks, so every vector is read once.
  constexpr std::size_t kChunk = 4096;  // 16 KiB per vector
  for (std::size_t c = offset; c < offset + n; c += kChunk) {
    const std::size_t m = std::min(kChunk, offset + n - c);
    for (const auto& [dst, src] : chain_) add_into(dst + c, src + c, m);
  }
}

void TreeSum::add_node(const TreeNode& node, float* data, bool lend) {
  HPCTRAIN_REQUIRE(segments_.empty(), "TreeSum::add_node after finish_segment: call begin() first");
  push_node(node, data);
  if (chain_.empty()) {
    if (!lend) {  // the new node stays: keep a copy
      float* s = slot();
      std::memcpy(s, data, count_ * sizeof(float));
      stack_.back().data = s;
    }
    return;
  }
  run_chain(0, count_);
  chain_.clear();
}

void TreeSum::add_last_node(const TreeNode& node, float* data) {
  HPCTRAIN_REQUIRE(segments_.empty(), "TreeSum::add_last_node after finish_segment: call begin() first");
  push_node(node, data);  // its merges wait in chain_ for finish_segment()
  HPCTRAIN_REQUIRE(added_ == expected_, "TreeSum::add_last_node: rank " + std::to_string(rank_) + " has added " +
                                            std::to_string(added_) + " of its " + std::to_string(expected_) +
                                            " terms with this node: it is not the last");
}

void TreeSum::finish_segment(Communicator& comm, float* result, BlockRange segment) {
  HPCTRAIN_REQUIRE(comm.size() == static_cast<int>(ranges_.size()) && comm.rank() == rank_,
                   "TreeSum::finish: the communicator (rank " + std::to_string(comm.rank()) + " of " +
                       std::to_string(comm.size()) + ") is not the one begin() was given");
  HPCTRAIN_REQUIRE(added_ == expected_, "TreeSum::finish: rank " + std::to_string(rank_) + " added " +
                                            std::to_string(added_) + " of its " + std::to_string(expected_) +
                                            " terms");
  const auto overlaps = [&](const BlockRange& o) {
    return segment.offset < o.offset + o.count && o.offset < segment.offset + segment.count;
  };
  HPCTRAIN_REQUIRE(segment.offset + segment.count <= count_ &&
                       std::none_of(segments_.begin(), segments_.end(), overlaps),
                   "TreeSum::finish_segment: elements [" + std::to_string(segment.offset) + ", " +
                       std::to_string(segment.offset + segment.count) + ") are outside the " +
                       std::to_string(count_) + " or already finished");
  if (segment.count == 0) return;
  segments_.push_back(segment);
  run_chain(segment.offset, segment.count);
  const int p = comm.size();
  if (p == 1) {
    HPCTRAIN_REQUIRE(stack_.size() == 1, "TreeSum: one rank holds every term but not one root node");
    float* out = result + segment.offset;
    const float* in = stack_[0].data + segment.offset;
    if (in != out) std::memcpy(out, in, segment.count * sizeof(float));
    return;
  }
  if (two_halves_) {
    // node 0 + node 1 with one addition per element; float addition commutes, so the all-reduce's
    // bits are the tree's whichever rank adds (every algorithm of the communicator adds each
    // element once at two ranks: Allreduce.TwoRanksAddEachElementOnceWithEveryAlgorithm).
    segment_work_.emplace_back(work_.size(), work_.size());
    work_.push_back(comm.iallreduce(stack_[0].data + segment.offset, result + segment.offset, segment.count,
                                    DataType::f32, ReduceOp::sum));
    return;
  }
  // Block q of the segment of every maximal node to rank q; block rank() of the others' to here.
  const auto block = [&](int q) {
    BlockRange b = balanced_block(segment.count, p, q);
    b.offset += segment.offset;
    return b;
  };
  const BlockRange mine = block(rank_);
  std::vector<PeerBuffer> sends, recvs;
  for (const Held& h : stack_) {
    for (int q = 0; q < p; ++q) {
      const BlockRange b = block(q);
      if (q != rank_ && b.count) sends.push_back(PeerBuffer{q, h.data + b.offset, b.count * sizeof(float)});
    }
  }
  std::size_t others = 0;
  for (int r = 0; r < p; ++r) {
    if (r != rank_) others += nodes_[static_cast<std::size_t>(r)].size();
  }
  if (received_.size() < segments_.size()) received_.resize(segments_.size());
  std::vector<float>& received = received_[segments_.size() - 1];
  received.resize(others * mine.count);
  // Every rank's nodes in term order, with where block rank() of each lies.
  std::vector<Held> all;
  std::size_t k = 0, own = 0;
  for (int r = 0; r < p; ++r) {
    for (const TreeNode& n : nodes_[static_cast<std::size_t>(r)]) {
      if (r == rank_) {
        all.push_back(Held{n, stack_.at(own++).data + mine.offset});
        continue;
      }
      float* at = received.data() + k++ * mine.count;
      if (mine.count) recvs.push_back(PeerBuffer{r, at, mine.count * sizeof(float)});
      all.push_back(Held{n, at});
    }
  }
  std::sort(all.begin(), all.end(),
            [](const Held& a, const Held& b) { return first_term(a.node) < first_term(b.node); });
  // After the exchange, on the progress thread: the owner's adds, in the same tree.
  float* out = result + mine.offset;
  auto combine = [all = std::move(all), out, n = mine.count, total = total_, root = root_]() mutable {
    std::vector<Held> stack;
    for (const Held& h : all) {
      stack.push_back(h);
      settle(stack, total, root, [&](Held& below, Held& top) { add_into(below.data, top.data, n); });
    }
    HPCTRAIN_REQUIRE(stack.size() == 1 && stack[0].node == (TreeNode{root, 0}),
                     "TreeSum: the ranks' nodes do not form the tree of " + std::to_string(total) + " terms");
    if (n && stack[0].data != out) std::memcpy(out, stack[0].data, n * sizeof(float));
  };
  segment_work_.emplace_back(work_.size(), work_.size() + 1);
  work_.push_back(comm.iexchange(std::move(sends), std::move(recvs), std::move(combine)));
  work_.push_back(comm.iallgather_in_place(result + segment.offset, segment.count, DataType::f32));
}

std::exception_ptr TreeSum::wait_all() noexcept {
  std::exception_ptr first;
  for (Work& w : work_) {
    try {
      w.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  return first;
}

void TreeSum::wait_finished() {
  const std::exception_ptr error = wait_all();
  times_.clear();
  for (std::size_t s = 0; s < segment_work_.size(); ++s) {
    const auto [first, last] = segment_work_[s];
    times_.push_back(SegmentTimes{segments_[s], work_[first].started_at(), work_[last].finished_at()});
  }
  work_.clear();
  if (error) std::rethrow_exception(error);
  std::size_t covered = 0;
  for (const BlockRange& s : segments_) covered += s.count;
  HPCTRAIN_REQUIRE(covered == count_, "TreeSum::wait_finished: the finished segments cover " +
                                          std::to_string(covered) + " of the " + std::to_string(count_) + " elements");
}

void TreeSum::finish(Communicator& comm, float* result) {
  finish_segment(comm, result, BlockRange{0, count_});
  wait_finished();
}

TreeSum::~TreeSum() { (void)wait_all(); }

}  // namespace hpctrain::coll
