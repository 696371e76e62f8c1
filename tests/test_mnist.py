"""The MNIST loader: where it looks, how it downloads, what it accepts, what it hands on.

The tests write small archives of their own in MNIST's layout (uint8 images (n, 28, 28),
uint8 labels (n,)), so they need no data and no network: downloads come from file:// URLs
or from an HTTP server on 127.0.0.1, and any other connection fails the test.  One test
reads the real archive, when $SGRAD_DATA_DIR holds mnist.npz.
"""

import hashlib
import http.server
import io
import os
import pathlib
import socket
import threading

import numpy as np
import pytest

from data_gen import mnist
from data_gen.mnist import MnistData, MnistNotFoundError, load_mnist, one_hot, prepare_mnist

# Read before the fixture below clears the variable for every test.
REAL_DATA_DIR = os.environ.get("SGRAD_DATA_DIR")


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No $SGRAD_DATA_DIR, a cache under tmp_path, no proxy, and no connection beyond 127.0.0.1."""
    monkeypatch.delenv("SGRAD_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("no_proxy", "*")
    connect = socket.create_connection

    def local_only(address, *args, **kwargs):
        if address[0] not in ("127.0.0.1", "localhost"):
            pytest.fail(f"a test tried to reach {address}; tests may only connect to 127.0.0.1")
        return connect(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", local_only)


def small_arrays(seed=0, num_train=30, num_test=12):
    """Arrays in MNIST's layout, random pixels, every class among the labels."""
    rng = np.random.default_rng(seed)
    return {
        "x_train": rng.integers(0, 256, size=(num_train, 28, 28), dtype=np.uint8),
        "y_train": rng.permutation(np.arange(num_train) % 10).astype(np.uint8),
        "x_test": rng.integers(0, 256, size=(num_test, 28, 28), dtype=np.uint8),
        "y_test": rng.permutation(np.arange(num_test) % 10).astype(np.uint8),
    }


def write_archive(path, arrays):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return path


def archive_bytes(arrays):
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def assert_same_data(data, arrays):
    assert isinstance(data, MnistData)
    for key, expected in arrays.items():
        np.testing.assert_array_equal(getattr(data, key), expected, err_msg=key)
        assert getattr(data, key).dtype == expected.dtype, key


def files_in(folder):
    return sorted(p.name for p in pathlib.Path(folder).iterdir()) if pathlib.Path(folder).exists() else []


class LocalServer:
    """An HTTP server on 127.0.0.1, in a thread, that serves the bodies it is given."""

    def __init__(self, server):
        self.server = server

    def url(self, path):
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def serve(self, path, body, announced=None):
        """Serve ``body`` at ``path``, announcing ``announced`` bytes (default: all of them)."""
        self.server.routes[path] = (body, len(body) if announced is None else announced)
        return self.url(path)


@pytest.fixture
def http_server():

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path not in self.server.routes:
                self.send_error(404)
                return
            body, announced = self.server.routes[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(announced))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.routes = {}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield LocalServer(server)
    server.shutdown()
    server.server_close()
    thread.join()


def closed_port_url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/mnist.npz"


# --- where it looks -------------------------------------------------------------------


@pytest.fixture
def three_places(tmp_path, monkeypatch):
    """Different archives at an explicit path, in $SGRAD_DATA_DIR and in the cache."""
    places = {
        "explicit": (tmp_path / "mine" / "digits.npz", small_arrays(seed=1)),
        "data_dir": (tmp_path / "data" / "mnist.npz", small_arrays(seed=2)),
        "cache": (tmp_path / "xdg-cache" / "sgrad" / "mnist.npz", small_arrays(seed=3)),
    }
    for path, arrays in places.values():
        write_archive(path, arrays)
    monkeypatch.setenv("SGRAD_DATA_DIR", str(tmp_path / "data"))
    return places


def test_an_explicit_path_beats_the_data_dir_and_the_cache(three_places):
    path, arrays = three_places["explicit"]
    assert_same_data(load_mnist(path, verify=False, download=False), arrays)


def test_the_data_dir_beats_the_cache(three_places):
    assert_same_data(load_mnist(verify=False, download=False), three_places["data_dir"][1])


