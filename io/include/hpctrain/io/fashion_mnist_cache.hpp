#pragma once
/// @file
/// The default data set: Fashion-MNIST from Debian's `dataset-fashion-mnist`, imported into a
/// cache directory on first use (one rank imports while the others wait).

#include <string>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::io {

/// $HPCTRAIN_DATA_DIR, else $XDG_CACHE_HOME/hpctrain, else ~/.cache/hpctrain.
std::string default_data_dir();

/// The HDF5 file of Fashion-MNIST's `split` ("train" or "test") in default_data_dir(). Rank 0
/// imports it from the IDX files when absent; collective over `comm`; throws on every rank when
/// the import fails (the message names the files on rank 0).
std::string ensure_fashion_mnist(const std::string& split, coll::Communicator& comm);

}  // namespace hpctrain::io
