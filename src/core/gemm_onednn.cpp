// Matrix multiply through oneDNN's matmul primitive (CPU), behind core::gemm.
//
// Why: at the dense layers' training shapes (batch 64-128 rows, 10-784 columns) oneDNN's
// brgemm kernels (`brg:avx512_core`) ran at 1.12x the GFLOP/s of OpenBLAS 0.3.21's sgemm
// (SkylakeX kernels) summed over an MLP step's gemms on one core, 0.83-2.1x per gemm, and 2.08x
// against the Haswell kernels OPENBLAS_CORETYPE selects on this image (docs/compute-core.md;
// bench_kernels' gemm rows measure both in one run). Schedule: one primitive per (shape, strides, beta, bias) is created on first use
// and cached for the process (creation JIT-compiles a kernel, ~0.1-1 ms; execution reuses it).
// Transposes are strides on the memory descriptors, so nothing is copied. beta = 1 (the weight
// gradient accumulates) is oneDNN's `sum` post-op; the dense forward's bias is the primitive's
// bias argument, added to the accumulator before the store (one pass over y instead of two).
//
// batched_gemm (the attention's products) is one matmul over 4-D [outer, inner, rows, cols]
// strided memory descriptors, cached the same way by (shape, strides, alpha, beta); oneDNN
// 2.6 runs these non-dense batches with its jit sgemm (`gemm:jit`), looping over the batch
// inside one primitive call.
//
// Scratchpads: every matmul here takes the calling thread's (scratchpad_mode::user), so one
// cached primitive can run on several threads at once -- deterministic training's leaves side by
// side (the attention's products, core/attention.cpp; the projections' per-leaf products,
// gemm.cpp).
//
// Bits: for a fixed shape and thread count the kernels are deterministic (static blocking, no
// atomics), so results do not vary run to run; they differ from OpenBLAS's in the last bits.
//
// Works with oneDNN 2.x (desc + primitive_desc) and 3.x (primitive_desc only).

#include "gemm_onednn.hpp"

#include "onednn_engine.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <tuple>

namespace hpctrain::core::onednn {

namespace {

using dnnl::memory;

/// The calling thread's scratchpad for matmuls, at least `bytes` long (grown, never shrunk).
/// Every matmul here takes the caller's scratchpad (scratchpad_mode::user): deterministic
/// training's leaves run one primitive on several threads at once (core/attention.cpp,
/// gemm.cpp's leaves side by side), and with the library's scratchpad a primitive's executions
/// share one.
const memory& thread_scratchpad(std::size_t bytes) {
  thread_local memory pad;
  thread_local std::size_t size = 0;
  if (size < bytes || size == 0) {
    size = std::max<std::size_t>(bytes, 1);
    pad = memory(memory::desc({static_cast<memory::dim>(size)}, memory::data_type::u8, memory::format_tag::a),
                 cpu_engine());
  }
  return pad;
}

struct Key {
  std::int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb, bias;
  float beta;
  bool operator<(const Key& o) const {
    return std::tie(m, n, k, lda, ldb, ldc, ta, tb, bias, beta) <
           std::tie(o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ta, o.tb, o.bias, o.beta);
  }
};

struct Entry {
  memory::desc a, b, c, bias;
  std::size_t scratchpad_bytes = 0;
  dnnl::matmul primitive;
};

memory::desc operand(std::int64_t rows, std::int64_t cols, std::int64_t ld, bool trans) {
  // op(X)[i][j] lives at X + i*ld + j (plain) or X + j*ld + i (transposed).
  return memory::desc({rows, cols}, memory::data_type::f32,
                      trans ? memory::dims{1, ld} : memory::dims{ld, 1});
}

Entry make_entry(const Key& key) {
  Entry e;
  e.a = operand(key.m, key.k, key.lda, key.ta);
  e.b = operand(key.k, key.n, key.ldb, key.tb);
  e.c = operand(key.m, key.n, key.ldc, false);
  if (key.bias) e.bias = memory::desc({1, key.n}, memory::data_type::f32, memory::dims{key.n, 1});
  dnnl::primitive_attr attr;
  if (key.beta != 0.0F) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
#if DNNL_VERSION_MAJOR >= 3
  const dnnl::matmul::primitive_desc pd(cpu_engine(), e.a, e.b, e.bias, e.c, attr);
#else
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.bias, e.c), attr,
                                        cpu_engine());
#endif
  e.scratchpad_bytes = pd.scratchpad_desc().get_size();
  e.primitive = dnnl::matmul(pd);
  return e;
}

