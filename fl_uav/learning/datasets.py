"""Labelled image datasets for the experiment engine, loaded from local files only.

Every loader returns a :class:`Dataset` whose images are N×C×H×W. The loaders in this module
return uint8 images in 0–255 (``Dataset.as_float32`` gives the model's [0, 1] float input);
float32 images are accepted for datasets built elsewhere. Nothing here downloads anything:

* ``fashion_mnist``: the Debian package ``dataset-fashion-mnist`` (IDX files under
  ``/usr/share/datasets/fashion-mnist``), read by the strict :func:`load_idx`.
* ``digits``: ``sklearn.datasets.load_digits`` (ships inside scikit-learn).
* ``image_folder``: the user's own images, ``root/<class_name>/*.png|jpg``, or with a given
  split: ``root/{train,test}/<class_name>/`` or ``root/clients/<folder>/<class_name>/`` and
  ``root/test/<class_name>/`` (:func:`scan_image_folder`).

Other sources (the synthetic aerial world) plug in through :func:`register_dataset`.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class DatasetError(ValueError):
    """A dataset is missing or malformed; the message names the file and the problem."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """Images with integer labels.

    images: uint8 (0–255) or float32 array, N×C×H×W.
    labels: int64 array of N class indices in [0, num_classes).
    class_names: one name per class; its length is the number of classes.
    name: where the data came from, e.g. 'fashion_mnist/train'.
    positions_enu_m: optional float64 N×2 (east, north) capture positions, for location-based
        partitions; None when the data has no geography.

    The arrays are shared, not copied: treat them as read-only.
    """

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    name: str
    positions_enu_m: np.ndarray | None = field(default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, 'class_names', tuple(str(c) for c in self.class_names))
        images, labels = self.images, self.labels
        if not isinstance(images, np.ndarray) or images.ndim != 4:
            raise DatasetError(f'{self.name}: images must be an N×C×H×W array, got shape '
                               f'{getattr(images, "shape", None)}')
        if images.dtype not in (np.uint8, np.float32):
            raise DatasetError(f'{self.name}: images must be uint8 or float32, got {images.dtype}')
        if not isinstance(labels, np.ndarray) or labels.ndim != 1 or labels.dtype != np.int64:
            raise DatasetError(f'{self.name}: labels must be a 1-D int64 array, got '
                               f'{getattr(labels, "dtype", None)} '
                               f'{getattr(labels, "shape", None)}')
        if len(labels) != len(images):
            raise DatasetError(f'{self.name}: {len(images)} images but {len(labels)} labels')
        if not self.class_names:
            raise DatasetError(f'{self.name}: class_names is empty')
        if len(labels) and (labels.min() < 0 or labels.max() >= len(self.class_names)):
            raise DatasetError(f'{self.name}: labels span [{labels.min()}, {labels.max()}] but '
                               f'there are {len(self.class_names)} classes')
        positions = self.positions_enu_m
        if positions is not None and (not isinstance(positions, np.ndarray)
                                      or positions.shape != (len(labels), 2)):
            raise DatasetError(f'{self.name}: positions_enu_m must have shape ({len(labels)}, 2), '
                               f'got {getattr(positions, "shape", None)}')

    @property
    def num_classes(self) -> int:
        """Number of classes (the length of class_names, whether or not all occur)."""
        return len(self.class_names)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one image."""
        channels, height, width = self.images.shape[1:]
        return int(channels), int(height), int(width)

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, indices: np.ndarray | Sequence[int]) -> Dataset:
        """The samples at ``indices`` (integer positions, or a boolean mask of length N)."""
        index = np.asarray(indices)
        if index.dtype == np.bool_:
            if index.shape != (len(self),):
                raise DatasetError(f'{self.name}: boolean mask has shape {index.shape}, '
                                   f'expected ({len(self)},)')
            index = np.flatnonzero(index)
        index = index.astype(np.intp, copy=False).reshape(-1)
        if len(index) and (index.min() < -len(self) or index.max() >= len(self)):
            raise DatasetError(f'{self.name}: subset index out of range for {len(self)} samples')
        positions = None if self.positions_enu_m is None else self.positions_enu_m[index]
        return Dataset(self.images[index], self.labels[index], self.class_names, self.name,
                       positions)

    def as_float32(self) -> np.ndarray:
        """Images as float32 N×C×H×W in [0, 1] (uint8 is divided by 255; float32 is copied)."""
        if self.images.dtype == np.uint8:
            return self.images.astype(np.float32) / np.float32(255.0)
        return self.images.copy()

    def class_counts(self) -> np.ndarray:
        """Samples per class (int64, length num_classes)."""
        return np.bincount(self.labels, minlength=self.num_classes)


