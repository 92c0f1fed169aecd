#include "hpctrain/serve/http_service.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/mpi_handle.hpp"
#include "hpctrain/collectives/agreement.hpp"
#include "hpctrain/serve/model_server.hpp"
#include "hpctrain/serve/request_parsing.hpp"
#include "hpctrain/train/preemption.hpp"

namespace hpctrain::serve {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kJson = "application/json";

void validate(const ServeOptions& o) {
  HPCTRAIN_REQUIRE(!o.checkpoint.empty(), "--checkpoint: no checkpoint given");
  HPCTRAIN_REQUIRE(!o.host.empty(), "--host must not be empty");
  HPCTRAIN_REQUIRE(o.port >= 0 && o.port <= 65535, "--port must lie in [0, 65535], got " + std::to_string(o.port));
  HPCTRAIN_REQUIRE(o.max_batch >= 1, "--max-batch must be at least 1, got " + std::to_string(o.max_batch));
  HPCTRAIN_REQUIRE(o.max_wait_us >= 0, "--max-wait-us must be non-negative, got " + std::to_string(o.max_wait_us));
  HPCTRAIN_REQUIRE(o.max_body_bytes >= 1, "--max-body-bytes must be at least 1");
  HPCTRAIN_REQUIRE(o.max_instances >= 1, "--max-instances must be at least 1, got " + std::to_string(o.max_instances));
  HPCTRAIN_REQUIRE(o.reload_every_s >= 0 && std::isfinite(o.reload_every_s), "--reload-every must be a non-negative number of seconds");
  HPCTRAIN_REQUIRE(o.http_threads >= 1, "--http-threads must be at least 1");
}

thread_local Clock::time_point request_start;

/// What GET /v1/model reports about the model first loaded (a reload changes the step).
struct ModelFacts {
  nlohmann::json config;
  std::int64_t input_size = 0, classes = 0;
  InputNormalization normalization;
};

nlohmann::json model_description(const ModelServer& server, const ModelFacts& model, const ServeOptions& o, int ranks) {
  const CheckpointSource s = server.current();
  return {{"model", model.config},
          {"model_step", s.step},
          {"checkpoint", s.step_dir},
          {"checkpoint_checksum", s.parameter_checksum},
          {"input_size", model.input_size},
          {"classes", model.classes},
          {"normalization", {{"mean", model.normalization.mean}, {"std", model.normalization.std}}},
          {"ranks", ranks},
          {"max_batch", o.max_batch},
          {"max_wait_us", o.max_wait_us},
          {"max_instances", o.max_instances}};
}

/// The body, read by the handler itself: httplib's own reading would refuse a body whose
/// Content-Type is form-urlencoded (curl -d's and urllib's default) beyond 8 KiB, and the body
/// is JSON whatever its Content-Type. False: unreadable or too long (res.status says which).
bool read_body(const httplib::ContentReader& content_reader, httplib::Response& res, std::size_t max_bytes,
               std::string& body) {
  const bool ok = content_reader([&](const char* data, std::size_t n) {
    if (body.size() + n > max_bytes) return false;
    body.append(data, n);
    return true;
  });
  if (!ok && res.status < 400) res.status = body.size() >= max_bytes ? 413 : 400;
  return ok;
}

void predict_route(const httplib::ContentReader& content_reader, httplib::Response& res, ModelServer& server,
                   std::int64_t input_size, std::int64_t classes, const ServeOptions& o) {
  RequestBatcher& batcher = server.batcher();
  batcher.announce();
  auto request = std::make_shared<PendingRequest>();
  try {
    std::string body;
    if (!read_body(content_reader, res, o.max_body_bytes, body)) {
      batcher.withdraw();
      return;  // the error handler writes the JSON error
    }
    ParsedInstances parsed = parse_predict_request(body, input_size, o.max_instances);
    request->instances = std::move(parsed.values);
    request->rows = parsed.rows;
  } catch (const BadRequest& e) {
    batcher.withdraw();
    res.status = 400;
    res.set_content(format_error(e.what()), kJson);
    return;
  } catch (...) {
    batcher.withdraw();
    throw;
  }
  std::future<void> done = request->done.get_future();
  batcher.submit(request);
  done.wait();
  if (!request->error.empty()) {
    res.status = 500;
    res.set_content(format_error("forward pass failed: " + request->error), kJson);
    return;
  }
  res.set_content(format_predict_response(request->probabilities.data(), request->predictions.data(), request->rows,
                                          classes, request->model_step),
                  kJson);
}

void add_routes(httplib::Server& svr, ModelServer& server, const ModelFacts& model, const ServeOptions& o,
                ServeMetrics& metrics, int ranks) {
  const std::int64_t input_size = model.input_size, classes = model.classes;
  svr.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    request_start = Clock::now();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.Post("/v1/predict", [&server, input_size, classes, o](const httplib::Request&, httplib::Response& res,
                                                              const httplib::ContentReader& content_reader) {
    predict_route(content_reader, res, server, input_size, classes, o);
  });
  svr.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  svr.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/model", [&server, &model, o, ranks](const httplib::Request&, httplib::Response& res) {
    res.set_content(model_description(server, model, o, ranks).dump(), kJson);
  });
  svr.set_error_handler(httplib::Server::HandlerWithResponse([max_body = o.max_body_bytes](const httplib::Request& req,
                                                                                         httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string why = "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path;
    if (res.status == 413) why = "request body larger than --max-body-bytes (" + std::to_string(max_body) + " bytes)";
    if (res.status == 404) why = "no such endpoint: " + req.method + " " + req.path;
    res.set_content(format_error(why), kJson);
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string why = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      why += std::string(": ") + e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(format_error(why), kJson);
  });
  svr.set_logger([&metrics](const httplib::Request& req, const httplib::Response& res) {
    if (req.path == "/v1/predict") {
      metrics.count_request(res.status, std::chrono::duration<double>(Clock::now() - request_start).count());
    }
  });
}

