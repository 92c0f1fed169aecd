#pragma once
// Internal to hpctrain::core: the one oneDNN CPU engine every oneDNN-backed kernel (convolution,
// gemm) creates its primitives on. Built only with HPCTRAIN_ENABLE_ONEDNN.

#include <oneapi/dnnl/dnnl.hpp>

namespace hpctrain::core::onednn {

/// The process's CPU engine (created on first use; oneDNN engines are thread-safe).
dnnl::engine& cpu_engine();

/// A stream on cpu_engine() for the calling thread (streams are not shared between threads).
dnnl::stream& thread_stream();

}  // namespace hpctrain::core::onednn
