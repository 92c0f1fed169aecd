// Convolution through oneDNN (CPU), behind core::conv2d_forward / conv2d_backward.
//
// Schedule, following oneDNN's own CNN training examples: the three primitives (forward,
// backward data, backward weights) are created once per geometry with format_tag::any, so the
// library picks its blocked layouts (nChw16c / OIhw16i16o on AVX-512) and its fastest direct
// kernels; our tensors stay NCHW / OIHW and are reordered in and out. Per forward: reorder x
// and w in (x is kept in the library's layout for the weight gradient), run, reorder y out.
// Per backward: reorder dy in (once per layout the two backward primitives want), run the
// weight gradient into scratch and add it to dw / db (our contract accumulates; oneDNN
// overwrites), run the data gradient and reorder dx out. The reorders move O(N C H W + N F Ho Wo)
// bytes against O(N F C K^2 Ho Wo) flops, a few per cent of the conv time at the CNN's shapes.
//
// Scratchpads are the state's own (scratchpad_mode::user, one buffer per state, sized for the
// largest of its primitives): with the library's default, oneDNN's scratchpad is common to the
// primitives of a thread, and a primitive must run in the thread that created it. Deterministic
// training runs micro-shard leaves side by side on an OpenMP team, each leaf's state created in
// one thread and run in whichever thread takes the leaf next (that failed one run in three with
// "could not execute a primitive" before).
//
// Works with oneDNN 2.x (desc + primitive_desc) and 3.x (primitive_desc only).

#include "conv_onednn.hpp"
#include "onednn_engine.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"

namespace hpctrain::core {

using dnnl::memory;
using Tag = dnnl::memory::format_tag;

namespace {

using onednn::cpu_engine;

/// Primitive attributes with a caller-provided scratchpad (the file comment says why).
dnnl::primitive_attr own_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

/// A reorder from `src`'s layout to `dst`'s that takes its scratchpad from the caller.
struct Reorder {
  dnnl::reorder primitive;
  std::size_t scratchpad_bytes = 0;

  Reorder() = default;
  Reorder(const memory& src, const memory& dst) {
    const dnnl::reorder::primitive_desc pd(src, dst, own_scratchpad());
    primitive = dnnl::reorder(pd);
    scratchpad_bytes = pd.scratchpad_desc().get_size();
  }
  void execute(dnnl::stream& s, const memory& src, const memory& dst, const memory& scratchpad) const {
    primitive.execute(s, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}});
  }
};

/// One tensor seen two ways: the user's plain layout and the primitive's. `to_lib` copies the
/// user's data in (a reorder when the layouts differ), `to_user` copies it back out.
struct LayoutPair {
  memory user;
  memory lib;
  bool differs = false;
  Reorder in, out;

  LayoutPair() = default;
  LayoutPair(const memory::desc& user_md, const memory::desc& lib_md, bool owns_lib) {
    auto& eng = cpu_engine();
    user = memory(user_md, eng, DNNL_MEMORY_NONE);
    differs = !(user_md == lib_md);
    if (differs || owns_lib) {
      lib = memory(lib_md, eng);  // library-allocated
    } else {
      lib = memory(lib_md, eng, DNNL_MEMORY_NONE);  // aliases the user's buffer
    }
    if (differs) {
      in = Reorder(user, lib);
      out = Reorder(lib, user);
    }
  }
  std::size_t scratchpad_bytes() const { return std::max(in.scratchpad_bytes, out.scratchpad_bytes); }
  /// lib := user data at `ptr` (aliasing when the layouts agree and lib is not owned).
  void to_lib(dnnl::stream& s, const float* ptr, bool owns_lib, const memory& scratchpad) {
    user.set_data_handle(const_cast<float*>(ptr));
    if (differs) {
      in.execute(s, user, lib, scratchpad);
    } else if (owns_lib) {
      std::memcpy(lib.get_data_handle(), ptr, lib.get_desc().get_size());
    } else {
      lib.set_data_handle(const_cast<float*>(ptr));
    }
  }
  /// Points the primitive's output at the user's buffer when the layouts agree.
  void bind_output(float* ptr) {
    user.set_data_handle(ptr);
    if (!differs) lib.set_data_handle(ptr);
  }
  /// user data at the bound pointer := lib (a reorder when the layouts differ).
  void to_user(dnnl::stream& s, const memory& scratchpad) {
    if (differs) out.execute(s, lib, user, scratchpad);
  }
};

memory::desc plain(const memory::dims& dims, Tag tag) {
  return memory::desc(dims, memory::data_type::f32, tag);
}
memory::desc any(const memory::dims& dims) { return plain(dims, Tag::any); }

}  // namespace

