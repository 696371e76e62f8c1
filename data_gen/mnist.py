"""MNIST, the handwritten digits, from the widely used ``mnist.npz`` archive.

The archive (the file most tutorials load) holds four uint8 arrays:

- ``x_train``: (60000, 28, 28) images, pixels 0..255;
- ``y_train``: (60000,) labels 0..9;
- ``x_test``: (10000, 28, 28) images;
- ``y_test``: (10000,) labels.

``load_mnist()`` looks for it in the path you pass, then in ``$SGRAD_DATA_DIR``, then in the
per-user cache, and downloads it into the cache (about 11 MB, once) if none has it.  Every
archive is checked for the layout above; with ``verify=True`` (the default) its arrays must
also be the real MNIST's, byte for byte: the SHA-256 of each array's raw bytes, which does not
depend on how the archive was compressed.

``prepare_mnist()`` turns the raw arrays into what a network trains on (floats in [0, 1],
images flattened to (n, 784), integer labels); ``one_hot()`` turns labels into (n, 10) targets.
"""

import hashlib
import os
import pathlib
import shutil
import tempfile
from typing import IO, Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .checks import Seed, check_bool, check_integer, make_rng

DEFAULT_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
FILENAME = "mnist.npz"
DATA_DIR_VARIABLE = "SGRAD_DATA_DIR"
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10
ZIP_SIGNATURE, NPY_SIGNATURE = b"PK", b"\x93NUMPY"  # the first bytes of an .npz (a zip file) and of an .npy file
DOWNLOAD_TIMEOUT = 60  # seconds a stalled connection may stay silent before the download gives up

# hashlib.sha256(a.tobytes()).hexdigest() of each array of the real archive.
SHA256 = {
    "x_train": "741c988805d008ac6e4c904b69001ba184c24b2c540a4ef403f4c71b676cf757",
    "y_train": "1feba77c54802fa5339a11837ea4b2866434b83314ec45192930f1df69120c13",
    "x_test": "6d87418db22cc8025d05968bec9bd5c3932904b23485740db143a061a2c9d161",
    "y_test": "ddeff807876a9661a1110d45c266c86239a3a1b7d37da0c3716a7a683c852ff5",
}