/// Rank 0: HTTP until SIGTERM, then the orderly stop.
int serve_http(const ServeOptions& o, const CheckpointSource& source, std::unique_ptr<InferenceModel> model,
               MPI_Comm serve_comm, int ranks) {
  const ModelFacts facts{model->config(), model->input_size(), model->classes(), model->normalization()};
  std::vector<std::unique_ptr<BatchRunner>> runners;
  runners.push_back(make_local_runner(std::move(model)));
  for (int r = 1; r < ranks; ++r) runners.push_back(make_remote_runner(serve_comm, r, facts.input_size, facts.classes));
  ServeMetrics metrics;
  ModelServer server(std::move(runners), source, facts.classes, o, metrics);
  httplib::Server svr;
  const int threads = o.http_threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  svr.set_payload_max_length(o.max_body_bytes);
  svr.set_keep_alive_max_count(static_cast<std::size_t>(o.keep_alive_max_requests));
  svr.set_tcp_nodelay(true);
  add_routes(svr, server, facts, o, metrics, ranks);
  const int port = o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  HPCTRAIN_REQUIRE(port > 0, "--host/--port: cannot listen on " + o.host + ":" + std::to_string(o.port) +
                                 " (address in use, or not an address of this host)");
  std::printf("hpctrain: serving %s (step %lld) on http://%s:%d with %d rank%s\n", source.step_dir.c_str(),
              static_cast<long long>(source.step), o.host.c_str(), port, ranks, ranks == 1 ? "" : "s");
  std::fflush(stdout);
  std::atomic<bool> listening_done{false};
  std::thread stop_watch([&] {
    while (!listening_done) {
      if (train::preemption_requested()) {
        std::printf("hpctrain: serve: signal %d: no new connections; finishing the requests in flight\n",
                    train::preemption_signal());
        std::fflush(stdout);
        svr.stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(o.stop_poll_s));
    }
  });
  const bool listened = svr.listen_after_bind();
  listening_done = true;
  stop_watch.join();
  server.shutdown();
  std::printf("hpctrain: serve: stopped%s\n", listened ? "" : " (the listener failed)");
  std::fflush(stdout);
  return listened ? 0 : 1;
}

}  // namespace

int run_http_service(coll::Communicator& comm, MPI_Comm world, const ServeOptions& o) {
  CheckpointSource source;
  coll::rank0_decides(comm, [&] {
    validate(o);
    source = resolve_checkpoint(o.checkpoint);
  });
  source = source_from_json_text(coll::broadcast_string(comm, to_json_text(source)));
  auto model = std::make_unique<InferenceModel>(source);
  train::install_preemption_handlers();  // SIGTERM/SIGUSR1 only set a flag; rank 0 acts on it
  const MpiCommHandle serve_comm = duplicate_comm(world);  // the serve protocol's messages
  comm.barrier();  // every rank has its model before rank 0 listens
  if (comm.rank() != 0) {
    serve_worker_loop(serve_comm.get(), std::move(model));
    return 0;
  }
  return serve_http(o, source, std::move(model), serve_comm.get(), comm.size());
}

}  // namespace hpctrain::serve
