// libLBFGS glue; see lbfgs_minimizer.hpp.
#include "lbfgs_minimizer.hpp"

#include <lbfgs.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"

namespace hpctrain::ml::detail {

namespace {

struct Search {
  const Objective* f;
  const LbfgsOptions* options;
  std::int64_t vars;
  std::int64_t evaluations = 0, iterations = 0;
  std::exception_ptr error;  // an exception must not cross libLBFGS's C frames
};

lbfgsfloatval_t evaluate(void* instance, const lbfgsfloatval_t* x, lbfgsfloatval_t* g, int n, lbfgsfloatval_t) {
  auto& s = *static_cast<Search*>(instance);
  try {
    const double fx = (*s.f)(x, g);
    ++s.evaluations;
    std::fill(g + s.vars, g + n, 0.0);  // the padding stays at 0
    return fx;
  } catch (...) {
    s.error = std::current_exception();
    std::fill(g, g + n, 0.0);
    return std::nan("");
  }
}

int progress(void* instance, const lbfgsfloatval_t*, const lbfgsfloatval_t*, lbfgsfloatval_t fx, lbfgsfloatval_t,
             lbfgsfloatval_t gnorm, lbfgsfloatval_t, int, int k, int) {
  auto& s = *static_cast<Search*>(instance);
  if (s.error) return 1;
  s.iterations = k;
  if (!s.options->on_iteration) return 0;
  try {
    s.options->on_iteration(k, fx, gnorm);
  } catch (...) {
    s.error = std::current_exception();
    return 1;
  }
  return 0;
}

std::string describe_status(int code) {
  switch (code) {
    case LBFGS_SUCCESS: return "converged: ||g|| < tol * max(1, ||x||)";
    case LBFGS_ALREADY_MINIMIZED: return "converged: the initial point is already a minimiser";
    case LBFGSERR_MAXIMUMITERATION: return "stopped at --max-iter";
    case LBFGSERR_ROUNDING_ERROR: return "stopped: the line search can make no progress at f's precision";
    case LBFGSERR_MINIMUMSTEP: return "stopped: the line search step fell below its minimum";
    case LBFGSERR_MAXIMUMLINESEARCH: return "stopped: the line search ran out of evaluations";
    default: return fmt::format("stopped: libLBFGS status {}", code);
  }
}

}  // namespace

LbfgsResult minimize_lbfgs(std::int64_t vars, const Objective& f, const LbfgsOptions& options, const char* who) {
  Search s{&f, &options, vars, 0, 0, nullptr};
  // libLBFGS built with SSE wants a multiple of 16 variables; the padding has gradient 0.
  const int n = static_cast<int>((vars + 15) / 16 * 16);
  std::unique_ptr<lbfgsfloatval_t, decltype(&lbfgs_free)> x(lbfgs_malloc(n), &lbfgs_free);
  HPCTRAIN_REQUIRE(x != nullptr, fmt::format("{}: cannot allocate {} variables", who, n));
  std::fill(x.get(), x.get() + n, 0.0);
  lbfgs_parameter_t param;
  lbfgs_parameter_init(&param);
  param.m = options.history;
  param.epsilon = options.tol;
  param.max_iterations = static_cast<int>(options.max_iter);
  lbfgsfloatval_t fx = 0.0;
  const int code = lbfgs(n, x.get(), &fx, evaluate, progress, &s, &param);
  if (s.error) std::rethrow_exception(s.error);
  HPCTRAIN_REQUIRE(code >= 0 || code == LBFGSERR_MAXIMUMITERATION || code == LBFGSERR_ROUNDING_ERROR ||
                       code == LBFGSERR_MINIMUMSTEP || code == LBFGSERR_MAXIMUMLINESEARCH,
                   fmt::format("{}: L-BFGS failed ({})", who, describe_status(code)));
  LbfgsResult r;
  r.x.assign(x.get(), x.get() + vars);
  r.converged = code == LBFGS_SUCCESS || code == LBFGS_ALREADY_MINIMIZED;
  r.status = describe_status(code);
  r.iterations = s.iterations;
  // The objective of the returned point, defined the same way whatever stopped the search.
  std::vector<double> g(static_cast<std::size_t>(vars));
  r.objective = f(r.x.data(), g.data());
  r.evaluations = s.evaluations + 1;
  return r;
}

}  // namespace hpctrain::ml::detail