def test_the_cache_is_used_when_the_data_dir_is_unset(three_places, monkeypatch):
    monkeypatch.delenv("SGRAD_DATA_DIR")
    assert_same_data(load_mnist(verify=False, download=False), three_places["cache"][1])


def test_a_data_dir_without_mnist_npz_falls_through_to_the_cache(three_places, monkeypatch, tmp_path):
    monkeypatch.setenv("SGRAD_DATA_DIR", str(tmp_path / "empty"))
    assert_same_data(load_mnist(verify=False, download=False), three_places["cache"][1])


def test_an_explicit_path_may_be_a_folder_that_holds_mnist_npz(tmp_path):
    arrays = small_arrays(seed=4)
    write_archive(tmp_path / "folder" / "mnist.npz", arrays)
    assert_same_data(load_mnist(tmp_path / "folder", verify=False), arrays)


def test_a_missing_explicit_path_fails_instead_of_loading_another_file(three_places, tmp_path):
    typo = tmp_path / "mine" / "digit.npz"
    with pytest.raises(MnistNotFoundError, match="no file at") as raised:
        load_mnist(typo, verify=False)
    assert str(typo) in str(raised.value)


def test_the_cache_dir_argument_replaces_the_default_cache(three_places, monkeypatch, tmp_path):
    monkeypatch.delenv("SGRAD_DATA_DIR")
    arrays = small_arrays(seed=5)
    write_archive(tmp_path / "elsewhere" / "mnist.npz", arrays)
    assert_same_data(load_mnist(verify=False, download=False, cache_dir=tmp_path / "elsewhere"), arrays)


def test_the_default_cache_is_xdg_cache_home_then_home_dot_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert mnist.default_cache_dir() == tmp_path / "xdg" / "sgrad"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert mnist.default_cache_dir() == tmp_path / "home" / ".cache" / "sgrad"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec says: ignore it
    assert mnist.default_cache_dir() == tmp_path / "home" / ".cache" / "sgrad"


# --- downloading ------------------------------------------------------------------------


def test_a_download_from_a_file_url_is_saved_in_the_cache(tmp_path):
    arrays = small_arrays(seed=6)
    source = write_archive(tmp_path / "server" / "mnist.npz", arrays)
    data = load_mnist(verify=False, url=source.as_uri())
    assert_same_data(data, arrays)
    assert files_in(tmp_path / "xdg-cache" / "sgrad") == ["mnist.npz"]


def test_a_download_over_http_is_saved_in_the_cache(tmp_path, http_server):
    arrays = small_arrays(seed=7)
    url = http_server.serve("/tf-keras-datasets/mnist.npz", archive_bytes(arrays))
    assert_same_data(load_mnist(verify=False, url=url, cache_dir=tmp_path / "cache"), arrays)
    assert files_in(tmp_path / "cache") == ["mnist.npz"]


def test_the_second_load_reads_the_cache_instead_of_downloading_again(tmp_path):
    arrays = small_arrays(seed=8)
    source = write_archive(tmp_path / "server" / "mnist.npz", arrays)
    load_mnist(verify=False, url=source.as_uri())
    source.unlink()
    assert_same_data(load_mnist(verify=False, url=source.as_uri()), arrays)


def test_a_download_that_fails_verification_is_deleted(tmp_path):
    source = write_archive(tmp_path / "server" / "mnist.npz", small_arrays(seed=9))
    with pytest.raises(ValueError, match="not the real MNIST") as raised:
        load_mnist(url=source.as_uri(), cache_dir=tmp_path / "cache")
    assert str(raised.value).startswith(f"the file downloaded from {source.as_uri()} is not a usable")
    assert "It has been deleted" in str(raised.value)
    assert files_in(tmp_path / "cache") == []


def test_a_damaged_download_is_deleted(tmp_path):
    source = tmp_path / "server" / "mnist.npz"
    source.parent.mkdir()
    source.write_bytes(archive_bytes(small_arrays(seed=10))[:5000])
    with pytest.raises(ValueError, match="truncated or damaged.*It has been deleted"):
        load_mnist(verify=False, url=source.as_uri(), cache_dir=tmp_path / "cache")
    assert files_in(tmp_path / "cache") == []


