#include "hpctrain/serve/prediction_file.hpp"

#include <exception>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/agreement.hpp"

namespace hpctrain::serve {

namespace {

io::H5Dataset create_dataset(hid_t file, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                             const std::string& where) {
  io::H5Dataspace space(HPCTRAIN_CHECK_H5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), where));
  return io::H5Dataset(HPCTRAIN_CHECK_H5(
      H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), where + ": create " + name));
}

/// Collective write of rows [first, first + rows) of a 1-D or 2-D dataset with `width` columns.
void write_rows(hid_t dataset, hid_t type, std::int64_t first, std::int64_t rows, std::int64_t width,
                const void* data, const std::string& where) {
  io::H5Dataspace file_space(HPCTRAIN_CHECK_H5(H5Dget_space(dataset), where));
  const int rank = H5Sget_simple_extent_ndims(file_space.get());
  std::vector<hsize_t> start{static_cast<hsize_t>(first), 0}, count{static_cast<hsize_t>(rows), static_cast<hsize_t>(width)};
  start.resize(static_cast<std::size_t>(rank));
  count.resize(static_cast<std::size_t>(rank));
  io::H5Dataspace mem_space(HPCTRAIN_CHECK_H5(H5Screate_simple(rank, count.data(), nullptr), where));
  if (rows == 0) {
    HPCTRAIN_CHECK_H5(H5Sselect_none(file_space.get()), where);
    HPCTRAIN_CHECK_H5(H5Sselect_none(mem_space.get()), where);
  } else {
    HPCTRAIN_CHECK_H5(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                      where + ": select rows");
  }
  io::H5PropList xfer(HPCTRAIN_CHECK_H5(H5Pcreate(H5P_DATASET_XFER), where));
  HPCTRAIN_CHECK_H5(H5Pset_dxpl_mpio(xfer.get(), H5FD_MPIO_COLLECTIVE), where);
  HPCTRAIN_CHECK_H5(H5Dwrite(dataset, type, mem_space.get(), file_space.get(), xfer.get(), data), where + ": write");
}

}  // namespace

PredictionFile::PredictionFile(coll::Communicator& comm, MPI_Comm mpi_comm, const std::string& path, std::int64_t rows,
                               std::int64_t classes)
    : comm_(comm), path_(path), rows_(rows), classes_(classes), uncaught_at_start_(std::uncaught_exceptions()) {
  std::string temp;
  coll::rank0_decides(comm, [&] {
    staged_ = std::make_unique<io::StagedFile>(path, "--out");
    temp = staged_->path();
  });
  temp_path_ = coll::broadcast_string(comm, temp);
  const std::string where = "--out '" + path_ + "' (temporary '" + temp_path_ + "')";
  io::H5Lock lock;
  io::H5PropList fapl(HPCTRAIN_CHECK_H5(H5Pcreate(H5P_FILE_ACCESS), where));
  HPCTRAIN_CHECK_H5(H5Pset_fapl_mpio(fapl.get(), mpi_comm, MPI_INFO_NULL), where);
  file_ = io::H5File(HPCTRAIN_CHECK_H5(H5Fcreate(temp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), where + ": create"));
  predictions_ = create_dataset(file_.get(), "/predictions", H5T_STD_I32LE, {static_cast<hsize_t>(rows)}, where);
  probabilities_ = create_dataset(file_.get(), "/probabilities", H5T_IEEE_F32LE,
                                  {static_cast<hsize_t>(rows), static_cast<hsize_t>(classes)}, where);
}

PredictionFile::~PredictionFile() {
  // Unwinding from an error on this rank while the others may sit in a collective write: a
  // collective close here could wait for them forever, so the handles are dropped unclosed
  // (the job is about to be aborted). staged_ still removes rank 0's temporary file.
  if (std::uncaught_exceptions() > uncaught_at_start_) {
    (void)predictions_.release();
    (void)probabilities_.release();
    (void)file_.release();
  }
}

void PredictionFile::write(std::int64_t first_row, std::int64_t rows, const std::int32_t* predictions,
                           const float* probabilities) {
  const std::string where = "--out '" + path_ + "'";
  HPCTRAIN_REQUIRE(first_row >= 0 && rows >= 0 && first_row + rows <= rows_, where + ": rows out of range");
  io::H5Lock lock;
  write_rows(predictions_.get(), H5T_NATIVE_INT32, first_row, rows, 1, predictions, where + " /predictions");
  write_rows(probabilities_.get(), H5T_NATIVE_FLOAT, first_row, rows, classes_, probabilities, where + " /probabilities");
}

void PredictionFile::commit(const PredictionProvenance& p) {
  {
    io::H5Lock lock;
    predictions_.reset();
    probabilities_.reset();
    HPCTRAIN_CHECK_H5(H5Fclose(file_.release()), "--out '" + path_ + "': close");
  }
  comm_.barrier();  // every rank's data is in the file before rank 0 reopens it
  coll::rank0_decides(comm_, [&] {
    const std::string where = "--out '" + path_ + "'";
    {
      io::H5Lock lock;
      io::H5File f(HPCTRAIN_CHECK_H5(H5Fopen(temp_path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), where + ": reopen"));
      io::h5_write_attribute(f.get(), "format", std::string("hpctrain-predictions"));
      io::h5_write_attribute(f.get(), "format_version", std::int64_t{1});
      io::h5_write_attribute(f.get(), "checkpoint", p.checkpoint);
      io::h5_write_attribute(f.get(), "checkpoint_step", p.checkpoint_step);
      io::h5_write_attribute(f.get(), "checkpoint_checksum", p.checkpoint_checksum);
      io::h5_write_attribute(f.get(), "model", p.model);
      io::h5_write_attribute(f.get(), "data", p.data);
      io::h5_write_attribute(f.get(), "normalize_mean", p.normalize_mean);
      io::h5_write_attribute(f.get(), "normalize_std", p.normalize_std);
      io::h5_write_attribute(f.get(), "batch", p.batch);
      HPCTRAIN_CHECK_H5(H5Fclose(f.release()), where + ": close");
    }
    staged_->commit();
  });
}

}  // namespace hpctrain::serve
