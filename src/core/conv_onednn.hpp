#pragma once
// Internal to hpctrain::core: the oneDNN implementation behind conv2d_forward/backward (float,
// host memory). Built only with HPCTRAIN_ENABLE_ONEDNN; conv.cpp dispatches to it.

#include "hpctrain/core/conv.hpp"

#include <memory>

namespace hpctrain::core::onednn {

/// y = conv(x, w) + b, NCHW / OIHW / [F] in, NCHW out. Creates (or reuses) the primitives for
/// g in `state` and keeps x in oneDNN's layout for the backward pass.
void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* b,
                    std::shared_ptr<OnednnConvState>& state, float* y);

/// dw += dL/dw, db += dL/db, dx = dL/dx when dx is not null. Needs the conv2d_forward of the
/// same input and geometry on `state`.
void conv2d_backward(const Conv2dGeometry& g, const float* w, const float* dy,
                     OnednnConvState& state, float* dw, float* db, float* dx);

}  // namespace hpctrain::core::onednn
