#include "hpctrain/ml/model_file.hpp"

#include "hpctrain/collectives/error.hpp"
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
    HPCTRAIN_CHECK_H5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), where + ": flush");
  }
  staged.commit();
}

}  // namespace hpctrain::ml
