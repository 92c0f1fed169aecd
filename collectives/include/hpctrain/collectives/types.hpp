#pragma once
/// @file
/// Element types, reduction operations and algorithm names of the collectives layer.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace hpctrain::coll {

/// IEEE 754 binary16. Storage only: arithmetic is done in float.
struct f16 {
  std::uint16_t bits = 0;
};
/// bfloat16 (the upper half of a float). Storage only: arithmetic is done in float.
struct bf16 {
  std::uint16_t bits = 0;
};

/// binary16 -> float (exact).
float to_float(f16 h) noexcept;
/// float -> binary16, round to nearest even; overflow gives ±inf, NaN stays NaN.
f16 to_f16(float f) noexcept;
/// bfloat16 -> float (exact).
inline float to_float(bf16 h) noexcept {
  std::uint32_t u = static_cast<std::uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
/// float -> bfloat16, round to nearest even; NaN stays NaN (quieted). Branch-free, so loops of it
/// vectorise.
inline bf16 to_bf16(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // to nearest, ties to even
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return bf16{static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}
/// Whole arrays, the same values as the element functions above: vectorised loops (AVX-512 or
/// AVX2 where the CPU has them, chosen at run time), for gradients cast to and from the wire.
void to_bf16(const float* in, bf16* out, std::size_t n) noexcept;
void to_float(const bf16* in, float* out, std::size_t n) noexcept;

/// Where a collective's buffers live. `host` (the default of every call) is CPU memory the
/// collectives read directly; `device` is memory only a DeviceMemory (device_memory.hpp) can copy.
enum class MemorySpace { host, device };

enum class DataType { f32, f64, f16, bf16, i32, i64 };
enum class ReduceOp { sum, prod, min, max, avg };

/// All-reduce algorithms. `automatic` chooses by message size and rank count (the cost model
/// in tuning.hpp); `mpi` passes through to MPI_Allreduce (only on an MPI transport); `nccl` to
/// ncclAllReduce (device buffers only).
/// - ring: pipelined ring reduce-scatter + all-gather (bandwidth-optimal)
/// - tree: binomial (small) or pipelined double binary tree (large)
/// - recursive_doubling: lg p exchanges of the whole vector (latency-optimal, small messages)
/// - rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather
/// - shm: single-copy over node-local shared memory (all ranks on one node)
/// - hierarchical: intra-node reduce-scatter, inter-node all-reduce, intra-node all-gather
/// - nccl: passes through to ncclAllReduce, on MemorySpace::device (CUDA) buffers only, in builds
///   with NCCL (nccl_built() in device_memory.hpp); elsewhere refused with an error saying why
/// `automatic` never picks mpi or nccl.
enum class Algorithm { automatic, ring, tree, mpi, recursive_doubling, rabenseifner, shm, hierarchical, nccl };
/// Every Algorithm, in declaration order (help texts and parse errors list them from here). Every
/// build lists and parses `nccl`, so a build without NCCL refuses it naming the reason rather
/// than calling it unknown.
inline constexpr Algorithm kAllAlgorithms[] = {Algorithm::automatic,          Algorithm::ring,
                                               Algorithm::tree,               Algorithm::mpi,
                                               Algorithm::recursive_doubling, Algorithm::rabenseifner,
                                               Algorithm::shm,                Algorithm::hierarchical,
                                               Algorithm::nccl};

/// One message of Communicator::exchange: `bytes` bytes to or from rank `peer`.
struct PeerBuffer {
  int peer = 0;
  void* data = nullptr;
  std::size_t bytes = 0;
};

std::size_t size_of(DataType t) noexcept;
std::string_view to_string(DataType t) noexcept;
std::string_view to_string(ReduceOp op) noexcept;
std::string_view to_string(Algorithm a) noexcept;
/// Parses the names to_string gives (and "automatic"); throws hpctrain::Error naming `where`.
Algorithm parse_algorithm(std::string_view name, std::string_view where = "algorithm");
/// The to_string names of kAllAlgorithms joined by ", " ("auto, ring, tree, ...").
std::string algorithm_names();

/// The DataType of a C++ element type.
template <class T>
struct data_type_of;
template <> struct data_type_of<float> { static constexpr DataType value = DataType::f32; };
template <> struct data_type_of<double> { static constexpr DataType value = DataType::f64; };
template <> struct data_type_of<f16> { static constexpr DataType value = DataType::f16; };
template <> struct data_type_of<bf16> { static constexpr DataType value = DataType::bf16; };
template <> struct data_type_of<std::int32_t> { static constexpr DataType value = DataType::i32; };
template <> struct data_type_of<std::int64_t> { static constexpr DataType value = DataType::i64; };
template <class T>
inline constexpr DataType data_type_v = data_type_of<T>::value;

}  // namespace hpctrain::coll
