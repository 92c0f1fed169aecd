#include "hpctrain/serve/rank_workers.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <thread>

#include "hpctrain/base/error.hpp"
#include "hpctrain/serve/serve_options.hpp"

namespace hpctrain::serve {

namespace {

constexpr int kHeader = 701, kPayload = 702, kResult = 703;
enum class Kind : std::int64_t { batch = 1, reload = 2, stop = 3 };

void check_mpi(int rc, const char* what) { HPCTRAIN_REQUIRE(rc == MPI_SUCCESS, std::string("serve: MPI ") + what + " failed"); }

/// MPI_Recv without holding a core while nothing comes (serve_options.hpp: kMessagePollPause).
void receive(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, const char* what) {
  MPI_Request request;
  check_mpi(MPI_Irecv(buf, count, type, source, tag, comm, &request), what);
  int done = 0;
  for (int spin = 0; spin < kMessageSpinTests && !done; ++spin) check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
  while (!done) {
    std::this_thread::sleep_for(kMessagePollPause);
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
  }
}

class LocalRunner final : public BatchRunner {
 public:
  explicit LocalRunner(std::unique_ptr<InferenceModel> model) : model_(std::move(model)) {}
  std::int64_t run(const float* x, std::int64_t rows, float* p, std::int32_t* y) override {
    model_->predict_raw(x, rows, p, y);
    return model_->source().step;
  }
  void reload(const CheckpointSource& source) override { model_ = std::make_unique<InferenceModel>(source); }
  void stop() override {}

 private:
  std::unique_ptr<InferenceModel> model_;
};

class RemoteRunner final : public BatchRunner {
 public:
  RemoteRunner(MPI_Comm comm, int rank, std::int64_t input_size, std::int64_t classes)
      : comm_(comm), rank_(rank), input_size_(input_size), classes_(classes) {}
  ~RemoteRunner() override {
    try {
      stop();
    } catch (...) {
      // the job is ending anyway
    }
  }

  std::int64_t run(const float* x, std::int64_t rows, float* p, std::int32_t* y) override {
    send_header(Kind::batch, rows);
    check_mpi(MPI_Send(x, static_cast<int>(rows * input_size_), MPI_FLOAT, rank_, kPayload, comm_), "send batch");
    receive(p, static_cast<int>(rows * classes_), MPI_FLOAT, rank_, kResult, comm_, "receive probabilities");
    receive(y, static_cast<int>(rows), MPI_INT32_T, rank_, kResult, comm_, "receive predictions");
    std::int64_t step = 0;
    receive(&step, 1, MPI_INT64_T, rank_, kResult, comm_, "receive step");
    return step;
  }

  void reload(const CheckpointSource& source) override {
    const std::string text = to_json_text(source);
    send_header(Kind::reload, static_cast<std::int64_t>(text.size()));
    check_mpi(MPI_Send(text.data(), static_cast<int>(text.size()), MPI_CHAR, rank_, kPayload, comm_), "send reload");
    std::int64_t reply[2] = {0, 0};
    receive(reply, 2, MPI_INT64_T, rank_, kResult, comm_, "receive reload status");
    if (reply[0] == 0) {
      MPI_Status status;
      check_mpi(MPI_Probe(rank_, kResult, comm_, &status), "probe reload error");
      int n = 0;
      MPI_Get_count(&status, MPI_CHAR, &n);
      std::string why(static_cast<std::size_t>(n), '\0');
      receive(why.data(), n, MPI_CHAR, rank_, kResult, comm_, "receive reload error");
      HPCTRAIN_FAIL("rank " + std::to_string(rank_) + " could not reload: " + why);
    }
  }

  void stop() override {
    if (stopped_) return;
    stopped_ = true;
    send_header(Kind::stop, 0);
  }

 private:
  void send_header(Kind kind, std::int64_t n) {
    const std::int64_t header[2] = {static_cast<std::int64_t>(kind), n};
    check_mpi(MPI_Send(header, 2, MPI_INT64_T, rank_, kHeader, comm_), "send header");
  }

  MPI_Comm comm_;
  int rank_;
  std::int64_t input_size_, classes_;
  bool stopped_ = false;
};

}  // namespace

std::unique_ptr<BatchRunner> make_local_runner(std::unique_ptr<InferenceModel> model) {
  return std::make_unique<LocalRunner>(std::move(model));
}

std::unique_ptr<BatchRunner> make_remote_runner(MPI_Comm comm, int rank, std::int64_t input_size, std::int64_t classes) {
  return std::make_unique<RemoteRunner>(comm, rank, input_size, classes);
}

void serve_worker_loop(MPI_Comm comm, std::unique_ptr<InferenceModel> model) {
  std::vector<float> x, p;
  std::vector<std::int32_t> y;
  for (;;) {
    std::int64_t header[2] = {0, 0};
    receive(header, 2, MPI_INT64_T, 0, kHeader, comm, "receive header");
    const auto kind = static_cast<Kind>(header[0]);
    const std::int64_t n = header[1];
    if (kind == Kind::stop) return;
    if (kind == Kind::reload) {
      std::string text(static_cast<std::size_t>(n), '\0');
      receive(text.data(), static_cast<int>(n), MPI_CHAR, 0, kPayload, comm, "receive reload");
      std::string why;
      try {
        model = std::make_unique<InferenceModel>(source_from_json_text(text));
      } catch (const std::exception& e) {
        why = e.what();
      }
      const std::int64_t reply[2] = {why.empty() ? 1 : 0, model->source().step};
      check_mpi(MPI_Send(reply, 2, MPI_INT64_T, 0, kResult, comm), "send reload status");
      if (!why.empty()) check_mpi(MPI_Send(why.data(), static_cast<int>(why.size()), MPI_CHAR, 0, kResult, comm), "send reload error");
      continue;
    }
    x.resize(static_cast<std::size_t>(n * model->input_size()));
    p.resize(static_cast<std::size_t>(n * model->classes()));
    y.resize(static_cast<std::size_t>(n));
    receive(x.data(), static_cast<int>(x.size()), MPI_FLOAT, 0, kPayload, comm, "receive batch");
    model->predict_raw(x.data(), n, p.data(), y.data());
    const std::int64_t step = model->source().step;
    check_mpi(MPI_Send(p.data(), static_cast<int>(p.size()), MPI_FLOAT, 0, kResult, comm), "send probabilities");
    check_mpi(MPI_Send(y.data(), static_cast<int>(n), MPI_INT32_T, 0, kResult, comm), "send predictions");
    check_mpi(MPI_Send(&step, 1, MPI_INT64_T, 0, kResult, comm), "send step");
  }
}

std::string to_json_text(const CheckpointSource& s) {
  return nlohmann::json{{"dir", s.step_dir}, {"step", s.step}, {"sum", s.parameter_checksum}}.dump();
}

CheckpointSource source_from_json_text(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  return CheckpointSource{j.at("dir").get<std::string>(), j.at("step").get<std::int64_t>(), j.at("sum").get<std::string>()};
}

}  // namespace hpctrain::serve
