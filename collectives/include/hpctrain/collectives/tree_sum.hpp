#pragma once
/// @file
/// TreeSum: a float sum of K vectors ("terms", index 0..K-1) spread over the ranks, whose bits
/// depend on K and the terms only, not on how many ranks hold them or which.
///
/// The terms are added over one fixed binary tree on the term index: node (l, i) covers terms
/// [i*2^l, (i+1)*2^l) clipped to [0, K) and is left + right, or its left child alone where the
/// right one is empty; the root is (L, 0), 2^L >= K. Each rank holds contiguous, ascending
/// ranges of terms; it adds, as its terms arrive, every node whose terms it holds all of
/// (its "maximal nodes": the fewest aligned nodes that tile its ranges, one per range at
/// P = 1 and when the ranges are aligned). finish() sends each maximal node's block b of the
/// vector (coll::balanced_block) to rank b, which adds the nodes no rank holds whole, in the
/// same tree; an in-place all-gather gives every rank the sum. Float addition commutes, so
/// every node has the same bits whoever adds it: the result is the same at any P, over any
/// transport and any all-gather algorithm. Every element's sum involves that element alone, so
/// the vector can be finished in segments (finish_segment()), each with the same bits, while
/// the caller is still writing the others: the segment's blocks replace the vector's.
///
/// Cost: no conversion; with one aligned maximal node per rank the bytes moved are a ring
/// all-reduce's. Error: pairwise summation's, |sum - exact| <= ceil(lg K) * u * sum |x|
/// (first order, u = 2^-24) for every element.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <utility>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll {

/// Terms [begin, end) of a TreeSum.
struct TermRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  bool operator==(const TermRange& o) const noexcept { return begin == o.begin && end == o.end; }
};

/// A node of the fixed tree: terms [index*2^level, (index+1)*2^level) clipped to [0, K).
struct TreeNode {
  int level = 0;
  std::int64_t index = 0;
  bool operator==(const TreeNode& o) const noexcept { return level == o.level && index == o.index; }
};

/// The maximal nodes of `ranges` (ascending, disjoint, inside [0, total_terms)), in term order:
/// the nodes a rank holding those terms adds alone.
std::vector<TreeNode> maximal_nodes(const std::vector<TermRange>& ranges, std::int64_t total_terms);

class TreeSum {
 public:
  /// The floats rank `rank`'s TreeSum of vectors of `count` floats allocates for a sum with
  /// these `ranges` (begin()'s arguments): the most nodes it holds at once while its terms
  /// arrive (none lent), and block `rank` of every other rank's maximal node.
  /// With `term_buffers`: the caller lends its first term from a buffer of its own and computes
  /// every later one in term_buffer() (DeterministicSync does), so no term is copied.
  static std::size_t workspace_floats(std::size_t count, std::int64_t total_terms,
                                      const std::vector<std::vector<TermRange>>& ranges, int rank,
                                      bool term_buffers = false);

  /// A sum of vectors of `count` floats.
  explicit TreeSum(std::size_t count);

  /// Starts a sum of `total_terms` terms; `ranges[r]` are rank r's terms (ascending, disjoint;
  /// together they tile [0, total_terms)). `ranges.size()` is the communicator's size.
  /// Every rank passes the same `total_terms` and `ranges`.
  void begin(std::int64_t total_terms, const std::vector<std::vector<TermRange>>& ranges, int rank);

  /// Adds this rank's next term (the terms come in ascending order). With `lend` false the
  /// vector is read during the call only; with `lend` true it must stay valid until finish(),
  /// which may overwrite it (this saves a copy of a term that is not added to another at once).
  void add(std::int64_t term, float* data, bool lend = false);

  /// Adds an aligned node of this rank's next terms at once, computed by the caller as the tree
  /// of those terms (core/leaf_tree.hpp in the compute core sums so): the same as add() of each
  /// of its terms, without their vectors. Nodes from maximal_nodes() of a range of this rank's
  /// next terms qualify. `data` as add()'s.
  void add_node(const TreeNode& node, float* data, bool lend = false);

  /// Storage for this rank's next term: count() floats owned by the sum, contents unspecified.
  /// Compute the term in it and pass it to add() with `lend` true: a term that stays held is
  /// then not copied, and one merged on arrival frees the storage for the next term. Valid
  /// until finish() returns or begin() is called again.
  float* term_buffer();

