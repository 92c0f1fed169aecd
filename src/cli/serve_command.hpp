#pragma once
// `hpctrain serve`: its flags (the library is src/serve, docs/serving.md).
#include <CLI/CLI.hpp>

#include "hpctrain/serve/serve_options.hpp"

namespace hpctrain::cli {

/// Adds `serve` and its flags (filling `options`) to `app`; returns the subcommand.
CLI::App* add_serve_command(CLI::App& app, hpctrain::serve::ServeOptions& options);

}  // namespace hpctrain::cli