# --- IDX -------------------------------------------------------------------------------------

IDX_DTYPES = {
    0x08: np.dtype('>u1'),
    0x09: np.dtype('>i1'),
    0x0B: np.dtype('>i2'),
    0x0C: np.dtype('>i4'),
    0x0D: np.dtype('>f4'),
    0x0E: np.dtype('>f8'),
}
"""IDX data-type codes (the third magic byte) and their big-endian numpy types."""

_GZIP_MAGIC = b'\x1f\x8b'
_MAX_DEFLATE_RATIO = 1032
"""Deflate cannot expand data more than about 1032:1, which bounds a gzip file's content."""


def load_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (raw or gzip-compressed, detected from its first bytes).

    The header is ``0x00 0x00 <dtype code> <ndims>``, then ``ndims`` big-endian uint32
    dimensions, then the big-endian data. Every field is checked before the data array is
    allocated: the magic, the dtype code (see IDX_DTYPES), ndims >= 1, and the size the dims
    imply against the file size (for gzip, against the most the compressed size can hold).
    After reading, the data must fill the dims exactly: fewer bytes is 'truncated', extra
    bytes mean the dims disagree with the file.

    Returns the array in native byte order with shape ``dims``. Raises DatasetError naming
    the file and the problem.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f'{path}: IDX file not found (or not a regular file)')
    try:
        file_size = path.stat().st_size
        with path.open('rb') as raw:
            is_gzip = raw.read(2) == _GZIP_MAGIC
        with (gzip.open(path, 'rb') if is_gzip else path.open('rb')) as stream:
            return _read_idx_stream(stream, path, file_size, is_gzip)
    except EOFError as error:
        raise DatasetError(f'{path}: truncated: the gzip stream ends early ({error})') from error
    except (OSError, zlib.error) as error:
        raise DatasetError(f'{path}: cannot decompress or read: {error}') from error


def _read_exact(stream, count: int) -> bytes:
    chunks, remaining = [], count
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b''.join(chunks)


def _read_idx_stream(stream, path: Path, file_size: int, is_gzip: bool) -> np.ndarray:
    magic = _read_exact(stream, 4)
    if len(magic) < 4:
        raise DatasetError(f'{path}: truncated header: {len(magic)} bytes, need 4 for the magic')
    if magic[0] != 0 or magic[1] != 0:
        raise DatasetError(f'{path}: wrong magic {magic.hex()}: an IDX file starts with 0000')
    code, ndims = magic[2], magic[3]
    if code not in IDX_DTYPES:
        known = ', '.join(f'0x{c:02x}' for c in IDX_DTYPES)
        raise DatasetError(f'{path}: unknown IDX dtype code 0x{code:02x} (known: {known})')
    if ndims == 0:
        raise DatasetError(f'{path}: IDX header has 0 dimensions')
    dims_bytes = _read_exact(stream, 4 * ndims)
    if len(dims_bytes) < 4 * ndims:
        raise DatasetError(f'{path}: truncated header: {ndims} dims need {4 * ndims} bytes, '
                           f'file has {len(dims_bytes)}')
    dims = tuple(int(d) for d in np.frombuffer(dims_bytes, '>u4'))
    dtype = IDX_DTYPES[code]
    header_bytes = 4 + 4 * ndims
    data_bytes = math.prod(dims) * dtype.itemsize
    shape_text = '×'.join(str(d) for d in dims)
    if is_gzip:
        most = file_size * _MAX_DEFLATE_RATIO
        if header_bytes + data_bytes > most:
            raise DatasetError(f'{path}: dims {shape_text} need {data_bytes} data bytes, more '
                               f'than a {file_size}-byte gzip file can hold (truncated or bad '
                               f'dims)')
    elif header_bytes + data_bytes > file_size:
        raise DatasetError(f'{path}: truncated: dims {shape_text} need {data_bytes} data bytes, '
                           f'file has {file_size - header_bytes}')
    buffer = np.empty(data_bytes, np.uint8)
    view = memoryview(buffer)
    filled = 0
    while filled < data_bytes:
        got = stream.readinto(view[filled:])
        if not got:
            break
        filled += got
    if filled < data_bytes:
        raise DatasetError(f'{path}: truncated: dims {shape_text} need {data_bytes} data bytes, '
                           f'file has {filled}')
    extra = len(stream.read(1))
    if extra:
        raise DatasetError(f'{path}: dims {shape_text} disagree with the file: data continues '
                           f'past the {data_bytes} bytes they describe')
    array = buffer.view(dtype).reshape(dims)
    return array if dtype.itemsize == 1 else array.astype(dtype.newbyteorder('='))


