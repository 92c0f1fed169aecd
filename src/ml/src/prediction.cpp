// Applying a fitted model file to a data set; see prediction.hpp.
#include "hpctrain/ml/prediction.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/h5.hpp"
#include "hpctrain/ml/feature_scaling.hpp"
#include "hpctrain/ml/kmeans.hpp"
#include "hpctrain/ml/logistic_regression.hpp"
#include "blas_products.hpp"

namespace hpctrain::ml {

namespace {

/// The model's input width (columns of its matrix) must be the data's.
void require_features(std::int64_t model_features, const DatasetSlice& data, const std::string& model_path) {
  HPCTRAIN_REQUIRE(model_features == data.features,
                   fmt::format("predict: model file '{}' takes samples of {} values, data set '{}' has {}",
                               model_path, model_features, data.path, data.features));
}

void predict_kmeans(const ModelFileContents& model, const std::string& path, const DatasetSlice& data,
                    Predictions& p) {
  const ModelArray& c = model_array(model, "/centroids", path);
  HPCTRAIN_REQUIRE(c.dims.size() == 2, fmt::format("model file '{}': /centroids must be K x d", path));
  const auto k = static_cast<std::int64_t>(c.dims[0]);
  require_features(static_cast<std::int64_t>(c.dims[1]), data, path);
  std::vector<std::int64_t> label(static_cast<std::size_t>(data.rows));
  std::vector<double> d2(label.size());
  // Sum block by sum block, as the fit assigns: the same dgemm calls at any rank count.
  for (std::int64_t first = 0; first < data.rows; first += kSumBlockSamples) {
    const std::int64_t rows = std::min(kSumBlockSamples, data.rows - first);
    nearest_centroids(data.row(first), rows, data.features, c.values, k, label.data() + first, d2.data() + first);
  }
  p.labels.assign(label.begin(), label.end());
}

void predict_linreg(const ModelFileContents& model, const std::string& path, const DatasetSlice& data,
                    Predictions& p) {
  const ModelArray& w = model_array(model, "/coefficients", path);
  require_features(static_cast<std::int64_t>(w.values.size()), data, path);
  const double b = model.real_attribute("intercept");
  p.values.resize(static_cast<std::size_t>(data.rows));
  for (std::int64_t i = 0; i < data.rows; ++i) {
    double s = b;
    for (std::int64_t j = 0; j < data.features; ++j) s += data.row(i)[j] * w.values[static_cast<std::size_t>(j)];
    p.values[static_cast<std::size_t>(i)] = s;
  }
}

void predict_logreg(const ModelFileContents& model, const std::string& path, const DatasetSlice& data,
                    Predictions& p) {
  const ModelArray& w = model_array(model, "/coefficients", path);
  const ModelArray& b = model_array(model, "/intercept", path);
  HPCTRAIN_REQUIRE(w.dims.size() == 2 && b.dims.size() == 1 && b.dims[0] == w.dims[0],
                   fmt::format("model file '{}': /coefficients must be classes x d and /intercept classes", path));
  require_features(static_cast<std::int64_t>(w.dims[1]), data, path);
  LogisticRegressionResult m;
  m.classes = static_cast<std::int64_t>(w.dims[0]);
  m.features = data.features;
  m.coefficients = w.values;
  m.intercept = b.values;
  p.classes = m.classes;
  p.probabilities.resize(static_cast<std::size_t>(data.rows * m.classes));
  // Sum block by sum block: the same dgemm calls for every row at any rank count.
  for (std::int64_t first = 0; first < data.rows; first += kSumBlockSamples) {
    const std::int64_t rows = std::min(kSumBlockSamples, data.rows - first);
    const std::vector<double> block = logistic_probabilities(m, data.row(first), rows);
    std::copy(block.begin(), block.end(), p.probabilities.begin() + first * m.classes);
  }
  p.labels.resize(static_cast<std::size_t>(data.rows));
  for (std::int64_t i = 0; i < data.rows; ++i) {
    const double* pi = p.probabilities.data() + i * m.classes;
    p.labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(std::max_element(pi, pi + m.classes) - pi);
  }
}

/// All ranks' rows of `width` doubles each, in rank order, on rank 0 (empty elsewhere).
std::vector<double> gather_rows(coll::Communicator& comm, const std::vector<double>& local, std::int64_t rows,
                                std::int64_t width, std::vector<std::int64_t>& rows_of_rank) {
  const auto p = static_cast<std::size_t>(comm.size());
  rows_of_rank.assign(p, 0);
  comm.allgather(&rows, rows_of_rank.data(), 1, coll::DataType::i64);
  const std::int64_t most = *std::max_element(rows_of_rank.begin(), rows_of_rank.end());
  std::vector<double> padded(static_cast<std::size_t>(most * width), 0.0);
  std::copy(local.begin(), local.end(), padded.begin());
  std::vector<double> all(padded.size() * p);
  comm.allgather(padded.data(), all.data(), padded.size(), coll::DataType::f64);
  std::vector<double> out;
  if (comm.rank() != 0) return out;
  for (std::size_t r = 0; r < p; ++r) {
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(r * padded.size());
    out.insert(out.end(), begin, begin + rows_of_rank[r] * width);
  }
  return out;
}

void write_dataset(hid_t file, const char* name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims,
                   const void* values, const std::string& where) {
  io::H5Dataspace space(HPCTRAIN_CHECK_H5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), where));
  io::H5Dataset dset(HPCTRAIN_CHECK_H5(
      H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), where + ": create " + name));
  HPCTRAIN_CHECK_H5(H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), where + ": write " + name);
}

}  // namespace

