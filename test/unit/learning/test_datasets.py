import gzip
import re
import struct
from pathlib import Path

import cv2
import numpy as np
import pytest

from fl_uav.learning.datasets import (
    FASHION_MNIST_ROOT,
    Dataset,
    DatasetError,
    dataset_names,
    load_dataset,
    load_digits,
    load_fashion_mnist,
    load_idx,
    load_image_folder,
    register_dataset,
    scan_image_folder,
    train_test_split_stratified,
)

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(np.int16): 0x0B,
             np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D, np.dtype(np.float64): 0x0E}


def idx_bytes(array: np.ndarray, code: int | None = None, dims: tuple[int, ...] | None = None,
              magic_prefix: bytes = b'\x00\x00') -> bytes:
    """A tiny IDX writer; code/dims/magic_prefix override the header to make bad files."""
    code = IDX_CODES[array.dtype] if code is None else code
    dims = array.shape if dims is None else dims
    header = magic_prefix + bytes([code, len(dims)]) + struct.pack(f'>{len(dims)}I', *dims)
    return header + array.astype(array.dtype.newbyteorder('>')).tobytes()


def write_idx(path: Path, data: bytes, compress: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def tiny_dataset(n_per_class=(5, 7, 3)) -> Dataset:
    labels = np.repeat(np.arange(len(n_per_class)), n_per_class).astype(np.int64)
    images = np.arange(len(labels) * 4, dtype=np.uint8).reshape(-1, 1, 2, 2)
    return Dataset(images, labels, tuple(f'c{i}' for i in range(len(n_per_class))), 'tiny')


# --- IDX -------------------------------------------------------------------------------------

@pytest.mark.parametrize('compress', [False, True], ids=['raw', 'gzip'])
@pytest.mark.parametrize('dtype', list(IDX_CODES), ids=str)
def test_idx_round_trip(tmp_path, dtype, compress):
    # Arrange
    array = (np.arange(2 * 3 * 4) - 7).astype(dtype).reshape(2, 3, 4)
    if dtype == np.uint8:
        array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = write_idx(tmp_path / 'a.idx', idx_bytes(array), compress)
    # Act
    loaded = load_idx(path)
    # Assert
    assert loaded.dtype == dtype and loaded.dtype.isnative
    np.testing.assert_array_equal(loaded, array)


def test_idx_one_dimensional(tmp_path):
    labels = np.array([3, 1, 4, 1, 5], np.uint8)
    path = write_idx(tmp_path / 'labels', idx_bytes(labels), compress=True)
    np.testing.assert_array_equal(load_idx(path), labels)


GOOD = np.arange(12, dtype=np.uint8).reshape(3, 4)
MALFORMED = {
    'empty file': (b'', 'truncated header'),
    'short magic': (b'\x00\x00\x08', 'truncated header'),
    'wrong magic': (idx_bytes(GOOD, magic_prefix=b'\x12\x34'), 'wrong magic'),
    'unknown dtype code': (idx_bytes(GOOD, code=0x0A), 'unknown IDX dtype code 0x0a'),
    'zero dims': (b'\x00\x00\x08\x00', '0 dimensions'),
    'header cut in dims': (idx_bytes(GOOD)[:9], 'truncated header'),
    'data truncated': (idx_bytes(GOOD)[:-1], 'truncated'),
    'dims too large': (idx_bytes(GOOD, dims=(4, 4)), 'truncated'),
    'huge dims': (idx_bytes(GOOD, dims=(2 ** 32 - 1, 2 ** 32 - 1)), 'truncated'),
    'dims too small': (idx_bytes(GOOD, dims=(2, 4)), 'disagree'),
}


@pytest.mark.parametrize('compress', [False, True], ids=['raw', 'gzip'])
@pytest.mark.parametrize('case', list(MALFORMED))
def test_malformed_idx_raises_naming_file_and_problem(tmp_path, case, compress):
    # Arrange
    data, problem = MALFORMED[case]
    path = write_idx(tmp_path / f'bad-{case.replace(" ", "_")}.idx', data, compress)
    # Act / Assert
    with pytest.raises(DatasetError, match=problem) as info:
        load_idx(path)
    assert str(path) in str(info.value)


def test_huge_dims_in_gzip_rejected_before_allocating(tmp_path):
    path = write_idx(tmp_path / 'huge.gz', idx_bytes(GOOD, dims=(60000, 28, 28)), compress=True)
    with pytest.raises(DatasetError, match='more than a .*gzip file can hold'):
        load_idx(path)


def test_truncated_gzip_stream(tmp_path):
    compressed = gzip.compress(idx_bytes(np.arange(4000, dtype=np.int32)))
    path = tmp_path / 'cut.gz'
    path.write_bytes(compressed[:len(compressed) // 2])
    with pytest.raises(DatasetError, match='truncated') as info:
        load_idx(path)
    assert str(path) in str(info.value)


def test_missing_idx_file(tmp_path):
    path = tmp_path / 'nope.idx'
    with pytest.raises(DatasetError, match='not found') as info:
        load_idx(path)
    assert str(path) in str(info.value)


# --- Fashion-MNIST ---------------------------------------------------------------------------

@pytest.mark.skipif(not Path(FASHION_MNIST_ROOT).is_dir(),
                    reason=f'{FASHION_MNIST_ROOT} absent; '
                           'run apt-get install -y dataset-fashion-mnist')
def test_fashion_mnist_loads_both_splits():
    train = load_fashion_mnist(split='train')
    test = load_fashion_mnist(split='test')
    assert (len(train), len(test)) == (60000, 10000)
    assert train.images.shape == (60000, 1, 28, 28) and train.images.dtype == np.uint8
    assert train.num_classes == 10 and train.class_names[0] == 'T-shirt/top'
    assert train.class_counts().tolist() == [6000] * 10
    assert test.class_counts().tolist() == [1000] * 10


def test_fashion_mnist_missing_names_path_and_package(tmp_path):
    with pytest.raises(DatasetError, match='apt-get install -y dataset-fashion-mnist') as info:
        load_fashion_mnist(tmp_path / 'absent')
    assert str(tmp_path / 'absent') in str(info.value)


def test_fashion_mnist_missing_file_in_root(tmp_path):
    with pytest.raises(DatasetError, match='train-images-idx3-ubyte.*dataset-fashion-mnist'):
        load_fashion_mnist(tmp_path)


def test_fashion_mnist_from_small_idx_files(tmp_path):
    # Arrange: a fake root with 3 test images, raw labels next to gzip images
    images = np.arange(3 * 28 * 28, dtype=np.uint8).reshape(3, 28, 28)
    write_idx(tmp_path / 't10k-images-idx3-ubyte.gz', idx_bytes(images), compress=True)
    write_idx(tmp_path / 't10k-labels-idx1-ubyte', idx_bytes(np.array([9, 0, 3], np.uint8)))
    # Act
    dataset = load_fashion_mnist(tmp_path, split='test')
    # Assert
    assert dataset.images.shape == (3, 1, 28, 28)
    assert dataset.labels.dtype == np.int64 and dataset.labels.tolist() == [9, 0, 3]
    assert dataset.name == 'fashion_mnist/test'


def test_fashion_mnist_count_mismatch_names_both_files(tmp_path):
    images = np.zeros((3, 28, 28), np.uint8)
    write_idx(tmp_path / 'train-images-idx3-ubyte', idx_bytes(images))
    write_idx(tmp_path / 'train-labels-idx1-ubyte', idx_bytes(np.zeros(2, np.uint8)))
    with pytest.raises(DatasetError, match='3 images but .*train-labels.* 2 labels'):
        load_fashion_mnist(tmp_path)


def test_fashion_mnist_bad_split():
    with pytest.raises(DatasetError, match='split'):
        load_fashion_mnist(split='validation')


# --- digits ----------------------------------------------------------------------------------

def test_digits_scaled_to_uint8():
    pytest.importorskip('sklearn', reason='scikit-learn not installed')
    digits = load_digits()
    assert len(digits) == 1797 and digits.images.shape == (1797, 1, 8, 8)
    assert digits.images.dtype == np.uint8
    assert digits.images.min() == 0 and digits.images.max() == 255
    assert digits.num_classes == 10 and digits.class_names == tuple('0123456789')
    # Every pixel is a scaled 0–16 level.
    levels = np.rint(np.arange(17) * 255 / 16).astype(np.uint8)
    assert set(np.unique(digits.images).tolist()) <= set(levels.tolist())


def test_digits_from_packaged_csv_equal_sklearn_loader(monkeypatch):
    """The fast path (the CSV scikit-learn ships, read without importing scikit-learn) and
    the fallback (sklearn.datasets.load_digits) give the same images and labels."""
    pytest.importorskip('sklearn', reason='scikit-learn not installed')
    from fl_uav.learning import datasets

    assert datasets._digits_csv_path() is not None
    fast = load_digits()
    monkeypatch.setattr(datasets, '_digits_csv_path', lambda: None)
    fallback = load_digits()
    np.testing.assert_array_equal(fast.images, fallback.images)
    np.testing.assert_array_equal(fast.labels, fallback.labels)


# --- image folder ----------------------------------------------------------------------------

def write_png(path: Path, bgr: tuple[int, int, int], size=(10, 6)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full((size[1], size[0], 3), bgr, np.uint8))


def test_image_folder_loads_sorted_classes_as_rgb(tmp_path):
    # Arrange: 'water' (blue, 2 files) and 'grass' (green, 1 file) in BGR order on disk
    write_png(tmp_path / 'water' / 'b.png', (200, 0, 0))
    write_png(tmp_path / 'water' / 'a.PNG', (200, 0, 0), size=(3, 3))
    write_png(tmp_path / 'grass' / 'x.png', (0, 180, 0))
    (tmp_path / 'grass' / 'notes.txt').write_text('ignored')
    # Act
    dataset = load_image_folder(tmp_path, image_px=4)
    # Assert
    assert dataset.class_names == ('grass', 'water')
    assert dataset.labels.tolist() == [0, 1, 1]
    assert dataset.images.shape == (3, 3, 4, 4) and dataset.images.dtype == np.uint8
    assert dataset.images[0, :, 0, 0].tolist() == [0, 180, 0]
    assert dataset.images[1, :, 2, 2].tolist() == [0, 0, 200]


def test_image_folder_grayscale(tmp_path):
    write_png(tmp_path / 'only' / 'a.png', (255, 255, 255))
    dataset = load_image_folder(tmp_path, image_px=5, channels=1)
    assert dataset.images.shape == (1, 1, 5, 5) and int(dataset.images.min()) == 255


def test_image_folder_without_classes(tmp_path):
    with pytest.raises(DatasetError, match='no class sub-folders') as info:
        load_image_folder(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_image_folder_empty_class(tmp_path):
    write_png(tmp_path / 'a' / 'x.png', (0, 0, 0))
    (tmp_path / 'b').mkdir()
    with pytest.raises(DatasetError, match='holds no') as info:
        load_image_folder(tmp_path)
    assert str(tmp_path / 'b') in str(info.value)


def test_image_folder_unreadable_file_is_named(tmp_path):
    write_png(tmp_path / 'a' / 'good.png', (0, 0, 0))
    bad = tmp_path / 'a' / 'broken.jpg'
    bad.write_bytes(b'this is not a jpeg')
    with pytest.raises(DatasetError, match='cannot read') as info:
        load_image_folder(tmp_path)
    assert str(bad) in str(info.value)


def test_image_folder_missing_root(tmp_path):
    with pytest.raises(DatasetError, match='not found'):
        load_image_folder(tmp_path / 'missing')


def write_tree(root: Path, files: dict[str, tuple[int, int, int]]) -> None:
    """A PNG of one BGR colour at each relative path."""
    for relative, bgr in files.items():
        write_png(root / relative, bgr)


RED, GREEN, BLUE = (0, 0, 200), (0, 180, 0), (200, 0, 0)   # BGR on disk


def test_image_folder_with_train_and_test_uses_them_with_one_class_order(tmp_path):
    # Arrange: test/ lists its classes in another order on disk than train/ (sorted anyway)
    write_tree(tmp_path, {'train/water/a.png': BLUE, 'train/grass/b.png': GREEN,
                          'train/grass/c.png': GREEN, 'test/water/d.png': BLUE,
                          'test/grass/e.png': GREEN})
    # Act
    layout = scan_image_folder(tmp_path)
    train = load_image_folder(tmp_path, image_px=4, split='train')
    test = load_image_folder(tmp_path, image_px=4, split='test')
    # Assert
    assert layout.layout == 'train_test' and layout.train_folders is None
    assert train.class_names == test.class_names == ('grass', 'water')
    assert train.labels.tolist() == [0, 0, 1] and test.labels.tolist() == [0, 1]
    assert train.images[2, :, 0, 0].tolist() == [0, 0, 200]      # water is blue in RGB
    assert test.images[0, :, 0, 0].tolist() == [0, 180, 0]
    assert train.name.endswith('/train') and test.name.endswith('/test')


def test_image_folder_clients_are_sorted_folders_and_may_lack_a_class(tmp_path):
    # Arrange: site_b has no water; the class order is the union's
    write_tree(tmp_path, {'clients/site_b/grass/a.png': GREEN,
                          'clients/site_a/water/b.png': BLUE,
                          'clients/site_a/grass/c.png': GREEN,
                          'clients/site_a/road/d.png': RED,
                          'test/grass/e.png': GREEN, 'test/road/f.png': RED,
                          'test/water/g.png': BLUE})
    # Act
    layout = scan_image_folder(tmp_path)
    train = layout.load('train', image_px=2)
    # Assert: site_a's images first (its classes in order), then site_b's
    assert layout.layout == 'clients'
    assert layout.folder_names == ('site_a', 'site_b')
    assert layout.class_names == ('grass', 'road', 'water')
    assert layout.train_folders.tolist() == [0, 0, 0, 1]
    assert train.labels.tolist() == [0, 1, 2, 0]
    assert [p.name for p in layout.train_files] == ['c.png', 'd.png', 'b.png', 'a.png']
    assert train.images[1, :, 0, 0].tolist() == [200, 0, 0]


TREE_ERRORS = [
    # (files, extra folders to make, expected text, the path it must name)
    ({'train/a/x.png': RED, 'train/b/y.png': RED, 'test/a/z.png': RED}, (),
     "class 'b' has no test images", 'train/b'),
    ({'train/a/x.png': RED, 'test/a/z.png': RED, 'test/b/y.png': RED}, (),
     "class 'b' has no training images", 'test/b'),
    ({'clients/s1/a/x.png': RED, 'clients/s2/c/y.png': RED, 'test/a/z.png': RED}, (),
     "class 'c' has no test images", 'clients/s2/c'),
    ({'clients/s1/a/x.png': RED, 'test/a/z.png': RED}, ('clients/s2/a',),
     'class folder holds no', 'clients/s2/a'),
    ({'clients/s1/a/x.png': RED, 'test/a/z.png': RED}, ('clients/s2',),
     'no class sub-folders', 'clients/s2'),
    ({'test/a/z.png': RED}, ('clients',), 'no client folders', 'clients'),
    ({'train/a/x.png': RED, 'test/a/z.png': RED, 'test/b/y.png': RED}, ('test/c',),
     'class folder holds no', 'test/c'),
    ({'train/a/x.png': RED}, (), 'no test/', ''),
    ({'clients/s1/a/x.png': RED}, (), 'no test/', ''),
    ({'test/a/x.png': RED}, (), 'no training images', ''),
    ({'train/a/x.png': RED, 'test/a/z.png': RED, 'clients/s/a/y.png': RED}, (),
     'both train/ and clients/', ''),
    ({'train/a/x.png': RED, 'test/a/z.png': RED, 'cats/y.png': RED}, (),
     'a folder next to', 'cats'),
    ({'train/a/x.png': RED, 'test/a/z.png': RED, 'train/loose.png': RED}, (),
     'an image outside a class folder', 'train/loose.png'),
    ({'a/x.png': RED, 'loose.jpg': RED}, (), 'an image outside a class folder', 'loose.jpg'),
    ({'train/a/x.png': RED, 'test/a/z.png': RED, 'y.png': RED}, (),
     'an image outside a class folder', 'y.png'),
    ({'clients/s/a/x.png': RED, 'test/a/z.png': RED, 'clients/y.JPG': RED}, (),
     'an image outside a class folder', 'clients/y.JPG'),
]


@pytest.mark.parametrize(('files', 'folders', 'text', 'named'), TREE_ERRORS,
                         ids=[e[2] + ':' + e[3] for e in TREE_ERRORS])
def test_a_bad_image_folder_is_one_error_naming_the_folder_or_file(tmp_path, files, folders,
                                                                   text, named):
    # Arrange
    write_tree(tmp_path, files)
    for folder in folders:
        (tmp_path / folder).mkdir(parents=True)
    # Act / Assert: found by the scan, before any image is read
    with pytest.raises(DatasetError, match=re.escape(text)) as info:
        scan_image_folder(tmp_path)
    assert str(tmp_path / named) in str(info.value)


def test_an_unreadable_test_image_is_named(tmp_path):
    write_tree(tmp_path, {'train/a/x.png': RED, 'test/a/z.png': RED})
    bad = tmp_path / 'test' / 'a' / 'y.png'
    bad.write_bytes(b'not a png')
    layout = scan_image_folder(tmp_path)           # the scan reads no image
    with pytest.raises(DatasetError, match='cannot read') as info:
        layout.load('test', image_px=4)
    assert str(bad) in str(info.value)


def test_a_folder_of_classes_has_no_test_split_of_its_own(tmp_path):
    write_png(tmp_path / 'a' / 'x.png', (0, 0, 0))
    with pytest.raises(DatasetError, match='no test/ folder'):
        load_image_folder(tmp_path, split='test')
    with pytest.raises(DatasetError, match="split 'all' unknown"):
        load_image_folder(tmp_path, split='all')


# --- Dataset, registry, split ----------------------------------------------------------------

def test_dataset_subset_and_float():
    dataset = tiny_dataset()
    part = dataset.subset([0, 14])
    assert part.labels.tolist() == [0, 2] and part.class_names == dataset.class_names
    np.testing.assert_array_equal(part.images[1], dataset.images[14])
    masked = dataset.subset(dataset.labels == 1)
    assert len(masked) == 7 and masked.class_counts().tolist() == [0, 7, 0]
    floats = part.as_float32()
    assert floats.dtype == np.float32 and float(floats.max()) <= 1.0
    assert dataset.image_shape == (1, 2, 2)


def test_dataset_rejects_bad_arrays():
    images = np.zeros((2, 1, 2, 2), np.uint8)
    with pytest.raises(DatasetError, match='N×C×H×W'):
        Dataset(np.zeros((2, 2, 2), np.uint8), np.zeros(2, np.int64), ('a',), 'x')
    with pytest.raises(DatasetError, match='int64'):
        Dataset(images, np.zeros(2, np.int32), ('a',), 'x')
    with pytest.raises(DatasetError, match='2 images but 3 labels'):
        Dataset(images, np.zeros(3, np.int64), ('a',), 'x')
    with pytest.raises(DatasetError, match='classes'):
        Dataset(images, np.array([0, 1], np.int64), ('a',), 'x')
    with pytest.raises(DatasetError, match='uint8 or float32'):
        Dataset(images.astype(np.float64), np.zeros(2, np.int64), ('a',), 'x')


def test_registry_hook_and_unknown_name():
    assert {'fashion_mnist', 'digits', 'image_folder'} <= set(dataset_names())
    register_dataset('tiny_test_only', lambda n=(1, 1): tiny_dataset(n), replace=True)
    assert len(load_dataset('tiny_test_only', n=(2, 3))) == 5
    with pytest.raises(ValueError, match='already registered'):
        register_dataset('tiny_test_only', tiny_dataset)
    with pytest.raises(DatasetError, match='unknown; choices: .*digits'):
        load_dataset('cifar10')


def test_stratified_split_keeps_class_proportions_and_is_deterministic():
    # Arrange
    labels = np.repeat(np.arange(3), (100, 50, 30)).astype(np.int64)
    dataset = Dataset(np.zeros((180, 1, 1, 1), np.uint8), labels, ('a', 'b', 'c'), 'toy')
    # Act
    train, test = train_test_split_stratified(dataset, 0.2, seed=4)
    train_again, test_again = train_test_split_stratified(dataset, 0.2, seed=4)
    _, test_other = train_test_split_stratified(dataset, 0.2, seed=5)
    # Assert
    assert test.class_counts().tolist() == [20, 10, 6]
    assert train.class_counts().tolist() == [80, 40, 24]
    np.testing.assert_array_equal(test.labels, test_again.labels)
    assert len(train_again) == 144
    assert test_other.class_counts().tolist() == [20, 10, 6]


def test_stratified_split_is_disjoint_and_complete():
    dataset = tiny_dataset((5, 7, 3))
    train, test = train_test_split_stratified(dataset, 0.3, seed=0)
    pixels = sorted(train.images[:, 0, 0, 0].tolist() + test.images[:, 0, 0, 0].tolist())
    assert pixels == sorted(dataset.images[:, 0, 0, 0].tolist())
    assert len(test) == round(15 * 0.3)


@pytest.mark.parametrize('fraction', [0.0, 1.0, -0.1])
def test_stratified_split_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match='test_fraction'):
        train_test_split_stratified(tiny_dataset(), fraction, 0)
