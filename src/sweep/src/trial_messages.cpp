#include "trial_messages.hpp"

#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"

namespace hpctrain::sweep {

namespace {

constexpr int kCoordinator = 0;

void send_json(MPI_Comm comm, int dest, int tag, const nlohmann::json& message) {
  const std::string bytes = message.dump();
  HPCTRAIN_CHECK_MPI(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_CHAR, dest, tag, comm));
}

nlohmann::json receive_json(MPI_Comm comm, const MPI_Status& probed) {
  int count = 0;
  HPCTRAIN_CHECK_MPI(MPI_Get_count(&probed, MPI_CHAR, &count));
  std::vector<char> bytes(static_cast<std::size_t>(count));
  HPCTRAIN_CHECK_MPI(
      MPI_Recv(bytes.data(), count, MPI_CHAR, probed.MPI_SOURCE, probed.MPI_TAG, comm, MPI_STATUS_IGNORE));
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

}  // namespace

TrialChannel::TrialChannel(MPI_Comm world) : requests_(duplicate_comm(world)), replies_(duplicate_comm(world)) {}

nlohmann::json TrialChannel::ask(MessageTag tag, const nlohmann::json& message, int reply_tag) {
  send_json(requests_.get(), kCoordinator, tag, message);
  if (reply_tag < 0) return nullptr;
  MPI_Status status;
  HPCTRAIN_CHECK_MPI(MPI_Probe(kCoordinator, reply_tag, replies_.get(), &status));
  return receive_json(replies_.get(), status);
}

bool TrialChannel::poll(nlohmann::json* message, int* source, int* tag) {
  int arrived = 0;
  MPI_Status status;
  HPCTRAIN_CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, requests_.get(), &arrived, &status));
  if (!arrived) return false;
  *source = status.MPI_SOURCE;
  *tag = status.MPI_TAG;
  *message = receive_json(requests_.get(), status);
  return true;
}

void TrialChannel::reply(int dest, MessageTag tag, const nlohmann::json& message) {
  send_json(replies_.get(), dest, tag, message);
}

}  // namespace hpctrain::sweep