class MnistData(NamedTuple):
    """The four MNIST arrays; unpacks as ``x_train, y_train, x_test, y_test``.

    From ``load_mnist``: uint8 images (n, 28, 28) and uint8 labels (n,).
    From ``prepare_mnist``: float images (n, 784) or (n, 28, 28) in [0, 1] and int64 labels (n,).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


class MnistNotFoundError(FileNotFoundError):
    """No ``mnist.npz`` in any place ``load_mnist`` looked, and no download."""


def default_cache_dir() -> pathlib.Path:
    """The per-user cache folder: ``$XDG_CACHE_HOME/sgrad``, or ``~/.cache/sgrad``."""
    base: str | pathlib.Path = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG specification says to ignore a relative XDG_CACHE_HOME.
    if not os.path.isabs(base):
        base = pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "sgrad"


def load_mnist(path: str | os.PathLike[str] | None = None, *, verify: bool = True, download: bool = True,
               url: str = DEFAULT_URL, cache_dir: str | os.PathLike[str] | None = None) -> MnistData:
    """The raw MNIST arrays: an ``MnistData`` of uint8 ``x_train, y_train, x_test, y_test``.

    Where it looks, in order:

    1. ``path``, if given: an ``.npz`` file, or a folder holding ``mnist.npz``.  Nothing else
       is tried, so a mistyped path fails instead of silently loading another file.
    2. ``$SGRAD_DATA_DIR/mnist.npz``.
    3. ``cache_dir/mnist.npz``; ``cache_dir`` defaults to ``default_cache_dir()``.
    4. ``url``, downloaded into ``cache_dir`` when ``download`` is true.  The download goes to
       a temporary file in the same folder and is renamed to ``mnist.npz`` only once it has
       passed the checks below, so the cache never holds a half or unchecked file.

    Checks: the archive must hold the four arrays in the layout of the module docstring (any
    number of examples), or ``ValueError`` says what is wrong with which file.  With
    ``verify=True`` the arrays must also be the real MNIST's (``SHA256``); pass
    ``verify=False`` for an archive of your own in the same layout.

    Raises ``MnistNotFoundError`` (a ``FileNotFoundError``) naming every place it looked and
    how to provide the file.
    """
    verify = check_bool(verify, "verify")
    download = check_bool(download, "download")
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be the path of an {FILENAME} archive or of a folder holding one, "
                            f"as a str or pathlib.Path; got {type(path).__name__}")
        return _load_given_path(pathlib.Path(path).expanduser(), verify)

    looked = []
    data_dir = os.environ.get(DATA_DIR_VARIABLE)
    if data_dir:
        in_data_dir = pathlib.Path(data_dir).expanduser() / FILENAME
        if in_data_dir.is_file():
            return _read_archive(in_data_dir, verify, advice=(
                f"Replace it with a good copy, or unset {DATA_DIR_VARIABLE} to use the cache."))
        looked.append(f"{in_data_dir} (from ${DATA_DIR_VARIABLE}): no such file")
    else:
        looked.append(f"${DATA_DIR_VARIABLE}: not set")

    cache_dir = default_cache_dir() if cache_dir is None else pathlib.Path(cache_dir).expanduser()
    cached = cache_dir / FILENAME
    if cached.is_file():
        return _read_archive(cached, verify, advice=(
            "Delete it and call load_mnist() again to download a fresh copy."))
    looked.append(f"{cached} (the cache): no such file")

    if not download:
        looked.append(f"{url}: not tried (download=False)")
    else:
        try:
            partial = _fetch(url, cache_dir)
        except OSError as error:
            looked.append(f"{url}: download failed ({error})")
        else:
            return _install(partial, cached, url, verify)

    places = "\n".join(f"  - {place}" for place in looked)
    raise MnistNotFoundError(
        f"MNIST ({FILENAME}) not found. Looked at:\n{places}\n"
        f"Provide it in any one of these ways:\n"
        f"  - pass its path: load_mnist('/path/to/{FILENAME}')\n"
        f"  - set {DATA_DIR_VARIABLE} to a folder that holds {FILENAME}\n"
        f"  - put {FILENAME} into {cache_dir}, or call load_mnist() while online to download it there"
    )


def prepare_mnist(data: MnistData, *, dtype: DTypeLike = np.float32, flatten: bool = True, subset: int | None = None,
                  seed: Seed = None, rng: np.random.Generator | None = None) -> MnistData:
    """The arrays a network trains on, as an ``MnistData``.

    data: what ``load_mnist`` returns (uint8 images (n, 28, 28), uint8 labels (n,)).

    - images become ``dtype`` floats ``pixel / 255`` in [0, 1], of shape (n, 784), or
      (n, 28, 28) with ``flatten=False``;
    - labels become int64 classes 0..9 of shape (n,); ``one_hot`` makes (n, 10) targets of them;
    - ``subset=k`` keeps k training examples, drawn without replacement with ``seed`` or
      ``rng`` and kept in their original order; the test set is always whole.

    Only the kept images are converted: the whole training set is 188 MB in float32 and
    376 MB in float64, so ask for float64 only if you need it.
    """
    if not isinstance(data, tuple) or len(data) != len(MnistData._fields):
        raise TypeError(
            "data must be the MnistData that load_mnist() returns "
            f"(x_train, y_train, x_test, y_test); got {type(data).__name__}"
        )
    data = MnistData(*data)
    problem = _layout_problem(data._asdict())
    if problem:
        raise ValueError(f"prepare_mnist takes the raw arrays that load_mnist() returns, but {problem}")
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"dtype must be a floating type such as np.float32; got {dtype}")
    flatten = check_bool(flatten, "flatten")

    x_train, y_train = data.x_train, data.y_train
    if subset is not None:
        subset = check_integer(subset, "subset")
        if subset > len(x_train):
            raise ValueError(
                f"subset must be at most the {len(x_train)} training examples; got {subset}")
        kept = np.sort(make_rng(seed, rng).choice(len(x_train), size=subset, replace=False))
        x_train, y_train = x_train[kept], y_train[kept]
    elif seed is not None or rng is not None:
        raise ValueError("seed and rng choose the examples of a subset; pass subset=k as well")

    return MnistData(_scale(x_train, dtype, flatten), y_train.astype(np.int64),
                     _scale(data.x_test, dtype, flatten), data.y_test.astype(np.int64))


def one_hot(labels: ArrayLike, num_classes: int = NUM_CLASSES, *, dtype: DTypeLike = np.float32) -> np.ndarray:
    """Targets for class labels: (n,) integers 0..num_classes-1 -> (n, num_classes), a 1 per row."""
    num_classes = check_integer(num_classes, "num_classes")
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"labels must be integer classes of shape (n,); got dtype {labels.dtype}, shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"labels must lie in 0..{num_classes - 1}; got values from {labels.min()} to {labels.max()}")
    targets = np.zeros((len(labels), num_classes), dtype=dtype)
    targets[np.arange(len(labels)), labels] = 1
    return targets


def _scale(images: np.ndarray, dtype: np.dtype, flatten: bool) -> np.ndarray:
    """uint8 images -> ``dtype`` in [0, 1], (n, 784) if ``flatten``; no float64 copy on the way."""
    scaled = images.reshape(len(images), -1) if flatten else images
    scaled = scaled.astype(dtype)
    scaled /= 255
    return scaled


def _load_given_path(path: pathlib.Path, verify: bool) -> MnistData:
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        raise MnistNotFoundError(
            f"no file at {path}. Pass the path of an {FILENAME} archive, or call load_mnist() "
            f"without a path to look in ${DATA_DIR_VARIABLE} and the cache ({default_cache_dir()})."
        )
    return _read_archive(path, verify, advice="Replace it with a good copy of the archive.")


def _fetch(url: str, folder: pathlib.Path) -> pathlib.Path:
    """Download ``url`` into a new temporary file in ``folder``; return the file's path.

    Raises ``OSError`` if the download fails or stops short; no temporary file is left then.
    """
    # Imported here, not at the top: they take longer to import than the rest of data_gen,
    # and only a download needs them.
    import http.client
    import urllib.request

    folder.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{FILENAME}.", suffix=".part", dir=folder)
    partial = pathlib.Path(name)
    try:
        with os.fdopen(handle, "wb") as out, \
                urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            shutil.copyfileobj(response, out)
            announced = response.headers.get("Content-Length")
            if announced is not None and out.tell() != int(announced):
                raise OSError(f"the connection closed after {out.tell()} of {announced} bytes")
    except http.client.HTTPException as error:  # a malformed or cut HTTP response
        partial.unlink()
        raise OSError(f"broken HTTP response ({type(error).__name__}: {error})") from error
    except BaseException:
        partial.unlink()
        raise
    return partial


def _install(partial: pathlib.Path, destination: pathlib.Path, url: str, verify: bool) -> MnistData:
    """Check a finished download and rename it to ``destination``; delete it if it fails."""
    try:
        data = _read_archive(partial, verify, name=f"the file downloaded from {url}", advice=(
            "It has been deleted; nothing was saved in the cache. "
            f"Check the url, or download {FILENAME} yourself and pass its path."))
        os.replace(partial, destination)
    finally:
        partial.unlink(missing_ok=True)
    return data


def _read_archive(path: pathlib.Path, verify: bool, *, advice: str, name: str | None = None) -> MnistData:
    """The checked arrays of the archive at ``path``; ``ValueError`` if it is unusable.

    The error calls the file ``name`` (default: its path) and ends with ``advice``.
    """
    # Damaged bytes make np.load and zipfile raise almost anything (BadZipFile, zlib.error,
    # EOFError, ValueError, NotImplementedError, OSError from a bad seek, ...): all mean the same.
    with open(path, "rb") as file:
        try:
            arrays, problem = _load_arrays(file)
        except Exception as error:
            arrays, problem = None, (f"it cannot be read as a NumPy .npz archive, so it is probably "
                                     f"truncated or damaged ({type(error).__name__}: {error})")
    if arrays is not None:
        problem = _layout_problem(arrays)
        if problem is None and verify:
            problem = _hash_problem(arrays)
    if problem or arrays is None:
        raise ValueError(f"{name or path} is not a usable {FILENAME}: {problem}. {advice}")
    return MnistData(**arrays)


def _load_arrays(file: IO[bytes]) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """``(arrays, None)`` with the four arrays read into memory, or ``(None, problem)``."""
    # np.load would take any other file for a pickle, and its error would suggest unpickling it.
    head = file.read(len(NPY_SIGNATURE))
    file.seek(0)
    if not head.startswith((ZIP_SIGNATURE, NPY_SIGNATURE)):
        raise ValueError(f"an .npz archive is a zip file, starting with {ZIP_SIGNATURE!r}; this one starts with {head!r}")
    # np.load is given an open file, not a path: on a damaged archive it would leave its own open.
    loaded = np.load(file, allow_pickle=False)
    if isinstance(loaded, np.ndarray):
        return None, "it holds a single .npy array, not an .npz archive of four arrays"
    with loaded as archive:
        missing = [key for key in MnistData._fields if key not in archive.files]
        if missing:
            return None, (f"it has no {', '.join(missing)} (it holds: "
                          f"{', '.join(archive.files) or 'nothing'})")
        return {key: archive[key] for key in MnistData._fields}, None


def _layout_problem(arrays: dict[str, Any]) -> str | None:
    """What is wrong with the four arrays' shapes, dtypes and labels, or None."""
    for split in ("train", "test"):
        images, labels = arrays[f"x_{split}"], arrays[f"y_{split}"]
        for name, array in ((f"x_{split}", images), (f"y_{split}", labels)):
            if not isinstance(array, np.ndarray):
                return f"{name} is a {type(array).__name__}, expected a NumPy array"
            if array.dtype != np.uint8:
                return f"{name} has dtype {array.dtype}, expected uint8"
        if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE or len(images) == 0:
            return f"x_{split} has shape {images.shape}, expected (n, 28, 28) with n >= 1"
        if labels.shape != (len(images),):
            return f"y_{split} has shape {labels.shape}, expected ({len(images)},), a label per image"
        if labels.max() >= NUM_CLASSES:
            return f"y_{split} holds labels up to {labels.max()}, expected 0..{NUM_CLASSES - 1}"
    return None


def _hash_problem(arrays: dict[str, np.ndarray]) -> str | None:
    """Which array differs from the real MNIST's, or None."""
    for key, expected in SHA256.items():
        # hashlib reads the array's buffer directly: the hash of a.tobytes() without the copy.
        digest = hashlib.sha256(np.ascontiguousarray(arrays[key]).data).hexdigest()
        if digest != expected:
            return (f"its {key} is not the real MNIST's (SHA-256 {digest[:12]}..., expected "
                    f"{expected[:12]}...); if it is your own archive in MNIST's layout, pass verify=False")
    return None