def test_an_interrupted_download_leaves_no_file_and_says_how_far_it_got(tmp_path, http_server):
    body = archive_bytes(small_arrays(seed=11))
    url = http_server.serve("/mnist.npz", body[: len(body) // 2], announced=len(body))
    with pytest.raises(MnistNotFoundError) as raised:
        load_mnist(verify=False, url=url, cache_dir=tmp_path / "cache")
    assert f"closed after {len(body) // 2} of {len(body)} bytes" in str(raised.value)
    assert files_in(tmp_path / "cache") == []


def test_download_false_never_downloads(tmp_path):
    source = write_archive(tmp_path / "server" / "mnist.npz", small_arrays(seed=12))
    with pytest.raises(MnistNotFoundError, match=r"not tried \(download=False\)"):
        load_mnist(verify=False, download=False, url=source.as_uri(), cache_dir=tmp_path / "cache")
    assert files_in(tmp_path / "cache") == []


# --- offline and missing ----------------------------------------------------------------


@pytest.fixture(params=["closed port", "missing file", "HTTP 404"])
def unreachable_url(request, tmp_path, http_server):
    if request.param == "closed port":
        return closed_port_url()
    if request.param == "missing file":
        return (tmp_path / "nowhere" / "mnist.npz").as_uri()
    return http_server.url("/mnist.npz")  # nothing served there


def test_offline_and_missing_names_every_place_it_looked_and_every_remedy(
        unreachable_url, monkeypatch, tmp_path):
    monkeypatch.setenv("SGRAD_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(FileNotFoundError) as raised:
        load_mnist(url=unreachable_url)
    message = str(raised.value)
    assert isinstance(raised.value, MnistNotFoundError)
    for place in (tmp_path / "data" / "mnist.npz", tmp_path / "xdg-cache" / "sgrad" / "mnist.npz"):
        assert str(place) in message
    assert f"{unreachable_url}: download failed" in message
    for remedy in ("load_mnist('/path/to/mnist.npz')", "set SGRAD_DATA_DIR",
                   f"put mnist.npz into {tmp_path / 'xdg-cache' / 'sgrad'}, or call load_mnist() while online"):
        assert remedy in message
    assert files_in(tmp_path / "xdg-cache" / "sgrad") == []


def test_the_not_found_error_says_when_sgrad_data_dir_is_not_set():
    with pytest.raises(MnistNotFoundError, match=r"\$SGRAD_DATA_DIR: not set"):
        load_mnist(download=False)


# --- damaged archives -------------------------------------------------------------------


def without(arrays, key):
    return {k: v for k, v in arrays.items() if k != key}


def replaced(arrays, key, value):
    return {**arrays, key: value}


DAMAGE = {
    "cut in half": lambda blob, a: blob[: len(blob) // 2],
    "random bytes": lambda blob, a: np.random.default_rng(0).bytes(len(blob)),
    "empty": lambda blob, a: b"",
    "a single .npy array": lambda blob, a: npy_bytes(a["x_train"]),
    "a missing key": lambda blob, a: archive_bytes(without(a, "y_test")),
    "flattened images": lambda blob, a: archive_bytes(replaced(a, "x_train", a["x_train"].reshape(-1, 784))),
    "float images": lambda blob, a: archive_bytes(replaced(a, "x_test", a["x_test"] / 255.0)),
    "int64 labels": lambda blob, a: archive_bytes(replaced(a, "y_train", a["y_train"].astype(np.int64))),
    "a label of 10": lambda blob, a: archive_bytes(replaced(a, "y_test", a["y_test"] + 1)),
    "a label short": lambda blob, a: archive_bytes(replaced(a, "y_train", a["y_train"][:-1])),
}
PROBLEM = {
    "cut in half": "truncated or damaged",
    "random bytes": "truncated or damaged",
    "empty": "truncated or damaged",
    "a single .npy array": "not an .npz archive",
    "a missing key": "it has no y_test (it holds: x_train, y_train, x_test)",
    "flattened images": "x_train has shape (30, 784), expected (n, 28, 28)",
    "float images": "x_test has dtype float64, expected uint8",
    "int64 labels": "y_train has dtype int64, expected uint8",
    "a label of 10": "y_test holds labels up to 10, expected 0..9",
    "a label short": "y_train has shape (29,), expected (30,)",
}


def npy_bytes(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_archive_raises_a_value_error_naming_the_file_and_the_problem(damage, tmp_path):
    arrays = small_arrays()
    path = tmp_path / "mnist.npz"
    path.write_bytes(DAMAGE[damage](archive_bytes(arrays), arrays))
    with pytest.raises(ValueError) as raised:
        load_mnist(path, verify=False)
    message = str(raised.value)
    assert message.startswith(f"{path} is not a usable mnist.npz: ")
    assert PROBLEM[damage] in message
    assert "Replace it with a good copy" in message


def test_a_damaged_archive_in_the_cache_is_kept_and_the_error_says_to_delete_it(tmp_path):
    cached = tmp_path / "xdg-cache" / "sgrad" / "mnist.npz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(archive_bytes(small_arrays())[:1000])
    with pytest.raises(ValueError, match="Delete it and call load_mnist"):
        load_mnist(verify=False, url=closed_port_url())
    assert cached.exists()


# --- verification -----------------------------------------------------------------------


def test_verify_rejects_an_archive_that_is_not_the_real_mnist_and_suggests_verify_false(tmp_path):
    path = write_archive(tmp_path / "mnist.npz", small_arrays())
    with pytest.raises(ValueError, match="its x_train is not the real MNIST's.*pass verify=False"):
        load_mnist(path)


def test_verify_false_accepts_an_archive_of_any_size_in_the_layout(tmp_path):
    arrays = small_arrays(num_train=3, num_test=1)
    data = load_mnist(write_archive(tmp_path / "mnist.npz", arrays), verify=False)
    assert_same_data(data, arrays)
    assert data.x_train.shape == (3, 28, 28) and data.y_test.shape == (1,)


def test_verification_hashes_the_arrays_so_compression_does_not_matter(tmp_path, monkeypatch):
    arrays = small_arrays()
    monkeypatch.setattr(mnist, "SHA256", {k: hashlib.sha256(a.tobytes()).hexdigest() for k, a in arrays.items()})
    np.savez(tmp_path / "plain.npz", **arrays)
    np.savez_compressed(tmp_path / "compressed.npz", **arrays)
    assert_same_data(load_mnist(tmp_path / "plain.npz"), arrays)
    assert_same_data(load_mnist(tmp_path / "compressed.npz"), arrays)
    arrays["y_test"][0] = (arrays["y_test"][0] + 1) % 10
    np.savez(tmp_path / "changed.npz", **arrays)
    with pytest.raises(ValueError, match="its y_test is not the real MNIST's"):
        load_mnist(tmp_path / "changed.npz")


# --- prepare_mnist and one_hot ----------------------------------------------------------


@pytest.fixture
def raw():
    arrays = small_arrays()
    return MnistData(**arrays)


def test_prepare_gives_float32_pixels_over_255_flattened_and_int64_labels(raw):
    x_train, y_train, x_test, y_test = prepare_mnist(raw)
    assert x_train.shape == (30, 784) and x_test.shape == (12, 784)
    assert x_train.dtype == np.float32 and x_test.dtype == np.float32
    np.testing.assert_array_equal(x_train, raw.x_train.reshape(30, 784).astype(np.float32) / np.float32(255))
    assert y_train.dtype == np.int64 and y_test.dtype == np.int64
    np.testing.assert_array_equal(y_train, raw.y_train)
    np.testing.assert_array_equal(y_test, raw.y_test)


def test_prepared_pixels_span_exactly_zero_to_one():
    arrays = small_arrays()
    arrays["x_train"][0, 0, :2] = [0, 255]
    x_train = prepare_mnist(MnistData(**arrays)).x_train
    assert x_train.min() == 0.0 and x_train.max() == 1.0


def test_prepare_keeps_square_images_without_flatten_and_float64_on_request(raw):
    data = prepare_mnist(raw, flatten=False, dtype=np.float64)
    assert data.x_train.shape == (30, 28, 28) and data.x_train.dtype == np.float64
    np.testing.assert_array_equal(data.x_test, raw.x_test / 255.0)


def test_prepare_refuses_a_flatten_that_is_not_a_bool(raw):
    with pytest.raises(TypeError, match="flatten must be True or False; got 'no' \\(str\\)"):
        prepare_mnist(raw, flatten="no")


def test_prepare_leaves_the_raw_arrays_unchanged(raw):
    before = [a.copy() for a in raw]
    prepare_mnist(raw, subset=10, seed=0)
    for a, b in zip(raw, before):
        np.testing.assert_array_equal(a, b)


def test_a_subset_is_seeded_distinct_in_original_order_and_leaves_the_test_set_whole(raw):
    first = prepare_mnist(raw, subset=10, seed=0)
    again = prepare_mnist(raw, subset=10, rng=np.random.default_rng(0))
    other = prepare_mnist(raw, subset=10, seed=1)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first.x_train, other.x_train)
    # Every kept row is a training example, each at most once, in the training set's order.
    everything = prepare_mnist(raw).x_train
    rows = [int(np.flatnonzero((everything == row).all(axis=1))[0]) for row in first.x_train]
    assert rows == sorted(set(rows)) and len(rows) == 10
    np.testing.assert_array_equal(first.y_train, raw.y_train[rows])
    assert first.x_test.shape == (12, 784)


@pytest.mark.parametrize("kwargs, error, text", [
    ({"subset": 31}, ValueError, "at most the 30 training examples"),
    ({"subset": 0}, ValueError, "subset must be at least 1"),
    ({"seed": 0}, ValueError, "pass subset=k as well"),
    ({"dtype": np.int32}, TypeError, "floating type"),
])
def test_prepare_rejects_bad_arguments_with_a_reason(raw, kwargs, error, text):
    with pytest.raises(error, match=text):
        prepare_mnist(raw, **kwargs)


def test_prepare_refuses_data_that_is_already_prepared(raw):
    with pytest.raises(ValueError, match="x_train has dtype float32, expected uint8"):
        prepare_mnist(prepare_mnist(raw))
    with pytest.raises(TypeError, match="the MnistData that load_mnist"):
        prepare_mnist(raw._asdict())


def test_one_hot_puts_a_single_one_at_each_label():
    targets = one_hot(np.array([3, 0, 9]))
    assert targets.shape == (3, 10) and targets.dtype == np.float32
    np.testing.assert_array_equal(targets.sum(axis=1), [1, 1, 1])
    np.testing.assert_array_equal(targets.argmax(axis=1), [3, 0, 9])
    assert one_hot([1, 0], num_classes=2, dtype=np.float64).tolist() == [[0.0, 1.0], [1.0, 0.0]]


@pytest.mark.parametrize("labels, text", [
    (np.array([0, 10]), r"labels must lie in 0..9; got values from 0 to 10"),
    (np.array([-1, 2]), r"labels must lie in 0..9"),
    (np.array([0.0, 1.0]), "integer classes"),
    (np.zeros((2, 10), dtype=int), "shape \\(n,\\)"),
])
def test_one_hot_rejects_labels_that_are_not_classes(labels, text):
    with pytest.raises(ValueError, match=text):
        one_hot(labels)


# --- the real archive -------------------------------------------------------------------


@pytest.mark.skipif(not (REAL_DATA_DIR and os.path.isfile(os.path.join(REAL_DATA_DIR, "mnist.npz"))),
                    reason="set SGRAD_DATA_DIR to a folder holding the real mnist.npz to run this test")
def test_the_real_archive_passes_verification_in_canonical_order(monkeypatch):
    monkeypatch.setenv("SGRAD_DATA_DIR", REAL_DATA_DIR)
    data = load_mnist(download=False)
    assert data.x_train.shape == (60000, 28, 28) and data.x_test.shape == (10000, 28, 28)
    assert data.y_train[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert data.y_test[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert np.bincount(data.y_train).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    small = prepare_mnist(data, subset=100, seed=0)
    assert small.x_train.shape == (100, 784) and 0.0 <= small.x_train.min() < small.x_train.max() == 1.0
