#!/bin/sh
# Installs the real Fashion-MNIST IDX files (Debian package dataset-fashion-mnist) when
# that is possible here (root + apt); otherwise lbtrain falls back to the Keras download.
dir=/usr/share/datasets/fashion-mnist
if [ -f "$dir/train-images-idx3-ubyte.gz" ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian package dataset-fashion-mnist into $dir"
    { apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; }; } ||
      echo "note: could not install dataset-fashion-mnist; Fashion-MNIST will come from the Keras download"
else
    echo "note: not root with apt; Fashion-MNIST will come from the Keras download (or \$LBTRAIN_DATA_DIR)"
fi
exit 0