Predictions predict_slice(const ModelFileContents& model, const std::string& model_path, DatasetSlice& data) {
  const detail::SingleBlasThread one_blas_thread;
  data.widen_all();  // the predictors read row()
  const bool standardized = std::any_of(model.arrays.begin(), model.arrays.end(),
                                        [](const ModelArray& a) { return a.name == "/standardize_mean"; });
  if (standardized) {
    Standardization s{model_array(model, "/standardize_mean", model_path).values,
                      model_array(model, "/standardize_std", model_path).values};
    require_features(static_cast<std::int64_t>(s.mean.size()), data, model_path);
    apply_standardization(s, data);
  }
  Predictions p;
  p.model = model.model;
  p.rows = data.rows;
  if (model.model == "kmeans") {
    predict_kmeans(model, model_path, data, p);
  } else if (model.model == "linreg") {
    predict_linreg(model, model_path, data, p);
  } else if (model.model == "logreg") {
    predict_logreg(model, model_path, data, p);
  } else {
    HPCTRAIN_FAIL(fmt::format("predict: model file '{}' holds a '{}' model; ml predict knows kmeans, linreg, logreg",
                              model_path, model.model));
  }
  return p;
}

void write_predictions(coll::Communicator& comm, const Predictions& local, const std::string& path,
                       const PredictionProvenance& provenance) {
  // One row = [label or value, probabilities...] as doubles (int32 labels are exact in f64).
  const std::int64_t width = 1 + local.classes;
  std::vector<double> rows(static_cast<std::size_t>(local.rows * width));
  for (std::int64_t i = 0; i < local.rows; ++i) {
    const auto at = static_cast<std::size_t>(i * width);
    rows[at] = local.model == "linreg" ? local.values[static_cast<std::size_t>(i)]
                                       : static_cast<double>(local.labels[static_cast<std::size_t>(i)]);
    for (std::int64_t c = 0; c < local.classes; ++c) {
      rows[at + 1 + static_cast<std::size_t>(c)] = local.probabilities[static_cast<std::size_t>(i * local.classes + c)];
    }
  }
  std::vector<std::int64_t> rows_of_rank;
  const std::vector<double> all = gather_rows(comm, rows, local.rows, width, rows_of_rank);
  if (comm.rank() == 0) {
    const auto n = static_cast<hsize_t>(all.size() / static_cast<std::size_t>(width));
    io::StagedFile staged(path, "write predictions");
    const std::string where = "write predictions '" + staged.path() + "'";
    {
      io::H5Lock lock;
      io::H5File file(HPCTRAIN_CHECK_H5(H5Fcreate(staged.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                        where + ": create file"));
      std::vector<double> first(n);
      for (hsize_t i = 0; i < n; ++i) first[i] = all[i * static_cast<hsize_t>(width)];
      if (local.model == "linreg") {
        write_dataset(file.get(), "/predictions", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {n}, first.data(), where);
      } else {
        const std::vector<std::int32_t> labels(first.begin(), first.end());
        write_dataset(file.get(), "/predictions", H5T_STD_I32LE, H5T_NATIVE_INT32, {n}, labels.data(), where);
      }
      if (local.classes > 0) {
        std::vector<float> probabilities;
        probabilities.reserve(n * static_cast<hsize_t>(local.classes));
        for (hsize_t i = 0; i < n; ++i) {
          for (std::int64_t c = 0; c < local.classes; ++c) {
            probabilities.push_back(static_cast<float>(all[i * static_cast<hsize_t>(width) + 1 + static_cast<hsize_t>(c)]));
          }
        }
        write_dataset(file.get(), "/probabilities", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                      {n, static_cast<hsize_t>(local.classes)}, probabilities.data(), where);
      }
      const hid_t root = file.get();
      io::h5_write_attribute(root, "format", std::string("hpctrain-predictions"));
      io::h5_write_attribute(root, "model", local.model);
      io::h5_write_attribute(root, "model_file", provenance.model_path);
      io::h5_write_attribute(root, "data", provenance.data_path);
      io::h5_write_attribute(root, "count", static_cast<std::int64_t>(n));
      HPCTRAIN_CHECK_H5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), where + ": flush");
    }
    staged.commit();
  }
  comm.barrier();
}

}  // namespace hpctrain::ml
