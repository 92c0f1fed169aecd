#include "hpctrain/ml/model_file.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/h5.hpp"

namespace hpctrain::ml {

void write_model_file(const std::string& path, const ModelFileContents& contents) {
  io::StagedFile staged(path, "write model");
  const std::string where = "write model '" + staged.path() + "'";
  {
    io::H5Lock lock;
    io::H5File file(HPCTRAIN_CHECK_H5(H5Fcreate(staged.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                      where + ": create file"));
    for (const auto& a : contents.arrays) {
      hsize_t n = 1;
      for (auto d : a.dims) n *= d;
      HPCTRAIN_REQUIRE(n == a.values.size(), where + ": " + a.name + " has the wrong number of values");
      io::H5Dataspace space(HPCTRAIN_CHECK_H5(H5Screate_simple(static_cast<int>(a.dims.size()), a.dims.data(), nullptr),
                                              where));
      io::H5Dataset dset(HPCTRAIN_CHECK_H5(H5Dcreate2(file.get(), a.name.c_str(), H5T_IEEE_F64LE, space.get(),
                                                      H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                           where + ": create " + a.name));
      HPCTRAIN_CHECK_H5(H5Dwrite(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.values.data()),
                        where + ": write " + a.name);
    }
    const hid_t root = file.get();
    io::h5_write_attribute(root, "format", std::string("hpctrain-model"));
    io::h5_write_attribute(root, "format_version", std::int64_t{1});
    io::h5_write_attribute(root, "model", contents.model);
    for (const auto& [name, value] : contents.real_attributes) io::h5_write_attribute(root, name, value);
    for (const auto& [name, value] : contents.int_attributes) io::h5_write_attribute(root, name, value);
    for (const auto& [name, value] : contents.string_attributes) io::h5_write_attribute(root, name, value);
    HPCTRAIN_CHECK_H5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), where + ": flush");
  }
  staged.commit();
}

namespace {

/// The datasets a model file may hold (model_file.hpp's layout).
constexpr const char* kArrayNames[] = {"/centroids", "/coefficients", "/intercept", "/standardize_mean",
                                       "/standardize_std"};
/// The numeric attributes read back (`intercept`: linreg files written before /intercept).
constexpr const char* kRealAttributeNames[] = {"intercept", "objective", "inertia", "l2"};

ModelArray read_array(hid_t file, const std::string& name, const std::string& where) {
  io::H5Dataset dset(HPCTRAIN_CHECK_H5(H5Dopen2(file, name.c_str(), H5P_DEFAULT), where + ": open " + name));
  io::H5Dataspace space(HPCTRAIN_CHECK_H5(H5Dget_space(dset.get()), where + ": " + name));
  ModelArray a;
  a.name = name;
  a.dims = io::h5_dims(space.get());
  hsize_t n = 1;
  for (auto d : a.dims) n *= d;
  a.values.resize(n);
  if (n > 0) {
    HPCTRAIN_CHECK_H5(H5Dread(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.values.data()),
                      where + ": read " + name);
  }
  return a;
}

}  // namespace

double ModelFileContents::real_attribute(const std::string& name) const {
  for (const auto& [key, value] : real_attributes) {
    if (key == name) return value;
  }
  HPCTRAIN_FAIL(fmt::format("model '{}': attribute '{}' is missing", model, name));
}

const ModelArray& model_array(const ModelFileContents& contents, const std::string& name, const std::string& path) {
  for (const auto& a : contents.arrays) {
    if (a.name == name) return a;
  }
  HPCTRAIN_FAIL(fmt::format("model file '{}' ({}): dataset {} is missing", path, contents.model, name));
}

ModelFileContents read_model_file(const std::string& path) {
  const std::string where = fmt::format("model file '{}'", path);
  std::error_code ec;
  HPCTRAIN_REQUIRE(std::filesystem::is_regular_file(path, ec), where + ": no such file");
  io::H5Lock lock;
  io::h5_quiet_errors();
  HPCTRAIN_REQUIRE(H5Fis_hdf5(path.c_str()) > 0, where + ": not an HDF5 file (no HDF5 signature)");
  io::H5File file(HPCTRAIN_CHECK_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), where + ": open"));
  const hid_t root = file.get();
  HPCTRAIN_REQUIRE(io::h5_has_attribute(root, "format") &&
                       io::h5_read_string_attribute(root, "format", where) == "hpctrain-model",
                   where + ": not an hpctrain model file (its `format` attribute is not \"hpctrain-model\")");
  ModelFileContents c;
  c.model = io::h5_read_string_attribute(root, "model", where);
  for (const char* name : kArrayNames) {
    if (io::h5_exists(root, name)) c.arrays.push_back(read_array(root, name, where));
  }
  for (const char* name : kRealAttributeNames) {
    if (io::h5_has_attribute(root, name)) c.real_attributes.emplace_back(name, io::h5_read_double_attribute(root, name, where));
  }
  return c;
}

}  // namespace hpctrain::ml
