#include "hpctrain/collectives/string_collectives.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace hpctrain::coll {

namespace {

std::size_t words_for(std::int64_t bytes) { return static_cast<std::size_t>((bytes + 7) / 8); }

/// `s` as `words` 64-bit words, zero-padded.
std::vector<std::int64_t> packed(const std::string& s, std::size_t words) {
  std::vector<std::int64_t> out(words, 0);
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

std::string unpacked(const std::int64_t* words, std::int64_t length) {
  return std::string(reinterpret_cast<const char*>(words), static_cast<std::size_t>(length));
}

}  // namespace

std::string broadcast_string(Communicator& comm, const std::string& s) {
  std::int64_t length = comm.rank() == 0 ? static_cast<std::int64_t>(s.size()) : 0;
  comm.broadcast(&length, 1, DataType::i64, 0);
  std::vector<std::int64_t> words = comm.rank() == 0 ? packed(s, words_for(length))
                                                     : std::vector<std::int64_t>(words_for(length), 0);
  comm.broadcast(words.data(), words.size(), DataType::i64, 0);
  return unpacked(words.data(), length);
}

std::vector<std::string> allgather_strings(Communicator& comm, const std::string& s) {
  const auto ranks = static_cast<std::size_t>(comm.size());
  std::vector<std::int64_t> lengths(ranks, 0);
  const auto mine = static_cast<std::int64_t>(s.size());
  comm.allgather(&mine, lengths.data(), 1, DataType::i64);
  std::vector<std::string> out(ranks);
  const std::size_t words = words_for(*std::max_element(lengths.begin(), lengths.end()));
  if (words == 0) return out;
  const std::vector<std::int64_t> mine_packed = packed(s, words);
  std::vector<std::int64_t> all(words * ranks);
  comm.allgather(mine_packed.data(), all.data(), words, DataType::i64);
  for (std::size_t r = 0; r < ranks; ++r) out[r] = unpacked(all.data() + r * words, lengths[r]);
  return out;
}

}  // namespace hpctrain::coll