struct OnednnConvState {
  Conv2dGeometry g;
  dnnl::stream stream{cpu_engine()};
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  // forward
  LayoutPair src, weights, dst;
  memory bias;
  // backward
  LayoutPair diff_dst_data, diff_dst_weights, weights_for_data, diff_src, diff_weights;
  memory src_for_weights;  ///< the forward's src in the layout backward-weights wants
  Reorder src_to_weights_layout;
  memory scratchpad;  ///< every primitive's and reorder's scratchpad (one runs at a time)
  bool src_layouts_differ = false;
  memory diff_bias;
  bool diff_dst_shared = false;  ///< both backward primitives take dy in the same layout
  std::vector<float> weight_grad_oihw;
  bool have_forward = false;

  explicit OnednnConvState(const Conv2dGeometry& geometry);
};

namespace {

bool same_geometry(const Conv2dGeometry& a, const Conv2dGeometry& b) {
  return a.batch == b.batch && a.in_channels == b.in_channels && a.height == b.height &&
         a.width == b.width && a.out_channels == b.out_channels && a.kernel == b.kernel &&
         a.stride == b.stride && a.pad == b.pad;
}

}  // namespace

OnednnConvState::OnednnConvState(const Conv2dGeometry& geometry) : g(geometry) {
  auto& eng = cpu_engine();
  const memory::dims src_dims{g.batch, g.in_channels, g.height, g.width};
  const memory::dims wei_dims{g.out_channels, g.in_channels, g.kernel, g.kernel};
  const memory::dims bias_dims{g.out_channels};
  const memory::dims dst_dims{g.batch, g.out_channels, g.out_height(), g.out_width()};
  const memory::dims strides{g.stride, g.stride}, padding{g.pad, g.pad};
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto bias_md = plain(bias_dims, Tag::x);
  // The blocked layouts pad channels to 16: with fewer input channels the direct data-gradient
  // kernel does up to 16x the work (conv1, C = 1: 12.5 ms against 2.2 ms for oneDNN's gemm
  // kernel on plain NCHW, measured at batch 64), so a thin input's gradient stays plain.
  const auto diff_src_md = g.in_channels < 16 ? plain(src_dims, Tag::nchw) : any(src_dims);
  const dnnl::primitive_attr attr = own_scratchpad();
#if DNNL_VERSION_MAJOR >= 3
  fwd_pd = dnnl::convolution_forward::primitive_desc(
      eng, dnnl::prop_kind::forward_training, algo, any(src_dims), any(wei_dims), bias_md,
      any(dst_dims), strides, padding, padding, attr);
  bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(
      eng, algo, diff_src_md, any(wei_dims), any(dst_dims), strides, padding, padding, fwd_pd, attr);
  bwd_weights_pd = dnnl::convolution_backward_weights::primitive_desc(
      eng, algo, any(src_dims), any(wei_dims), bias_md, any(dst_dims), strides, padding, padding,
      fwd_pd, attr);
#else
  fwd_pd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, any(src_dims),
                                      any(wei_dims), bias_md, any(dst_dims), strides, padding,
                                      padding),
      attr, eng);
  bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(algo, diff_src_md, any(wei_dims), any(dst_dims),
                                            strides, padding, padding),
      attr, eng, fwd_pd);
  bwd_weights_pd = dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(algo, any(src_dims), any(wei_dims), bias_md,
                                               any(dst_dims), strides, padding, padding),
      attr, eng, fwd_pd);
#endif
  fwd = dnnl::convolution_forward(fwd_pd);
  bwd_data = dnnl::convolution_backward_data(bwd_data_pd);
  bwd_weights = dnnl::convolution_backward_weights(bwd_weights_pd);

  const auto src_user = plain(src_dims, Tag::nchw), dst_user = plain(dst_dims, Tag::nchw);
  const auto wei_user = plain(wei_dims, Tag::oihw);
  src = LayoutPair(src_user, fwd_pd.src_desc(), /*owns_lib=*/true);  // kept for backward
  weights = LayoutPair(wei_user, fwd_pd.weights_desc(), false);
  dst = LayoutPair(dst_user, fwd_pd.dst_desc(), false);
  bias = memory(bias_md, eng, DNNL_MEMORY_NONE);

  diff_dst_data = LayoutPair(dst_user, bwd_data_pd.diff_dst_desc(), false);
  diff_dst_weights = LayoutPair(dst_user, bwd_weights_pd.diff_dst_desc(), false);
  weights_for_data = LayoutPair(wei_user, bwd_data_pd.weights_desc(), false);
  diff_src = LayoutPair(src_user, bwd_data_pd.diff_src_desc(), false);
  diff_weights = LayoutPair(wei_user, bwd_weights_pd.diff_weights_desc(), true);
  src_layouts_differ = !(bwd_weights_pd.src_desc() == fwd_pd.src_desc());
  if (src_layouts_differ) {
    src_for_weights = memory(bwd_weights_pd.src_desc(), eng);
    src_to_weights_layout = Reorder(src.lib, src_for_weights);
  } else {
    src_for_weights = src.lib;
  }
  diff_bias = memory(bias_md, eng);
  diff_dst_shared = bwd_data_pd.diff_dst_desc() == bwd_weights_pd.diff_dst_desc();
  weight_grad_oihw.resize(static_cast<std::size_t>(g.out_channels * g.col_rows()));
  std::size_t bytes = src_to_weights_layout.scratchpad_bytes;
  for (const std::size_t b : {fwd_pd.scratchpad_desc().get_size(), bwd_data_pd.scratchpad_desc().get_size(),
                              bwd_weights_pd.scratchpad_desc().get_size()}) {
    bytes = std::max(bytes, b);
  }
  for (const LayoutPair* p : {&src, &weights, &dst, &diff_dst_data, &diff_dst_weights, &weights_for_data, &diff_src,
                              &diff_weights}) {
    bytes = std::max(bytes, p->scratchpad_bytes());
  }
  scratchpad = memory(memory::desc({static_cast<memory::dim>(std::max<std::size_t>(bytes, 1))},
                                   memory::data_type::u8, Tag::a),
                      eng);
}