Entry entry_for(const Key& key) { return cached<Key, Entry>(key, make_entry); }

// ---- batched: 4-D strided operands, alpha as a linear post-op -------------------------------

struct BatchedKey {
  std::int64_t outer, inner, m, n, k;
  std::array<std::int64_t, 4> sa, sb, sc;
  float alpha, beta;
  bool operator<(const BatchedKey& o) const {
    return std::tie(outer, inner, m, n, k, sa, sb, sc, alpha, beta) <
           std::tie(o.outer, o.inner, o.m, o.n, o.k, o.sa, o.sb, o.sc, o.alpha, o.beta);
  }
};

struct BatchedEntry {
  memory::desc a, b, c;
  std::size_t scratchpad_bytes = 0;
  dnnl::matmul primitive;
};


memory::desc strided(std::int64_t outer, std::int64_t inner, std::int64_t rows,
                     std::int64_t cols, const std::array<std::int64_t, 4>& s) {
  return memory::desc({outer, inner, rows, cols}, memory::data_type::f32,
                      memory::dims{s[0], s[1], s[2], s[3]});
}

BatchedEntry make_batched_entry(const BatchedKey& key) {
  BatchedEntry e;
  e.a = strided(key.outer, key.inner, key.m, key.k, key.sa);
  e.b = strided(key.outer, key.inner, key.k, key.n, key.sb);
  e.c = strided(key.outer, key.inner, key.m, key.n, key.sc);
  dnnl::primitive_attr attr;
  dnnl::post_ops ops;
  // dst = alpha acc + beta dst. oneDNN 2.x: alpha is the output scale, applied before the sum
  // post-op (its jit gemm takes both; a linear post-op followed by a sum fell back to the
  // reference kernel). 3.x has no output scale: a linear post-op, applied in order before the
  // sum, which reads the old dst.
  if (key.alpha != 1.0F) {
#if DNNL_VERSION_MAJOR >= 3
    ops.append_eltwise(dnnl::algorithm::eltwise_linear, key.alpha, 0.0F);
#else
    attr.set_output_scales(0, {key.alpha});
#endif
  }
  if (key.beta != 0.0F) ops.append_sum(key.beta);
  attr.set_post_ops(ops);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
#if DNNL_VERSION_MAJOR >= 3
  const dnnl::matmul::primitive_desc pd(cpu_engine(), e.a, e.b, e.c, attr);
#else
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), attr, cpu_engine());
#endif
  e.scratchpad_bytes = pd.scratchpad_desc().get_size();
  e.primitive = dnnl::matmul(pd);
  return e;
}

}  // namespace

void gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatrixOperand a, MatrixOperand b,
          float beta, float* c, std::int64_t ldc, const float* bias) {
  const Key key{m, n, k, a.ld, b.ld, ldc, a.trans, b.trans, bias != nullptr, beta};
  const Entry e = entry_for(key);
  auto& eng = cpu_engine();
  memory am(e.a, eng, const_cast<float*>(a.data));
  memory bm(e.b, eng, const_cast<float*>(b.data));
  memory cm(e.c, eng, c);
  auto& s = thread_stream();
  const memory& pad = thread_scratchpad(e.scratchpad_bytes);
  if (bias != nullptr) {
    memory biasm(e.bias, eng, const_cast<float*>(bias));
    e.primitive.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm},
                            {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, pad}});
  } else {
    e.primitive.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm},
                            {DNNL_ARG_SCRATCHPAD, pad}});
  }
  s.wait();
}

void batched_gemm(const BatchedShape& shape, float alpha, StridedOperand a, StridedOperand b,
                  float beta, StridedOperand c) {
  const BatchedKey key{shape.outer, shape.inner, shape.m, shape.n, shape.k,
                       a.strides,   b.strides,   c.strides, alpha, beta};
  const BatchedEntry e = cached<BatchedKey, BatchedEntry>(key, make_batched_entry);
  auto& eng = cpu_engine();
  memory am(e.a, eng, const_cast<float*>(a.data));
  memory bm(e.b, eng, const_cast<float*>(b.data));
  memory cm(e.c, eng, const_cast<float*>(c.data));
  auto& s = thread_stream();
  e.primitive.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm},
                          {DNNL_ARG_SCRATCHPAD, thread_scratchpad(e.scratchpad_bytes)}});
  s.wait();
}

}  // namespace hpctrain::core::onednn
