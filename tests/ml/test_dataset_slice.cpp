// DatasetSlice keeps a uint8 file's samples as stored and widens them on demand: the widened
// rows must be, bit for bit, the f64 rows the fitters used to hold (the file's values read by
// HDF5 as doubles, times `scale`, then standardised in place), for any block of rows; float32
// and float64 files still come as f64 rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/h5.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/feature_scaling.hpp"
#include "hpctrain/ml/kmeans.hpp"
#include "hpctrain/ml/sample_partition.hpp"

namespace hpctrain::ml {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kSamples = 300;  // several 64-row blocks and a partial one
constexpr std::int64_t kFeatures = 37;  // not a multiple of the 8 lanes of any loop

/// A file of this process and test: ctest runs the instances of one parameterised test at once
/// (CI failed two of them when they shared one "u8-std.h5").
std::string temp_path(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = std::string(t->test_suite_name()) + "." + t->name();
  for (char& c : test) {
    if (c == '/') c = '-';
  }
  return (fs::temp_directory_path() /
          ("hpctrain-test-dataset-slice-" + std::to_string(::getpid()) + "-" + test + "-" + name))
      .string();
}

/// /samples (kSamples x kFeatures) of HDF5 type `file_type` from `values` in `mem_type`, with
/// the `scale` attribute unless it is NaN.
void write_samples(const std::string& path, hid_t file_type, hid_t mem_type, const void* values, double scale) {
  io::H5Lock lock;
  io::H5File file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_GE(file.get(), 0);
  const hsize_t dims[2] = {static_cast<hsize_t>(kSamples), static_cast<hsize_t>(kFeatures)};
  io::H5Dataspace space(H5Screate_simple(2, dims, nullptr));
  io::H5Dataset dset(H5Dcreate2(file.get(), "/samples", file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_GE(dset.get(), 0);
  ASSERT_GE(H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
  if (!std::isnan(scale)) io::h5_write_attribute(dset.get(), "scale", scale);
}

/// The f64 rows as the slice used to hold them: HDF5's conversion of every stored value to
/// double (H5T_NATIVE_DOUBLE), times `scale` (NaN: no attribute, a uint8 file's 1/255), in place.
std::vector<double> old_f64_rows(const std::string& path, double scale) {
  if (std::isnan(scale)) scale = 1.0 / 255.0;
  io::H5Lock lock;
  io::H5File file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  io::H5Dataset dset(H5Dopen2(file.get(), "/samples", H5P_DEFAULT));
  std::vector<double> x(static_cast<std::size_t>(kSamples * kFeatures));
  EXPECT_GE(H5Dread(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
  for (double& v : x) v *= scale;
  return x;
}

std::vector<std::uint8_t> random_bytes() {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::uint8_t> b(static_cast<std::size_t>(kSamples * kFeatures));
  for (auto& v : b) v = static_cast<std::uint8_t>(byte(gen));
  for (std::int64_t i = 0; i < kSamples; ++i) b[static_cast<std::size_t>(i * kFeatures + 3)] = 9;  // a constant column
  return b;
}

DatasetSlice read_all(const std::string& path) {
  return read_dataset_slice(path, partition_samples(kSamples, 0, 1), {});
}

bool same_bits(const double* a, const double* b, std::int64_t n) {
  return std::memcmp(a, b, static_cast<std::size_t>(n) * sizeof(double)) == 0;
}

/// Every way of getting rows out of `s` gives `want` (f64) and float(want), bit for bit, for
/// blocks of 1, 64 and 100 rows at every offset those cut.
void expect_rows(const DatasetSlice& s, const std::vector<double>& want) {
  const std::int64_t d = kFeatures;
  for (std::int64_t block : {std::int64_t{1}, std::int64_t{64}, std::int64_t{100}}) {
    std::vector<double> buffer(static_cast<std::size_t>(block * d)), copy(buffer.size());
    std::vector<float> f32(buffer.size());
    for (std::int64_t first = 0; first < kSamples; first += block) {
      const std::int64_t n = std::min(block, kSamples - first);
      const double* expected = want.data() + first * d;
      ASSERT_TRUE(same_bits(s.rows_f64(first, n, buffer.data()), expected, n * d)) << "rows_f64 at row " << first;
      s.widen_rows(first, n, copy.data());
      ASSERT_TRUE(same_bits(copy.data(), expected, n * d)) << "widen_rows(double) at row " << first;
      s.widen_rows(first, n, f32.data());
      for (std::int64_t i = 0; i < n * d; ++i) {
        ASSERT_EQ(f32[static_cast<std::size_t>(i)], static_cast<float>(expected[i])) << "float at " << first * d + i;
      }
    }
  }
  DatasetSlice all = s;
  all.widen_all();
  EXPECT_EQ(all.storage, SliceStorage::f64);
  ASSERT_EQ(all.samples.size(), want.size());
  EXPECT_TRUE(same_bits(all.samples.data(), want.data(), static_cast<std::int64_t>(want.size())));
}

/// Means and standard deviations of the kind fit_standardization gives (non-dyadic, so the
/// subtraction and the division round), the constant column's std 1.
Standardization some_standardization() {
  Standardization st;
  for (std::int64_t j = 0; j < kFeatures; ++j) {
    st.mean.push_back(127.3 / 255.0 + 0.001 * static_cast<double>(j));
    st.std.push_back(j == 3 ? 1.0 : 0.29 + 0.003 * static_cast<double>(j));
  }
  return st;
}

class Uint8Slice : public ::testing::TestWithParam<double> {};

TEST_P(Uint8Slice, WidenedRowsAreTheOldF64RowsBitForBit) {
  const double scale = GetParam();
  const std::string path = temp_path("u8.h5");
  const std::vector<std::uint8_t> bytes = random_bytes();
  write_samples(path, H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes.data(), scale);
  const std::vector<double> old = old_f64_rows(path, scale);
  const DatasetSlice s = read_all(path);
  EXPECT_EQ(s.storage, SliceStorage::uint8);
  EXPECT_TRUE(s.samples.empty());
  EXPECT_EQ(s.stored, bytes);
  expect_rows(s, old);
  fs::remove(path);
}

TEST_P(Uint8Slice, StandardisedWidenedRowsAreTheOldInPlaceStandardisationBitForBit) {
  const double scale = GetParam();
  const std::string path = temp_path("u8-std.h5");
  const std::vector<std::uint8_t> bytes = random_bytes();
  write_samples(path, H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes.data(), scale);
  const Standardization st = some_standardization();
  // The reference: the old f64 slice standardised in place by apply_standardization.
  DatasetSlice f64 = read_all(path);
  f64.widen_all();
  ASSERT_TRUE(same_bits(f64.samples.data(), old_f64_rows(path, scale).data(), kSamples * kFeatures));
  apply_standardization(st, f64);
  std::vector<double> old = old_f64_rows(path, scale);
  for (std::int64_t i = 0; i < kSamples; ++i) {  // (x - mean) / std written out, independently
    for (std::int64_t j = 0; j < kFeatures; ++j) {
      double& x = old[static_cast<std::size_t>(i * kFeatures + j)];
      x = (x - st.mean[static_cast<std::size_t>(j)]) / st.std[static_cast<std::size_t>(j)];
    }
  }
  ASSERT_TRUE(same_bits(f64.samples.data(), old.data(), kSamples * kFeatures));
  DatasetSlice u8 = read_all(path);
  apply_standardization(st, u8);
  EXPECT_EQ(u8.storage, SliceStorage::uint8);
  expect_rows(u8, old);
  EXPECT_THROW(apply_standardization(st, u8), Error);  // once only
  fs::remove(path);
}

// 1/255 (io::DatasetReader's default, used when the attribute is absent: NaN here), an
// explicit 1/255, 0.1 (every product rounds) and 3.0.
std::string scale_name(const ::testing::TestParamInfo<double>& p) {
  const char* names[] = {"default_1_255", "scale_1_255", "scale_0_1", "scale_3"};
  return names[p.index];
}
INSTANTIATE_TEST_SUITE_P(Scales, Uint8Slice, ::testing::Values(std::nan(""), 1.0 / 255.0, 0.1, 3.0), scale_name);

TEST(Uint8SliceDefaults, NoScaleAttributeMeansOneOver255) {
  const std::string path = temp_path("u8-default.h5");
  const std::vector<std::uint8_t> bytes = random_bytes();
  write_samples(path, H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes.data(), std::nan(""));
  EXPECT_EQ(read_all(path).scale, 1.0 / 255.0);
  fs::remove(path);
}

TEST(Uint8SliceErrors, NonFiniteScaleNamesTheSampleAndColumn) {
  const std::string path = temp_path("u8-inf.h5");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(kSamples * kFeatures), 1);
  bytes[static_cast<std::size_t>(5 * kFeatures + 2)] = 255;  // 255 * 1e307 = inf; 1 * 1e307 is finite
  write_samples(path, H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes.data(), 1e307);
  try {
    read_all(path);
    FAIL() << "no error for an infinite value";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 5 column 2 is inf"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(FloatSlices, Float32AndFloat64FilesAreF64RowsTimesScale) {
  std::mt19937 gen(11);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<double> values(static_cast<std::size_t>(kSamples * kFeatures));
  for (auto& v : values) v = normal(gen);
  const std::vector<float> values32(values.begin(), values.end());
  struct Case {
    const char* name;
    hid_t file_type, mem_type;
    const void* data;
  };
  for (const Case& c : {Case{"f32.h5", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, values32.data()},
                        Case{"f64.h5", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data()}}) {
    SCOPED_TRACE(c.name);
    const std::string path = temp_path(c.name);
    write_samples(path, c.file_type, c.mem_type, c.data, 0.1);
    const std::vector<double> old = old_f64_rows(path, 0.1);
    DatasetSlice s = read_all(path);
    EXPECT_EQ(s.storage, SliceStorage::f64);
    EXPECT_TRUE(s.stored.empty());
    ASSERT_TRUE(same_bits(s.samples.data(), old.data(), kSamples * kFeatures));
    std::vector<double> unused;
    EXPECT_EQ(s.rows_f64(64, 10, unused.data()), s.row(64));  // no copy
    expect_rows(s, old);
    fs::remove(path);
  }
}

/// squared_distance runs in the widest clone the CPU has (cpu_clones.hpp); its bits must be those
/// of the plain 8-lane sum it documents, computed here in baseline code: lane l takes
/// j = l mod 8, the lanes added as ((0+1)+(2+3))+((4+5)+(6+7)).
TEST(SquaredDistance, WidestCloneHasTheBitsOfThePlainLaneSum) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  for (const std::int64_t d : {1, 7, 8, 9, 63, 784, 1001}) {
    std::vector<double> a(static_cast<std::size_t>(d)), b(a.size());
    for (std::size_t j = 0; j < a.size(); ++j) {
      a[j] = u(rng) * std::ldexp(1.0, static_cast<int>(j % 40) - 20);  // magnitudes over 40 binades
      b[j] = u(rng);
    }
    volatile double lane[8] = {};  // volatile: the reference stays scalar, in this order
    for (std::int64_t j = 0; j < d; ++j) {
      const double t = a[static_cast<std::size_t>(j)] - b[static_cast<std::size_t>(j)];
      const double sq = t * t;
      lane[j % 8] = lane[j % 8] + sq;
    }
    const double expected = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    const double got = squared_distance(a.data(), b.data(), d);
    EXPECT_EQ(std::memcmp(&got, &expected, sizeof got), 0) << "d = " << d << ": " << got << " vs " << expected;
  }
}

}  // namespace
}  // namespace hpctrain::ml