  /// Adds this rank's last node (terms as add_node()'s; lent) while its vector is still being
  /// written: the sum only notes it. finish_segment() runs the merges it sets off segment by
  /// segment, so a segment's finish can start as soon as the caller has written that segment
  /// (data-parallel overlap: a backward writes the last layers' gradients first).
  void add_last_node(const TreeNode& node, float* data);

  /// Collective, non-blocking: finishes elements [segment.offset, segment.offset + count) of the
  /// sum into `result`, with finish()'s bits. Now, on the calling thread: add_last_node()'s
  /// merges over the segment. Then, queued on `comm`'s progress thread: the exchange of the
  /// segment's blocks (coll::balanced_block of the segment), the owner's adds and the segment's
  /// in-place all-gather. Every rank passes the same segments in the same order; they are
  /// disjoint, and tile [0, count()) by wait_finished(). Every term must have been added; the
  /// segment's elements of the terms and of `result` stay untouched until wait_finished().
  void finish_segment(Communicator& comm, float* result, BlockRange segment);

  /// Waits for every finish_segment() since begin(); rethrows the first error of their
  /// collectives (after the others have ended); throws if the segments did not tile the vector.
  void wait_finished();

  /// Collective: writes the sum of all K terms into `result` (`count` floats) on every rank.
  /// `result` may be a lent term. Every one of this rank's terms must have been added.
  /// finish_segment() of the whole vector, then wait_finished().
  void finish(Communicator& comm, float* result);

  /// When each segment's collectives ran on the progress thread, in finish_segment() order
  /// (empty at P = 1, where nothing is exchanged). Valid after wait_finished().
  struct SegmentTimes {
    BlockRange segment;
    std::chrono::steady_clock::time_point started, finished;
  };
  const std::vector<SegmentTimes>& segment_times() const noexcept { return times_; }

  std::size_t count() const noexcept { return count_; }

  /// Waits for finish_segment()s still queued (their buffers are the sum's).
  ~TreeSum();
  TreeSum(const TreeSum&) = delete;
  TreeSum& operator=(const TreeSum&) = delete;

 private:
  struct Held {
    TreeNode node;
    float* data;
  };
  /// Checks that `node` holds this rank's next terms, pushes it and settles the stack; the
  /// merges it sets off go to chain_, not yet run.
  void push_node(const TreeNode& node, float* data);
  /// Runs chain_'s merges over elements [offset, offset + n), in cache-sized chunks.
  void run_chain(std::size_t offset, std::size_t n);
  /// Waits for every queued finish_segment(); the first error, if any.
  std::exception_ptr wait_all() noexcept;
  float* slot();  ///< a free slot of count_ floats
  bool is_slot(const float* data) const noexcept;

  std::size_t count_;
  std::int64_t total_ = 0;
  int root_ = 0;  ///< the root's level: 2^root_ >= total_
  int rank_ = 0;
  std::vector<std::vector<TermRange>> ranges_;
  std::vector<std::vector<TreeNode>> nodes_;  ///< every rank's maximal nodes
  std::vector<Held> stack_;                   ///< this rank's nodes so far, in term order
  std::vector<std::vector<float>> slots_;     ///< storage of held nodes (reused across sums)
  std::size_t used_slots_ = 0;
  std::vector<float*> free_;                  ///< slots of nodes merged away
  std::vector<std::pair<float*, const float*>> chain_;  ///< add()'s merges (dst += src), reused
  std::int64_t added_ = 0;                    ///< terms added since begin()
  std::int64_t expected_ = 0;                 ///< this rank's terms
  std::vector<std::vector<float>> received_;  ///< per segment: the other ranks' nodes, block rank() of each
  std::vector<BlockRange> segments_;          ///< finish_segment()s since begin()
  std::vector<Work> work_;                    ///< their queued collectives
  std::vector<std::pair<std::size_t, std::size_t>> segment_work_;  ///< per segment: its first and last in work_
  bool two_halves_ = false;  ///< two ranks, one node each, the root's children: finished by an all-reduce
  std::vector<SegmentTimes> times_;
};

}  // namespace hpctrain::coll