# --- Fashion-MNIST ---------------------------------------------------------------------------

FASHION_MNIST_ROOT = '/usr/share/datasets/fashion-mnist'
"""Where the Debian package ``dataset-fashion-mnist`` installs the IDX files."""

FASHION_MNIST_CLASSES = ('T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal',
                         'Shirt', 'Sneaker', 'Bag', 'Ankle boot')
"""Fashion-MNIST class names, by label."""

_FASHION_MNIST_PREFIX = {'train': 'train', 'test': 't10k'}
_FASHION_MNIST_INSTALL = 'apt-get install -y dataset-fashion-mnist'


def _idx_file(root: Path, stem: str) -> Path:
    for name in (f'{stem}.gz', stem):
        if (root / name).is_file():
            return root / name
    raise DatasetError(f'Fashion-MNIST file {root / stem}[.gz] not found; install the Debian '
                       f'package with `{_FASHION_MNIST_INSTALL}`')


def load_fashion_mnist(root: str | Path = FASHION_MNIST_ROOT, split: str = 'train') -> Dataset:
    """Fashion-MNIST 'train' (60000) or 'test' (10000): uint8 N×1×28×28, 10 classes.

    Reads ``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]`` under ``root``.
    """
    if split not in _FASHION_MNIST_PREFIX:
        raise DatasetError(f'split {split!r} unknown; choices: train, test')
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f'Fashion-MNIST not found: {root} does not exist; install the Debian '
                           f'package with `{_FASHION_MNIST_INSTALL}`')
    prefix = _FASHION_MNIST_PREFIX[split]
    images_path = _idx_file(root, f'{prefix}-images-idx3-ubyte')
    labels_path = _idx_file(root, f'{prefix}-labels-idx1-ubyte')
    images, labels = load_idx(images_path), load_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise DatasetError(f'{images_path}: expected uint8 N×H×W images, got {images.dtype} '
                           f'{images.shape}')
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise DatasetError(f'{labels_path}: expected uint8 N labels, got {labels.dtype} '
                           f'{labels.shape}')
    if len(images) != len(labels):
        raise DatasetError(f'{images_path} holds {len(images)} images but {labels_path} holds '
                           f'{len(labels)} labels')
    if len(labels) and labels.max() >= len(FASHION_MNIST_CLASSES):
        raise DatasetError(f'{labels_path}: label {labels.max()} out of range for '
                           f'{len(FASHION_MNIST_CLASSES)} classes')
    return Dataset(images[:, None], labels.astype(np.int64), FASHION_MNIST_CLASSES,
                   f'fashion_mnist/{split}')


# --- scikit-learn digits ---------------------------------------------------------------------

DIGITS_CSV = 'digits.csv.gz'
"""The file scikit-learn ships the digits in (under sklearn/datasets/data/)."""


def _digits_csv_path() -> Path | None:
    """scikit-learn's bundled ``datasets/data/digits.csv.gz``, located without importing
    scikit-learn (importing it costs about a second of start-up)."""
    spec = importlib.util.find_spec('sklearn')
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / 'datasets' / 'data' / DIGITS_CSV
    return path if path.is_file() else None


