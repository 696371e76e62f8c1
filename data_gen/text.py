"""A plain-text corpus for character-level language modelling, and the batches a recurrent net trains on.

``load_text()`` looks for the corpus in the path you pass, then in ``$SGRAD_DATA_DIR``, then in
the per-user cache, and downloads it into the cache if none has it and a SHA-256 for the download
is known.  The default corpus is Tiny Shakespeare (about 1 MB of public-domain plays), saved as
``tinyshakespeare.txt``.  Any UTF-8 text file of your own works the same way through ``path``.

From a text to batches:

- ``vocabulary(text)``: the sorted distinct characters, a str of length V;
- ``encode(text, vocab)`` -> int64 ids (n,), ``decode(ids, vocab)`` -> str;
- ``split_ids(ids, validation_fraction)``: the first part for training, the last for validation;
- ``stream_rows(ids, batch)``: the ids cut into ``batch`` contiguous streams, (batch, length), for
  truncated BPTT that carries each row's state from one window to the next;
- ``random_windows(ids, batch, time, seed=...)``: (batch, time) inputs and the (batch, time) next
  characters as targets, each row a window starting at a random place;
- ``one_hot_ids(ids, V)``: (..., V) one-hot rows of any array of ids, e.g. (batch, time, V).
"""

import hashlib
import os
import pathlib
import shutil
import tempfile

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .checks import Seed, check_bool, check_integer, make_rng
from .mnist import DATA_DIR_VARIABLE, DOWNLOAD_TIMEOUT, default_cache_dir

DEFAULT_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
FILENAME = "tinyshakespeare.txt"
# hashlib.sha256 of the file at DEFAULT_URL (1,115,394 bytes), as TensorFlow Datasets records it for that url in
# its url_checksums/tiny_shakespeare.txt.  sgrad's machines could not reach the url to check it themselves;
# a mismatch stops the download and keeps nothing.
DEFAULT_SHA256: str | None = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


class TextNotFoundError(FileNotFoundError):
    """No corpus in any place ``load_text`` looked, and no download."""


def load_text(path: str | os.PathLike[str] | None = None, *, download: bool = True, url: str = DEFAULT_URL,
              sha256: str | None = DEFAULT_SHA256, cache_dir: str | os.PathLike[str] | None = None) -> str:
    """The corpus as one str.

    Where it looks, in order:

    1. ``path``, if given: a UTF-8 text file, or a folder holding ``tinyshakespeare.txt``.  Nothing
       else is tried, so a mistyped path fails instead of silently loading another text.
    2. ``$SGRAD_DATA_DIR/tinyshakespeare.txt``.
    3. ``cache_dir/tinyshakespeare.txt``; ``cache_dir`` defaults to the per-user cache
       (``$XDG_CACHE_HOME/sgrad`` or ``~/.cache/sgrad``).
    4. ``url``, downloaded into ``cache_dir`` when ``download`` is true and ``sha256`` (hex) is
       given: the file must have that SHA-256, or it is deleted and ``ValueError`` says so.  It goes
       to a temporary file first and is renamed only once checked: the cache never holds a bad file.

    Raises ``TextNotFoundError`` (a ``FileNotFoundError``) naming every place it looked and how to
    provide the text; ``ValueError`` for a file that is empty or not UTF-8.
    """
    download = check_bool(download, "download")
    if sha256 is not None and not (isinstance(sha256, str) and len(sha256) == 64
                                   and all(c in "0123456789abcdef" for c in sha256.lower())):
        raise ValueError(f"sha256 must be 64 hexadecimal digits (hashlib.sha256(data).hexdigest()); got {sha256!r}")
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be the path of a text file or of a folder holding {FILENAME}, "
                            f"as a str or pathlib.Path; got {type(path).__name__}")
        given = pathlib.Path(path).expanduser()
        if given.is_dir():
            given = given / FILENAME
        if not given.is_file():
            raise TextNotFoundError(f"no file at {given}. Pass the path of a UTF-8 text file, or call load_text() "
                                    f"without a path to look in ${DATA_DIR_VARIABLE} and the cache.")
        return _read_text(given.read_bytes(), str(given))

    looked = []
    data_dir = os.environ.get(DATA_DIR_VARIABLE)
    if data_dir:
        in_data_dir = pathlib.Path(data_dir).expanduser() / FILENAME
        if in_data_dir.is_file():
            return _read_text(in_data_dir.read_bytes(), str(in_data_dir))
        looked.append(f"{in_data_dir} (from ${DATA_DIR_VARIABLE}): no such file")
    else:
        looked.append(f"${DATA_DIR_VARIABLE}: not set")

    folder = default_cache_dir() if cache_dir is None else pathlib.Path(cache_dir).expanduser()
    cached = folder / FILENAME
    if cached.is_file():
        return _read_text(cached.read_bytes(), str(cached))
    looked.append(f"{cached} (the cache): no such file")

    if not download:
        looked.append(f"{url}: not tried (download=False)")
    elif sha256 is None:
        looked.append(f"{url}: not tried (no SHA-256 known to check it against; pass sha256=...)")
    else:
        try:
            return _download(url, sha256.lower(), cached)
        except OSError as error:
            looked.append(f"{url}: download failed ({error})")

    places = "\n".join(f"  - {place}" for place in looked)
    raise TextNotFoundError(
        f"the text corpus ({FILENAME}) was not found. Looked at:\n{places}\n"
        f"Provide it in any one of these ways:\n"
        f"  - pass the path of any UTF-8 text file: load_text('/path/to/text.txt')\n"
        f"  - set {DATA_DIR_VARIABLE} to a folder that holds {FILENAME}\n"
        f"  - put {FILENAME} into {folder}, or call load_text() while online to download it there "
        f"(for a url of your own, with sha256=...)"
    )


