# Sourced by the comparison scripts: ensure_fashion_mnist HPCTRAIN imports Debian's Fashion-MNIST
# IDX files once into the HDF5 files `hpctrain train` uses and sets $fashion_train and $fashion_test.
ensure_fashion_mnist() {
  local hpctrain=$1 split f p
  local data_dir=${HPCTRAIN_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hpctrain}
  local idx=/usr/share/datasets/fashion-mnist
  for split in train test; do
    f=$data_dir/fashion-mnist-$split.h5
    if [[ ! -f $f ]]; then
      mkdir -p "$data_dir"
      [[ $split == train ]] && p=train || p=t10k
      "$hpctrain" data import-idx --fashion-mnist --images "$idx/$p-images-idx3-ubyte.gz" \
        --labels "$idx/$p-labels-idx1-ubyte.gz" --out "$f"
    fi
  done
  fashion_train=$data_dir/fashion-mnist-train.h5
  fashion_test=$data_dir/fashion-mnist-test.h5
}
