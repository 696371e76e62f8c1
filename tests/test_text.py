"""data_gen.text: where the corpus is found, the checked download, ids, splits and batches."""

import hashlib
import http.server
import threading

import numpy as np
import pytest

from data_gen import text

SAMPLE = "the cat sat on the mat.\nthe dog sat on the log.\n" * 20


@pytest.fixture
def no_data_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("SGRAD_DATA_DIR", raising=False)
    return tmp_path / "cache"


def test_a_given_path_is_read_as_utf8(tmp_path):
    file = tmp_path / "mine.txt"
    file.write_text("héllo\n", encoding="utf-8")
    assert text.load_text(file) == "héllo\n"


def test_a_missing_given_path_is_not_replaced_by_another_text(tmp_path, monkeypatch):
    monkeypatch.setenv("SGRAD_DATA_DIR", str(tmp_path))
    (tmp_path / text.FILENAME).write_text("other")
    with pytest.raises(text.TextNotFoundError, match="no file at"):
        text.load_text(tmp_path / "typo.txt")


def test_the_data_dir_comes_before_the_cache(tmp_path, monkeypatch):
    (tmp_path / text.FILENAME).write_text("from the data dir")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / text.FILENAME).write_text("from the cache")
    monkeypatch.setenv("SGRAD_DATA_DIR", str(tmp_path))
    assert text.load_text(cache_dir=cache) == "from the data dir"
    monkeypatch.delenv("SGRAD_DATA_DIR")
    assert text.load_text(cache_dir=cache) == "from the cache"


def test_with_nothing_anywhere_the_error_names_every_place(no_data_dir):
    with pytest.raises(text.TextNotFoundError) as caught:
        text.load_text(cache_dir=no_data_dir, url="file:///nonexistent/corpus.txt", sha256="0" * 64)
    message = str(caught.value)
    assert "$SGRAD_DATA_DIR: not set" in message
    assert str(no_data_dir / text.FILENAME) in message
    assert "file:///nonexistent/corpus.txt: download failed" in message
    assert not list(no_data_dir.iterdir())  # no partial file left behind


def test_without_a_known_hash_nothing_is_downloaded(no_data_dir):
    with pytest.raises(text.TextNotFoundError, match="no SHA-256 known"):
        text.load_text(cache_dir=no_data_dir, sha256=None)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve(folder):
    """A local HTTP server on 127.0.0.1 serving ``folder``; the caller shuts it down."""
    server = http.server.HTTPServer(("127.0.0.1", 0), lambda *args: _QuietHandler(*args, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def test_a_download_with_the_right_hash_is_saved_in_the_cache(tmp_path, no_data_dir):
    served = tmp_path / "served"
    served.mkdir()
    (served / "corpus.txt").write_bytes(SAMPLE.encode())
    server, thread = _serve(served)
    try:
        url = f"http://127.0.0.1:{server.server_port}/corpus.txt"
        digest = hashlib.sha256(SAMPLE.encode()).hexdigest()
        assert text.load_text(cache_dir=no_data_dir, url=url, sha256=digest) == SAMPLE
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert (no_data_dir / text.FILENAME).read_text() == SAMPLE
    assert text.load_text(cache_dir=no_data_dir, download=False) == SAMPLE


def test_a_download_with_the_wrong_hash_is_deleted(tmp_path, no_data_dir):
    served = tmp_path / "corpus.txt"
    served.write_bytes(SAMPLE.encode())
    wrong = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(ValueError, match="has SHA-256") as caught:
        text.load_text(cache_dir=no_data_dir, url=served.as_uri(), sha256=wrong)
    assert wrong[:12] in str(caught.value)
    assert not list(no_data_dir.iterdir())


def test_a_download_is_checked_against_tiny_shakespeares_hash_by_default(tmp_path, no_data_dir):
    served = tmp_path / "corpus.txt"
    served.write_bytes(SAMPLE.encode())  # not Tiny Shakespeare
    with pytest.raises(ValueError, match="has SHA-256") as caught:
        text.load_text(cache_dir=no_data_dir, url=served.as_uri())
    assert "expected 86c4e6aa9db7..." in str(caught.value)
    assert not list(no_data_dir.iterdir())


def test_a_malformed_hash_is_refused(no_data_dir):
    with pytest.raises(ValueError, match="64 hexadecimal digits"):
        text.load_text(cache_dir=no_data_dir, sha256="abc")


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    file = tmp_path / "latin1.txt"
    file.write_bytes("café".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        text.load_text(file)


def test_encode_and_decode_are_inverse():
    sample = "naïve text, with ünicode ✓\n"
    vocab = text.vocabulary(sample)
    ids = text.encode(sample, vocab)
    assert vocab == "".join(sorted(set(sample)))
    assert ids.dtype == np.int64 and ids.shape == (len(sample),)
    assert [vocab[i] for i in ids] == list(sample)
    assert text.decode(ids, vocab) == sample


def test_an_empty_or_non_string_text_is_refused():
    with pytest.raises(ValueError, match="empty"):
        text.vocabulary("")
    with pytest.raises(TypeError, match="must be a str"):
        text.encode(b"bytes", "bety")


def test_encode_names_the_characters_missing_from_the_vocabulary():
    with pytest.raises(ValueError, match="'xz'"):
        text.encode("axbz", "ab")


def test_the_split_keeps_the_last_part_for_validation():
    ids = np.arange(100)
    train, valid = text.split_ids(ids, 0.2)
    np.testing.assert_array_equal(train, np.arange(80))
    np.testing.assert_array_equal(valid, np.arange(80, 100))
    with pytest.raises(ValueError, match="between 0 and 1"):
        text.split_ids(ids, 1.0)


def test_stream_rows_are_contiguous_runs_of_the_text():
    rows = text.stream_rows(np.arange(23), 4)
    np.testing.assert_array_equal(rows, np.arange(20).reshape(4, 5))
    with pytest.raises(ValueError, match="smaller batch"):
        text.stream_rows(np.arange(5), 4)


def test_random_windows_are_seeded_and_their_targets_are_the_next_characters():
    ids = np.arange(1000) * 3
    x, y = text.random_windows(ids, 16, 7, seed=5)
    again, _ = text.random_windows(ids, 16, 7, seed=5)
    np.testing.assert_array_equal(x, again)
    assert x.shape == y.shape == (16, 7)
    np.testing.assert_array_equal(y, x + 3)  # ids[i + 1] here
    np.testing.assert_array_equal(np.diff(x, axis=1), 3)
    assert len(np.unique(x[:, 0])) > 8


def test_one_hot_ids_has_a_one_at_each_id():
    ids = np.array([[0, 2], [1, 1]])
    hot = text.one_hot_ids(ids, 3)
    assert hot.shape == (2, 2, 3)
    np.testing.assert_array_equal(hot.argmax(-1), ids)
    np.testing.assert_array_equal(hot.sum(-1), 1)
    with pytest.raises(ValueError, match="below 3"):
        text.one_hot_ids(np.array([3]), 3)