namespace onednn {

void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* b,
                    std::shared_ptr<OnednnConvState>& state, float* y) {
  try {
    if (!state || !same_geometry(state->g, g)) state = std::make_shared<OnednnConvState>(g);
    OnednnConvState& st = *state;
    auto& s = st.stream;
    const memory& pad = st.scratchpad;
    st.src.to_lib(s, x, true, pad);
    st.weights.to_lib(s, w, false, pad);
    st.bias.set_data_handle(const_cast<float*>(b));
    st.dst.bind_output(y);
    st.fwd.execute(s, {{DNNL_ARG_SRC, st.src.lib},
                       {DNNL_ARG_WEIGHTS, st.weights.lib},
                       {DNNL_ARG_BIAS, st.bias},
                       {DNNL_ARG_DST, st.dst.lib},
                       {DNNL_ARG_SCRATCHPAD, pad}});
    st.dst.to_user(s, pad);
    s.wait();
    st.have_forward = true;
  } catch (const dnnl::error& e) {
    HPCTRAIN_REQUIRE(false, std::string("oneDNN convolution forward failed: ") + e.what());
  }
}

void conv2d_backward(const Conv2dGeometry& g, const float* w, const float* dy,
                     OnednnConvState& st, float* dw, float* db, float* dx) {
  HPCTRAIN_REQUIRE(st.have_forward && same_geometry(st.g, g),
                   "conv2d_backward (oneDNN) without a conv2d_forward of the same geometry");
  try {
    auto& s = st.stream;
    const memory& pad = st.scratchpad;
    st.diff_dst_weights.to_lib(s, dy, false, pad);
    if (st.src_layouts_differ) st.src_to_weights_layout.execute(s, st.src.lib, st.src_for_weights, pad);
    st.bwd_weights.execute(s, {{DNNL_ARG_SRC, st.src_for_weights},
                               {DNNL_ARG_DIFF_DST, st.diff_dst_weights.lib},
                               {DNNL_ARG_DIFF_WEIGHTS, st.diff_weights.lib},
                               {DNNL_ARG_DIFF_BIAS, st.diff_bias},
                               {DNNL_ARG_SCRATCHPAD, pad}});
    if (dx != nullptr) {
      if (!st.diff_dst_shared) st.diff_dst_data.to_lib(s, dy, false, pad);
      const memory& diff_dst = st.diff_dst_shared ? st.diff_dst_weights.lib : st.diff_dst_data.lib;
      st.weights_for_data.to_lib(s, w, false, pad);
      st.diff_src.bind_output(dx);
      st.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst},
                              {DNNL_ARG_WEIGHTS, st.weights_for_data.lib},
                              {DNNL_ARG_DIFF_SRC, st.diff_src.lib},
                              {DNNL_ARG_SCRATCHPAD, pad}});
      st.diff_src.to_user(s, pad);
    }
    // oneDNN overwrites the weight gradient; our contract accumulates: bring it to OIHW in a
    // scratch of the state's (no allocation per step), then add.
    const std::int64_t nw = g.out_channels * g.col_rows();
    const float* gw = static_cast<const float*>(st.diff_weights.lib.get_data_handle());
    if (st.diff_weights.differs) {
      st.diff_weights.bind_output(st.weight_grad_oihw.data());
      st.diff_weights.to_user(s, pad);
      gw = st.weight_grad_oihw.data();
    }
    s.wait();
    for (std::int64_t i = 0; i < nw; ++i) dw[i] += gw[i];
    const auto* gb = static_cast<const float*>(st.diff_bias.get_data_handle());
    for (std::int64_t f = 0; f < g.out_channels; ++f) db[f] += gb[f];
  } catch (const dnnl::error& e) {
    HPCTRAIN_REQUIRE(false, std::string("oneDNN convolution backward failed: ") + e.what());
  }
}

}  // namespace onednn
}  // namespace hpctrain::core
