import gzip
import struct

import numpy as np
import pytest

from idx_files import idx_bytes, write_idx_set
from lbtrain.data import DatasetError, find_idx_directory, idx_search_path, read_idx, read_idx_directory


def test_read_idx_plain_and_gzip_round_trip(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "plain").write_bytes(idx_bytes(array))
    (tmp_path / "zipped.gz").write_bytes(gzip.compress(idx_bytes(array)))
    np.testing.assert_array_equal(read_idx(tmp_path / "plain"), array)
    np.testing.assert_array_equal(read_idx(tmp_path / "zipped.gz"), array)


def test_truncated_gzip_names_file(tmp_path):
    blob = gzip.compress(idx_bytes(np.zeros((50, 28, 28), np.uint8)))
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DatasetError, match=r"train-images-idx3-ubyte.gz: corrupt or truncated gzip"):
        read_idx(path)


def test_truncated_data_reports_expected_and_found_bytes(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(idx_bytes(np.zeros(100, np.uint8))[:-10])
    with pytest.raises(DatasetError, match=r"labels: truncated: dims \(100,\) need 100 bytes of data, found 90"):
        read_idx(path)


def test_trailing_bytes_and_bad_magic_are_errors(tmp_path):
    trailing = tmp_path / "trailing"
    trailing.write_bytes(idx_bytes(np.zeros(4, np.uint8)) + b"xx")
    with pytest.raises(DatasetError, match="trailing bytes"):
        read_idx(trailing)
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
    with pytest.raises(DatasetError, match=r"bad: not an IDX file \(bad magic number 01020801\)"):
        read_idx(bad)
    unknown_type = tmp_path / "unknown_type"
    unknown_type.write_bytes(b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00")
    with pytest.raises(DatasetError, match="unknown IDX type code 0x07"):
        read_idx(unknown_type)


def test_search_path_puts_data_dir_before_debian(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTRAIN_DATA_DIR", str(tmp_path))
    assert idx_search_path("mnist")[:2] == [tmp_path / "mnist", tmp_path]
    monkeypatch.delenv("LBTRAIN_DATA_DIR")
    assert tmp_path not in idx_search_path("mnist") and len(idx_search_path("mnist")) == 1


def test_directory_is_found_only_with_all_four_files_plain_or_gzipped(tmp_path, monkeypatch):
    written = write_idx_set(tmp_path / "mnist")
    monkeypatch.setenv("LBTRAIN_DATA_DIR", str(tmp_path))
    plain = tmp_path / "mnist" / "t10k-labels-idx1-ubyte"
    plain.write_bytes(gzip.decompress((tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes()))
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    assert find_idx_directory("mnist") == tmp_path / "mnist"
    arrays = read_idx_directory(tmp_path / "mnist")
    np.testing.assert_array_equal(arrays["y_test"], written["t10k-labels-idx1-ubyte"])
    assert arrays["x_train"].shape == (12, 28, 28) and arrays["x_train"].dtype == np.uint8
    plain.unlink()
    assert find_idx_directory("mnist") != tmp_path / "mnist"
    with pytest.raises(DatasetError, match=r"neither t10k-labels-idx1-ubyte nor t10k-labels-idx1-ubyte.gz found"):
        read_idx_directory(tmp_path / "mnist")
