#pragma once
// Internal to hpctrain::core: element-wise kernels through oneDNN's eltwise primitive (CPU,
// float, host memory), behind core::gelu_forward / gelu_backward. Built only with
// HPCTRAIN_ENABLE_ONEDNN; elementwise.cpp dispatches to it.

#include <cstdint>

namespace hpctrain::core::onednn {

/// y = GELU(x), tanh form (oneDNN's eltwise_gelu_tanh), n elements.
void gelu_tanh_forward(const float* x, float* y, std::int64_t n);
/// dx = dy * GELU'(x), tanh form, n elements (x is the forward input).
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::int64_t n);

}  // namespace hpctrain::core::onednn
