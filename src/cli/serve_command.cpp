#include "serve_command.hpp"

namespace hpctrain::cli {

CLI::App* add_serve_command(CLI::App& app, hpctrain::serve::ServeOptions& o) {
  CLI::App* serve = app.add_subcommand(
      "serve", "HTTP model server from a checkpoint: rank 0 takes requests, batches them dynamically and hands whole "
               "batches to every rank (docs/serving.md). SIGTERM to the ranks: answer the requests in flight, exit 0 "
               "(a SIGTERM to mpirun makes Open MPI kill the ranks soon after)");
  serve->add_option("--checkpoint", o.checkpoint,
                    "A checkpoint directory (its newest valid step) or one step-<N> directory; a damaged checkpoint "
                    "is refused by name")
      ->required();
  serve->add_option("--host", o.host, "Address to listen on (the server has no authentication: loopback by default)")
      ->capture_default_str();
  serve->add_option("--port", o.port, "TCP port (0: any free port, printed on the 'serving on' line)")->capture_default_str();
  serve->add_option("--max-batch", o.max_batch, "Instances per forward pass at most (a larger request runs alone)")
      ->capture_default_str();
  serve->add_option("--max-wait-us", o.max_wait_us,
                    "How long a batch that is not full waits for requests still being read (an idle server adds no "
                    "wait)")
      ->capture_default_str();
  serve->add_option("--max-body-bytes", o.max_body_bytes, "Largest request body; larger: 413")->capture_default_str();
  serve->add_option("--max-instances", o.max_instances, "Most instances per request; more: 400")->capture_default_str();
  serve->add_option("--reload-every", o.reload_every_s,
                    "With a checkpoint directory: look for a newer valid step every S seconds and serve it without "
                    "dropping requests (0: never)")
      ->capture_default_str();
  serve->add_option("--http-threads", o.http_threads,
                    "HTTP threads on rank 0 (one per open keep-alive connection: bounds the connections served at once)")
      ->capture_default_str();
  const CLI::Validator non_negative(
      [](std::string& value) { return value.rfind('-', 0) == 0 ? "must not be negative, got " + value : std::string(); },
      "NON-NEGATIVE");
  for (const char* name : {"--port", "--max-batch", "--max-wait-us", "--max-body-bytes", "--max-instances",
                           "--reload-every", "--http-threads"}) {
    serve->get_option(name)->check(non_negative);
  }
  return serve;
}

}  // namespace hpctrain::cli