def vocabulary(text: str) -> str:
    """The distinct characters of ``text``, sorted: a str of length V; character ``vocab[i]`` has id i."""
    _code_points(text, "text")
    return "".join(sorted(set(text)))


def encode(text: str, vocab: str) -> np.ndarray:
    """The ids of ``text``'s characters in ``vocab``: int64 of shape (len(text),)."""
    codes, table = _code_points(text, "text"), _code_points(vocab, "vocab")
    if len(np.unique(table)) != len(table) or np.any(np.diff(table.astype(np.int64)) < 0):
        raise ValueError("vocab must be sorted distinct characters, as vocabulary(text) returns")
    ids = np.searchsorted(table, codes)
    found = table[np.minimum(ids, len(table) - 1)] == codes
    if not found.all():
        missing = sorted({chr(c) for c in codes[~found]})
        raise ValueError(f"text holds characters that are not in vocab: {''.join(missing)!r}; "
                         f"build the vocabulary from the whole corpus (vocabulary(text))")
    return ids.astype(np.int64)


def decode(ids: ArrayLike, vocab: str) -> str:
    """The text of integer ``ids`` (n,) in ``vocab``."""
    table = _code_points(vocab, "vocab")
    ids = _check_ids(ids, "ids", len(table))
    if ids.ndim != 1:
        raise ValueError(f"ids must have shape (n,); got shape {ids.shape}")
    return table[ids].astype("<u4").tobytes().decode("utf-32-le")