def load_digits() -> Dataset:
    """scikit-learn's 1797 handwritten digits: uint8 N×1×8×8, classes '0'..'9'.

    Read from the CSV file scikit-learn ships (65 columns: 64 pixels, then the label) — the
    same file and row order as ``sklearn.datasets.load_digits`` — falling back to that
    function when the file is not where scikit-learn keeps it. The source pixels are integers
    0–16; they are scaled to 0–255 as ``rint(v * 255 / 16)`` so that every loader returns the
    same uint8 range.
    """
    path = _digits_csv_path()
    if path is not None:
        with gzip.open(path, 'rt') as f:
            table = np.loadtxt(f, delimiter=',', dtype=np.float64)
        if table.ndim != 2 or table.shape[1] != 65:
            raise DatasetError(f'{path}: expected 65 comma-separated columns, got '
                               f'{table.shape}')
        pixels, labels = table[:, :64].reshape(-1, 8, 8), table[:, 64].astype(np.int64)
    else:
        try:
            from sklearn.datasets import load_digits as sklearn_load_digits
        except ImportError as error:
            raise DatasetError('the digits dataset needs scikit-learn: '
                               '`pip install scikit-learn==1.9.1`') from error
        bunch = sklearn_load_digits()
        pixels, labels = np.asarray(bunch.images, np.float64), np.asarray(bunch.target, np.int64)
    images = np.rint(pixels * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)[:, None]
    return Dataset(images, labels, tuple(str(d) for d in range(10)), 'digits')


# --- image folder ----------------------------------------------------------------------------

IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg')
"""File suffixes (any case) that the image folder loaders read; other files are ignored."""

SPLIT_FOLDERS = ('train', 'test', 'clients')
"""Names of an image folder root's sub-folders that hold a given split instead of a class."""

IMAGE_FOLDER_LAYOUTS = ('classes', 'train_test', 'clients')
"""An image folder's layouts: root/<class>/, root/{train,test}/<class>/, and
root/clients/<folder>/<class>/ with root/test/<class>/ (docs/cli.md draws them)."""


def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith('.'))


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES


def _refuse_loose_images(entries: list[Path], place: str) -> None:
    stray = [p for p in entries if _is_image(p)]
    if stray:
        raise DatasetError(f'{stray[0]}: an image outside a class folder; images go in '
                           f'{place}')


def _class_files(folder: Path) -> dict[str, list[Path]]:
    """``folder/<class>/*.png|jpg|jpeg`` as {class name: sorted image files}; DatasetError for
    a folder without class folders, an empty class folder or an image outside a class."""
    if not folder.is_dir():
        raise DatasetError(f'{folder}: image folder not found')
    entries = _visible(folder)
    _refuse_loose_images(entries, f'{folder}/<class_name>/')
    classes = {}
    for class_dir in (p for p in entries if p.is_dir()):
        files = [p for p in _visible(class_dir) if _is_image(p)]
        if not files:
            raise DatasetError(f'{class_dir}: class folder holds no '
                               f'{"/".join(IMAGE_SUFFIXES)} images')
        classes[class_dir.name] = files
    if not classes:
        raise DatasetError(f'{folder}: no class sub-folders; expected '
                           f'{folder}/<class_name>/*.png')
    return classes


@dataclass(frozen=True, eq=False)
class ImageFolderLayout:
    """An image folder's files, found and checked by :func:`scan_image_folder` before any is
    read.

    layout: one of IMAGE_FOLDER_LAYOUTS. class_names: sorted; labels index them in every part.
    train_files, train_labels: the training images ('classes': all images, 'clients': every
    client folder's, folder after folder). test_files, test_labels: root/test's (empty for
    'classes'). folder_names: the client folders, sorted ('clients' only); train_folders: each
    training image's index into folder_names (None unless 'clients').
    """

    root: Path
    layout: str
    class_names: tuple[str, ...]
    train_files: tuple[Path, ...]
    train_labels: np.ndarray
    test_files: tuple[Path, ...] = ()
    test_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    folder_names: tuple[str, ...] = ()
    train_folders: np.ndarray | None = None

    def load(self, split: str = 'train', image_px: int = 32, channels: int = 3) -> Dataset:
        """The 'train' or 'test' images read and resized (see :func:`load_image_folder`);
        'test' of a 'classes' layout is an error (it has no test set of its own)."""
        if split not in ('train', 'test'):
            raise DatasetError(f'split {split!r} unknown; choices: train, test')
        if split == 'test' and not self.test_files:
            raise DatasetError(f'{self.root}: no test/ folder: split it with '
                               f'train_test_split_stratified')
        files, labels = ((self.train_files, self.train_labels) if split == 'train'
                         else (self.test_files, self.test_labels))
        name = f'image_folder/{self.root.name}' + ('' if self.layout == 'classes'
                                                   else f'/{split}')
        return Dataset(_read_images(files, image_px, channels), labels, self.class_names, name)


