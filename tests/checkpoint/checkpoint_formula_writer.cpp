// Writes a checkpoint whose values follow a formula a reader can recompute on its own
// (check_checkpoint_h5py.py): tensor t, element i holds t * 1000 + i + 0.25 (exact in float32
// for the sizes used). Usage: mpirun -n P checkpoint_formula_writer DIR STEP
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/io/checkpoint.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int status = 0;
  try {
    if (argc != 3) throw std::runtime_error("usage: checkpoint_formula_writer DIR STEP");
    hpctrain::coll::Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
    // Names and shapes: the same list as in check_checkpoint_h5py.py.
    const std::vector<std::pair<std::string, std::vector<std::int64_t>>> spec = {
        {"params/0.dense.weight", {5, 7}}, {"params/0.dense.bias", {2}},     {"params/1.empty", {0, 3}},
        {"params/2.conv.weight", {4, 1, 3, 3}}, {"params/2.conv.bias", {1}}, {"optimizer/momentum/0.dense.weight", {5, 7}},
    };
    std::vector<std::vector<float>> values;
    std::vector<hpctrain::io::CheckpointTensor> tensors;
    for (std::size_t t = 0; t < spec.size(); ++t) {
      std::int64_t n = 1;
      for (auto d : spec[t].second) n *= d;
      std::vector<float> v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(t * 1000 + i) + 0.25f;
      values.push_back(std::move(v));
    }
    for (std::size_t t = 0; t < spec.size(); ++t) tensors.push_back({spec[t].first, spec[t].second, values[t].data()});
    const auto r = hpctrain::io::write_checkpoint(comm, argv[1], std::atoll(argv[2]), {{"written_by", "formula"}}, tensors, 1);
    if (comm.rank() == 0) std::printf("wrote %s (%llu bytes)\n", r.path.c_str(), static_cast<unsigned long long>(r.bytes));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_formula_writer: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