def split_ids(ids: ArrayLike, validation_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """``(train, validation)``: the first ``1 - validation_fraction`` of ``ids`` (n,), then the rest.

    A contiguous split, not a shuffled one: held-out text is text the model has not read.
    """
    ids = _check_ids(ids, "ids", None)
    if ids.ndim != 1:
        raise ValueError(f"ids must have shape (n,); got shape {ids.shape}")
    if isinstance(validation_fraction, bool) or not isinstance(validation_fraction, (int, float)) \
            or not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be a number between 0 and 1 (e.g. 0.1); got {validation_fraction!r}")
    cut = round(len(ids) * (1 - validation_fraction))
    if cut < 2 or len(ids) - cut < 2:
        raise ValueError(f"{len(ids)} characters leave fewer than 2 for one side of the split at "
                         f"validation_fraction={validation_fraction}; use a longer text")
    return ids[:cut], ids[cut:]


def stream_rows(ids: ArrayLike, batch: int) -> np.ndarray:
    """``ids`` (n,) cut into ``batch`` contiguous streams: (batch, n // batch); the last n % batch are dropped.

    Row r is ``ids[r * length:(r + 1) * length]``: reading the columns window by window, each row
    goes on where it stopped, so a state carried per row sees one continuous text.
    """
    ids = _check_ids(ids, "ids", None)
    batch = check_integer(batch, "batch")
    if ids.ndim != 1:
        raise ValueError(f"ids must have shape (n,); got shape {ids.shape}")
    length = len(ids) // batch
    if length < 2:
        raise ValueError(f"{len(ids)} ids make streams of {length} characters for batch={batch}; "
                         f"need at least 2 (an input and its next character): use a smaller batch or a longer text")
    return ids[:batch * length].reshape(batch, length)


def random_windows(ids: ArrayLike, batch: int, time: int, *, seed: Seed = None,
                   rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: ``batch`` windows of ``time`` ids from random places in ``ids``, and their next characters.

    x[b, t] = ids[s_b + t] and y[b, t] = ids[s_b + t + 1], both int64 (batch, time), with the starts
    s_b drawn uniformly (with ``seed`` or ``rng``) from the places where a whole window fits.
    """
    ids = _check_ids(ids, "ids", None)
    batch, time = check_integer(batch, "batch"), check_integer(time, "time")
    if ids.ndim != 1 or len(ids) < time + 1:
        raise ValueError(f"ids must have shape (n,) with n >= time + 1 = {time + 1}; got shape {ids.shape}")
    starts = make_rng(seed, rng).integers(0, len(ids) - time, size=batch)
    positions = starts[:, None] + np.arange(time)
    return ids[positions], ids[positions + 1]


def one_hot_ids(ids: ArrayLike, vocab_size: int, *, dtype: DTypeLike = np.float64) -> np.ndarray:
    """One-hot rows of integer ids of any shape S: ``(*S, vocab_size)``, a 1 at each id."""
    vocab_size = check_integer(vocab_size, "vocab_size")
    ids = _check_ids(ids, "ids", vocab_size)
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"dtype must be a floating type such as np.float64; got {dtype}")
    return (ids[..., None] == np.arange(vocab_size)).astype(dtype)


def _code_points(text: str, name: str) -> np.ndarray:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str; got {type(text).__name__}")
    if not text:
        raise ValueError(f"{name} is empty; it must hold at least one character")
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


def _check_ids(ids: ArrayLike, name: str, below: int | None) -> np.ndarray:
    array = np.asarray(ids)
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must be integer character ids (e.g. from encode); got dtype {array.dtype}")
    if array.size and (array.min() < 0 or (below is not None and array.max() >= below)):
        limit = "" if below is None else f" and below {below}, the vocabulary's size"
        raise ValueError(f"{name} must be >= 0{limit}; got values from {array.min()} to {array.max()}")
    return array


def _read_text(data: bytes, name: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{name} is not UTF-8 text ({error}); pass a plain UTF-8 text file") from error
    if not text:
        raise ValueError(f"{name} is empty; pass a text file with something in it")
    return text


def _download(url: str, sha256: str, destination: pathlib.Path) -> str:
    """Fetch ``url`` to a temporary file beside ``destination``, check it, rename it; OSError if the fetch fails."""
    # Imported here: only a download needs them, and they are slow to import.
    import http.client
    import urllib.request

    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{FILENAME}.", suffix=".part", dir=destination.parent)
    partial = pathlib.Path(name)
    try:
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            shutil.copyfileobj(response, out)
        data = partial.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            raise ValueError(f"the file downloaded from {url} has SHA-256 {digest[:12]}..., expected "
                             f"{sha256[:12]}...; it has been deleted and nothing was saved in the cache. "
                             f"Check the url and the hash, or download the text yourself and pass its path.")
        text = _read_text(data, f"the file downloaded from {url}")
        os.replace(partial, destination)
    except http.client.HTTPException as error:  # a malformed or cut HTTP response
        raise OSError(f"broken HTTP response ({type(error).__name__}: {error})") from error
    finally:
        partial.unlink(missing_ok=True)
    return text