def scan_image_folder(root: str | Path) -> ImageFolderLayout:
    """Find and check an image folder's files (nothing is read yet).

    A root with none of SPLIT_FOLDERS is ``root/<class>/*.png`` ('classes'). Otherwise it must
    hold ``test/<class>/`` and exactly one of ``train/<class>/`` ('train_test') or
    ``clients/<folder>/<class>/`` ('clients'), and nothing else. Every class of the training
    side must have a test folder and every test class training images; a client folder may
    lack classes. Hidden entries and files with other suffixes are ignored. Raises DatasetError
    naming the folder or file.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f'{root}: image folder not found')
    present = {p.name for p in _visible(root) if p.is_dir() and p.name in SPLIT_FOLDERS}
    if not present:
        classes = _class_files(root)
        names = tuple(sorted(classes))
        files, labels = _flatten(classes, names)
        return ImageFolderLayout(root, 'classes', names, files, labels)
    _check_split_folders(root, present)
    test = _class_files(root / 'test')
    if 'train' in present:
        sources = {'train': _class_files(root / 'train')}
    else:
        entries = _visible(root / 'clients')
        _refuse_loose_images(entries, f'{root / "clients"}/<folder>/<class_name>/')
        folders = [p for p in entries if p.is_dir()]
        if not folders:
            raise DatasetError(f'{root / "clients"}: no client folders; expected '
                               f'{root / "clients"}/<folder>/<class_name>/*.png')
        sources = {f'clients/{p.name}': _class_files(p) for p in folders}
    names = tuple(sorted(test))
    for source, classes in sources.items():
        extra = sorted(set(classes) - set(test))
        if extra:
            raise DatasetError(f'{root / source / extra[0]}: class {extra[0]!r} has no test '
                               f'images: {root / "test"} has no folder {extra[0]!r} (its '
                               f'classes: {", ".join(names)})')
    trained = set().union(*sources.values())
    untrained = [c for c in names if c not in trained]
    if untrained:
        where = root / ('train' if 'train' in present else 'clients/*')
        raise DatasetError(f'{root / "test" / untrained[0]}: class {untrained[0]!r} has no '
                           f'training images (no {where}/{untrained[0]}/)')
    test_files, test_labels = _flatten(test, names)
    parts = [_flatten(classes, names) for classes in sources.values()]
    train_files = tuple(f for files, _ in parts for f in files)
    train_labels = np.concatenate([labels for _, labels in parts])
    if 'train' in present:
        return ImageFolderLayout(root, 'train_test', names, train_files, train_labels,
                                 test_files, test_labels)
    folder_of = np.repeat(np.arange(len(parts), dtype=np.int64), [len(f) for f, _ in parts])
    return ImageFolderLayout(root, 'clients', names, train_files, train_labels, test_files,
                             test_labels, tuple(s.split('/', 1)[1] for s in sources),
                             folder_of)


def _check_split_folders(root: Path, present: set[str]) -> None:
    _refuse_loose_images(_visible(root), f'{root}/test/<class_name>/ (or train/, clients/)')
    others = [p.name for p in _visible(root) if p.is_dir() and p.name not in SPLIT_FOLDERS]
    if others:
        raise DatasetError(f'{root / others[0]}: a folder next to '
                           f'{"/ and ".join(sorted(present))}/: with a given split every class '
                           f'folder goes inside test/ and train/ (or clients/<folder>/)')
    if {'train', 'clients'} <= present:
        raise DatasetError(f'{root}: has both train/ and clients/: keep one (clients/ holds '
                           f'the training images folder by folder; other partitions pool '
                           f'them)')
    if 'test' not in present:
        raise DatasetError(f'{root}: has {"/ and ".join(sorted(present))}/ but no test/: add '
                           f'{root / "test"}/<class_name>/ (or use one folder of class '
                           f'folders, split at random)')
    if present == {'test'}:
        raise DatasetError(f'{root}: has test/ but no training images: add '
                           f'{root / "train"}/<class_name>/ or '
                           f'{root / "clients"}/<folder>/<class_name>/')


def _flatten(classes: dict[str, list[Path]],
             names: tuple[str, ...]) -> tuple[tuple[Path, ...], np.ndarray]:
    label = {name: i for i, name in enumerate(names)}
    pairs = [(path, label[name]) for name in sorted(classes) for path in classes[name]]
    return tuple(p for p, _ in pairs), np.array([lab for _, lab in pairs], np.int64)


def _read_images(files: Sequence[Path], image_px: int, channels: int) -> np.ndarray:
    """The files read with OpenCV as uint8 N×C×image_px×image_px (see load_image_folder)."""
    import cv2

    if image_px < 1:
        raise DatasetError(f'image_px must be >= 1, got {image_px}')
    if channels not in (1, 3):
        raise DatasetError(f'channels must be 1 or 3, got {channels}')
    images = np.empty((len(files), channels, image_px, image_px), np.uint8)
    flag = cv2.IMREAD_COLOR if channels == 3 else cv2.IMREAD_GRAYSCALE
    for i, path in enumerate(files):
        image = cv2.imread(str(path), flag)
        if image is None or image.size == 0:
            raise DatasetError(f'{path}: cannot read the image (corrupt or unsupported format)')
        shrinking = image.shape[0] >= image_px and image.shape[1] >= image_px
        image = cv2.resize(image, (image_px, image_px),
                           interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
        if channels == 3:
            images[i] = cv2.cvtColor(image, cv2.COLOR_BGR2RGB).transpose(2, 0, 1)
        else:
            images[i, 0] = image
    return images


def load_image_folder(root: str | Path, image_px: int = 32, channels: int = 3,
                      split: str = 'train') -> Dataset:
    """The user's own images (layouts: :func:`scan_image_folder`): split 'train' or 'test';
    'train' of a root of class folders (no split of its own) is every image.

    Class names are the class folder names, sorted; labels follow that order. Files are read
    in sorted order with OpenCV, converted to RGB (channels=3) or grayscale (channels=1) and
    resized to image_px × image_px without keeping the aspect ratio (area interpolation when
    shrinking, bilinear when enlarging). Returns uint8 N×C×image_px×image_px.
    """
    return scan_image_folder(root).load(split, image_px, channels)


# --- registry --------------------------------------------------------------------------------

DatasetLoader = Callable[..., Dataset]
"""A function that builds a Dataset from keyword arguments."""

_LOADERS: dict[str, DatasetLoader] = {
    'fashion_mnist': load_fashion_mnist,
    'digits': load_digits,
    'image_folder': load_image_folder,
}


def register_dataset(name: str, loader: DatasetLoader, replace: bool = False) -> None:
    """Make ``loader`` available as ``load_dataset(name, ...)`` (the hook for other sources)."""
    if not name:
        raise ValueError('dataset name must not be empty')
    if name in _LOADERS and not replace:
        raise ValueError(f'dataset {name!r} is already registered; pass replace=True')
    _LOADERS[name] = loader


def dataset_names() -> tuple[str, ...]:
    """Registered dataset names, sorted."""
    return tuple(sorted(_LOADERS))


def load_dataset(name: str, **kwargs) -> Dataset:
    """Load the registered dataset ``name`` with the loader's keyword arguments."""
    if name not in _LOADERS:
        raise DatasetError(f'dataset {name!r} unknown; choices: {", ".join(dataset_names())}')
    return _LOADERS[name](**kwargs)


