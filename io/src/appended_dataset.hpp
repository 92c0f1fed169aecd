#pragma once
// Internal to hpctrain::io: an extendible, chunked HDF5 dataset N x (sample dims), appended to
// block by block, for the writers that stream (import-csv, data synth). Needs H5Lock held.

#include <string>
#include <utility>
#include <vector>

#include "hpctrain/io/h5.hpp"

namespace hpctrain::io {

class AppendedDataset {
 public:
  /// `sample_dims` empty: a 1-D dataset of N values.
  AppendedDataset(hid_t file, const char* name, hid_t type, std::vector<hsize_t> sample_dims, hsize_t chunk_rows,
                  std::string where)
      : dims_(std::move(sample_dims)), where_(std::move(where) + " " + name) {
    dims_.insert(dims_.begin(), 0);
    std::vector<hsize_t> maxdims(dims_), chunk(dims_);
    maxdims[0] = H5S_UNLIMITED;
    chunk[0] = chunk_rows;
    const int rank = static_cast<int>(dims_.size());
    H5Dataspace space(HPCTRAIN_CHECK_H5(H5Screate_simple(rank, dims_.data(), maxdims.data()), where_));
    H5PropList dcpl(HPCTRAIN_CHECK_H5(H5Pcreate(H5P_DATASET_CREATE), where_));
    HPCTRAIN_CHECK_H5(H5Pset_chunk(dcpl.get(), rank, chunk.data()), where_);
    // No modification times in the object header: the same contents give the same file bytes.
    HPCTRAIN_CHECK_H5(H5Pset_obj_track_times(dcpl.get(), false), where_);
    dset_ = H5Dataset(HPCTRAIN_CHECK_H5(H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                        where_ + ": create"));
  }
  /// Appends `rows` samples (rows x the sample dims values of `mem_type`).
  void append(hid_t mem_type, const void* data, hsize_t rows) {
    if (rows == 0) return;
    const int rank = static_cast<int>(dims_.size());
    std::vector<hsize_t> extent(dims_), start(dims_.size(), 0), count(dims_);
    extent[0] = dims_[0] + rows;
    HPCTRAIN_CHECK_H5(H5Dset_extent(dset_.get(), extent.data()), where_ + ": extend");
    H5Dataspace fspace(HPCTRAIN_CHECK_H5(H5Dget_space(dset_.get()), where_));
    start[0] = dims_[0];
    count[0] = rows;
    HPCTRAIN_CHECK_H5(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                      where_);
    H5Dataspace mspace(HPCTRAIN_CHECK_H5(H5Screate_simple(rank, count.data(), nullptr), where_));
    HPCTRAIN_CHECK_H5(H5Dwrite(dset_.get(), mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, data), where_ + ": write");
    dims_[0] += rows;
  }
  hid_t get() const noexcept { return dset_.get(); }

 private:
  std::vector<hsize_t> dims_;  ///< current extent: N, then the sample dims
  std::string where_;
  H5Dataset dset_;
};

}  // namespace hpctrain::io
