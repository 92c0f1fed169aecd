// GELU through oneDNN's eltwise primitive (algorithm eltwise_gelu_tanh: the same formula as the
// portable kernel, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
//
// Why: the portable kernel calls libm's tanhf per element (scalar; expm1f inside it), which was
// 40 % of a transformer training step in a perf profile (one core, batch 128). oneDNN's JIT
// kernel evaluates tanh with a vectorised polynomial. Its results differ from libm's in the last
// bits (tests/core: within 2e-6 relative of a float64 reference, as the portable one), the same
// for any thread count (element-wise, no reductions).
//
// Schedule: one forward and one backward primitive per element count, created on first use and
// cached (onednn::cached: a model has a few, its activations at the training, last-partial and
// evaluation batch sizes).

#include "eltwise_onednn.hpp"

#include "onednn_engine.hpp"

#include <oneapi/dnnl/dnnl.hpp>


namespace hpctrain::core::onednn {

namespace {

using dnnl::memory;

struct Entry {
  memory::desc md;
  dnnl::eltwise_forward forward;
  dnnl::eltwise_backward backward;
};

Entry make_entry(std::int64_t n) {
  Entry e;
  e.md = memory::desc({n}, memory::data_type::f32, memory::format_tag::a);
  const auto algo = dnnl::algorithm::eltwise_gelu_tanh;
  auto& eng = cpu_engine();
#if DNNL_VERSION_MAJOR >= 3
  const dnnl::eltwise_forward::primitive_desc fwd(eng, dnnl::prop_kind::forward_training, algo, e.md, e.md);
  const dnnl::eltwise_backward::primitive_desc bwd(eng, algo, e.md, e.md, e.md, fwd);
#else
  const dnnl::eltwise_forward::primitive_desc fwd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algo, e.md, 0.0F, 0.0F), eng);
  const dnnl::eltwise_backward::primitive_desc bwd(dnnl::eltwise_backward::desc(algo, e.md, e.md, 0.0F, 0.0F), eng,
                                                   fwd);
#endif
  e.forward = dnnl::eltwise_forward(fwd);
  e.backward = dnnl::eltwise_backward(bwd);
  return e;
}

Entry entry_for(std::int64_t n) { return cached<std::int64_t, Entry>(n, make_entry); }

}  // namespace

void gelu_tanh_forward(const float* x, float* y, std::int64_t n) {
  if (n == 0) return;
  const Entry e = entry_for(n);
  auto& eng = cpu_engine();
  memory src(e.md, eng, const_cast<float*>(x));
  memory dst(e.md, eng, y);
  auto& s = thread_stream();
  e.forward.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  s.wait();
}

void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::int64_t n) {
  if (n == 0) return;
  const Entry e = entry_for(n);
  auto& eng = cpu_engine();
  memory src(e.md, eng, const_cast<float*>(x));
  memory diff_dst(e.md, eng, const_cast<float*>(dy));
  memory diff_src(e.md, eng, dx);
  auto& s = thread_stream();
  e.backward.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_src}});
  s.wait();
}

}  // namespace hpctrain::core::onednn