# --- splits ----------------------------------------------------------------------------------

def train_test_split_stratified(dataset: Dataset, test_fraction: float,
                                seed: int) -> tuple[Dataset, Dataset]:
    """Split into (train, test) with every class divided in the same proportion.

    The test set gets ``round(N * test_fraction)`` samples in all. Each class gets
    ``floor(n_c * test_fraction)``, and the samples left over go one each to the classes with
    the largest fractional remainders (ties: lower class first). Which samples of a class go
    to test is drawn with ``seed``. Both parts keep the original sample order.
    """
    if not (0.0 < test_fraction < 1.0):
        raise ValueError(f'test_fraction must be in (0, 1), got {test_fraction}')
    counts = dataset.class_counts()
    quotas = counts * test_fraction
    per_class = np.floor(quotas).astype(np.int64)
    leftover = int(round(len(dataset) * test_fraction)) - int(per_class.sum())
    remainders = quotas - per_class
    order = np.lexsort((np.arange(len(counts)), -remainders))
    for c in order:
        if leftover <= 0:
            break
        if per_class[c] < counts[c]:
            per_class[c] += 1
            leftover -= 1
    rng = np.random.default_rng(seed)
    is_test = np.zeros(len(dataset), bool)
    for c in range(dataset.num_classes):
        members = np.flatnonzero(dataset.labels == c)
        is_test[rng.permutation(members)[:per_class[c]]] = True
    return dataset.subset(~is_test), dataset.subset(is_test)
