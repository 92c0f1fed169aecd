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
  bool met_max_abs = false;  // LbfgsStop::max_abs ended the search (progress returned 1)
  std::exception_ptr error;  // an exception must not cross libLBFGS's C frames
};

double max_abs(const lbfgsfloatval_t* g, std::int64_t vars) {
  double m = 0.0;
  for (std::int64_t i = 0; i < vars; ++i) m = std::max(m, std::abs(g[i]));
  return m;
}

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

// Called by libLBFGS after each iteration; a non-zero return ends the search with that code.
int progress(void* instance, const lbfgsfloatval_t*, const lbfgsfloatval_t* g, lbfgsfloatval_t fx, lbfgsfloatval_t,
             lbfgsfloatval_t gnorm, lbfgsfloatval_t, int, int k, int) {
  auto& s = *static_cast<Search*>(instance);
  if (s.error) return 1;
  s.iterations = k;
  const bool by_max_abs = s.options->stop == LbfgsStop::max_abs;
  const double measure = by_max_abs ? max_abs(g, s.vars) : gnorm;
  if (s.options->on_iteration) {
    try {
      s.options->on_iteration(k, fx, measure);
    } catch (...) {
      s.error = std::current_exception();
      return 1;
    }
  }
  s.met_max_abs = by_max_abs && measure <= s.options->tol;
  return s.met_max_abs ? 1 : 0;
}

std::string describe_status(int code, bool met_max_abs) {
  if (met_max_abs) return "converged: max |g_i| <= tol";
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
  Search s{&f, &options, vars, 0, 0, false, nullptr};
  // libLBFGS built with SSE wants a multiple of 16 variables; the padding has gradient 0.
  const int n = static_cast<int>((vars + 15) / 16 * 16);
  std::unique_ptr<lbfgsfloatval_t, decltype(&lbfgs_free)> x(lbfgs_malloc(n), &lbfgs_free);
  HPCTRAIN_REQUIRE(x != nullptr, fmt::format("{}: cannot allocate {} variables", who, n));
  std::fill(x.get(), x.get() + n, 0.0);
  lbfgs_parameter_t param;
  lbfgs_parameter_init(&param);
  param.m = options.history;
  // libLBFGS's own test is off under max_abs (epsilon 0 stops only at a zero gradient).
  param.epsilon = options.stop == LbfgsStop::relative_norm ? options.tol : 0.0;
  param.max_iterations = static_cast<int>(options.max_iter);
  lbfgsfloatval_t fx = 0.0;
  const int code = lbfgs(n, x.get(), &fx, evaluate, progress, &s, &param);
  if (s.error) std::rethrow_exception(s.error);
  HPCTRAIN_REQUIRE(code >= 0 || code == LBFGSERR_MAXIMUMITERATION || code == LBFGSERR_ROUNDING_ERROR ||
                       code == LBFGSERR_MINIMUMSTEP || code == LBFGSERR_MAXIMUMLINESEARCH,
                   fmt::format("{}: L-BFGS failed ({})", who, describe_status(code, false)));
  LbfgsResult r;
  r.x.assign(x.get(), x.get() + vars);
  r.converged = code == LBFGS_SUCCESS || code == LBFGS_ALREADY_MINIMIZED || s.met_max_abs;
  r.status = describe_status(code, s.met_max_abs);
  r.iterations = s.iterations;
  // The objective of the returned point, defined the same way whatever stopped the search.
  std::vector<double> g(static_cast<std::size_t>(vars));
  r.objective = f(r.x.data(), g.data());
  r.evaluations = s.evaluations + 1;
  return r;
}

}  // namespace hpctrain::ml::detail
