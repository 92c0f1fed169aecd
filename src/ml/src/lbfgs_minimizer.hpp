#pragma once
// L-BFGS through libLBFGS (Debian liblbfgs-dev, Spack liblbfgs) for the ml fitters: padding to
// libLBFGS's multiple of 16 variables, exceptions kept out of its C frames, its status codes in
// words. Internal to hpctrain::ml.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hpctrain::ml::detail {

/// Which gradient test ends the search (besides max_iter).
enum class LbfgsStop {
  relative_norm,  ///< ||g|| < tol * max(1, ||x||): libLBFGS's own epsilon test
  max_abs,        ///< max_i |g_i| <= tol: SciPy's L-BFGS-B `pgtol`, scikit-learn's `tol` for lbfgs
};

struct LbfgsOptions {
  std::int64_t max_iter = 300;
  double tol = 1e-6;  ///< the tolerance of `stop`
  LbfgsStop stop = LbfgsStop::relative_norm;
  int history = 10;   ///< correction pairs
  /// After each iteration: (iteration, objective, the measure `stop` tests: ||g|| or max |g_i|).
  std::function<void(std::int64_t, double, double)> on_iteration;
};

struct LbfgsResult {
  std::vector<double> x;
  double objective = 0.0;  ///< f(x), evaluated once more at the returned x
  std::int64_t iterations = 0, evaluations = 0;
  bool converged = false;  ///< stopped by the gradient test of LbfgsOptions::stop
  std::string status;      ///< which rule stopped it, in words
};

/// f(x) and its gradient g (both `vars` long). Collective in the fitters: every rank's libLBFGS
/// calls it in the same sequence, because every rank sees the same bits.
using Objective = std::function<double(const double* x, double* g)>;

/// Minimises f from x = 0. `who` ("logreg", "linreg") prefixes errors. A line search that can
/// make no progress at f's precision ends the search like the iteration cap (not an error).
LbfgsResult minimize_lbfgs(std::int64_t vars, const Objective& f, const LbfgsOptions& options, const char* who);

}  // namespace hpctrain::ml::detail
