"""The real download code against local archives served by file:// URLs."""

from __future__ import annotations

import hashlib
import logging
import shutil
import socket
import zipfile
from pathlib import Path

import pytest

from partf.data import (
    WIKITEXT2_CHECKSUMS,
    DataError,
    download,
    fetch_wikitext2,
    file_checksum,
    verify_file,
)
from partf.data.download import SPLIT_FILES
from tests.shared_data import wikitext2_file

CONTENT = {
    "train.txt": b" = Train = \n some words here \n",
    "valid.txt": b" = Valid = \n other words \n",
    "test.txt": b" = Test = \n more words \n",
}


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def git_blob(data: bytes) -> str:
    return "git-blob-sha1:" + hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# Mirrors WIKITEXT2_CHECKSUMS: every split checked by sha256.
CHECKSUMS = {name: sha256(data) for name, data in CONTENT.items()}


def make_zip(path: Path, content: dict[str, bytes]) -> Path:
    """An archive laid out like wikitext-2-v1.zip: wikitext-2/wiki.<split>.tokens."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in content.items():
            zf.writestr(f"wikitext-2/wiki.{name.removesuffix('.txt')}.tokens", data)
    return path


def closed_port_url() -> str:
    """An http URL on localhost where nothing listens: fails like having no network."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/wikitext-2-v1.zip"


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("archives")
    corrupt = dict(CONTENT, **{"train.txt": CONTENT["train.txt"] + b"tampered\n"})
    (root / "not_a.zip").write_bytes(b"<html>moved</html>")
    files = root / "files"
    files.mkdir()
    for name, data in CONTENT.items():
        (files / name).write_bytes(data)
    return {
        "good": make_zip(root / "good.zip", CONTENT),
        "corrupt": make_zip(root / "corrupt.zip", corrupt),
        "html": root / "not_a.zip",
        "files": files,
    }


def test_file_url_download_verifies_and_lays_out(archives, tmp_path):
    dest = tmp_path / "wikitext-2"
    files = fetch_wikitext2(dest, [archives["good"].as_uri()], CHECKSUMS)
    assert sorted(p.name for p in dest.iterdir()) == ["test.txt", "train.txt", "valid.txt"]
    for name, data in CONTENT.items():
        assert files[name].read_bytes() == data


def test_checksum_mismatch_deletes_and_says_so(archives, tmp_path, caplog):
    dest = tmp_path / "wikitext-2"
    with caplog.at_level(logging.WARNING), pytest.raises(DataError) as info:
        fetch_wikitext2(dest, [archives["corrupt"].as_uri()], CHECKSUMS)
    message = str(info.value)
    assert "checksum mismatch in train.txt (deleted)" in message
    assert "\n" not in message
    assert "train.txt" in caplog.text and "deleted" in caplog.text
    assert list(tmp_path.iterdir()) == []  # nothing is left, not even valid.txt or the folder


def test_falls_back_to_mirrors(archives, tmp_path, caplog):
    dest = tmp_path / "wikitext-2"
    sources = [
        closed_port_url(),  # unreachable
        (archives["good"].parent / "missing.zip").as_uri(),  # 404-like
        archives["html"].as_uri(),  # an error page instead of a zip
        archives["corrupt"].as_uri(),  # wrong bytes
        archives["good"].as_uri(),
    ]
    with caplog.at_level(logging.INFO):
        fetch_wikitext2(dest, sources, CHECKSUMS, timeout=5)
    assert (dest / "train.txt").read_bytes() == CONTENT["train.txt"]
    assert "fell back to" in caplog.text
    assert "not a zip archive" in caplog.text and "not found" in caplog.text


def test_folder_sources_and_already_present(archives, tmp_path, caplog):
    dest = tmp_path / "wikitext-2"
    fetch_wikitext2(dest, [archives["files"].as_uri() + "/"], CHECKSUMS)  # folder URL
    assert (dest / "valid.txt").read_bytes() == CONTENT["valid.txt"]
    with caplog.at_level(logging.INFO):
        fetch_wikitext2(dest, [], CHECKSUMS)  # verified files need no source
    assert "already" in caplog.text
    other = tmp_path / "other"
    fetch_wikitext2(other, [str(archives["files"])], CHECKSUMS)  # local folder path
    fetch_wikitext2(tmp_path / "third", [str(archives["good"])], CHECKSUMS)  # local zip path
    assert (tmp_path / "third" / "test.txt").read_bytes() == CONTENT["test.txt"]


def test_damaged_file_in_place_is_fetched_again(archives, tmp_path):
    dest = tmp_path / "wikitext-2"
    fetch_wikitext2(dest, [archives["good"].as_uri()], CHECKSUMS)
    (dest / "valid.txt").write_bytes(b"edited\n")
    fetch_wikitext2(dest, [archives["good"].as_uri()], CHECKSUMS)
    assert (dest / "valid.txt").read_bytes() == CONTENT["valid.txt"]


def test_offline_error_is_one_line_and_says_how(tmp_path):
    with pytest.raises(DataError) as info:
        fetch_wikitext2(tmp_path / "w", [closed_port_url(), closed_port_url()], CHECKSUMS)
    message = str(info.value)
    assert "no network access" in message
    assert "DATA_DIR=" in message and "--source=" in message
    assert "\n" not in message


def test_interrupted_download_restarts_cleanly(archives, tmp_path):
    dest = tmp_path / "archive.zip"
    stale = tmp_path / ".archive.zip.part"
    stale.write_bytes(b"half of an earlier download")
    download(archives["good"].as_uri(), dest)
    assert dest.read_bytes() == archives["good"].read_bytes()
    assert not stale.exists()
    with pytest.raises(OSError):
        download((tmp_path / "gone.zip").as_uri(), tmp_path / "gone.zip")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive.zip"]
    with pytest.raises(ValueError, match="scheme"):
        download("ftp://example.com/x.zip", tmp_path / "x.zip")


def test_checksum_helpers(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"hello\n")
    # `git hash-object` of "hello\n", a well-known value.
    assert file_checksum(path, "git-blob-sha1") == (
        "git-blob-sha1:ce013625030ba8dba906f756967f9e9ca394464a"
    )
    assert verify_file(path, sha256(b"hello\n"))
    assert verify_file(path, git_blob(b"hello\n"))  # a blob id still works as a checksum
    assert not verify_file(path, sha256(b"other"))
    assert not verify_file(tmp_path / "missing", sha256(b"hello\n"))


def shared_wikitext2() -> Path:
    """The shared WikiText-2 folder; skips (or fails, when required) unless all three
    splits are in it."""
    files = [wikitext2_file(name) for name in SPLIT_FILES]
    return files[0].parent


def test_wikitext2_checksums_match_the_shared_files():
    folder = shared_wikitext2()
    for name in SPLIT_FILES:
        assert verify_file(folder / name, WIKITEXT2_CHECKSUMS[name]), name
    # The data's README lists git blob ids too: our git-blob-sha1 gives the same.
    assert file_checksum(folder / "train.txt", "git-blob-sha1") == (
        "git-blob-sha1:2d84b35af79e411d73ea7cae83c73964c6ac83b4"
    )
    assert file_checksum(folder / "valid.txt", "git-blob-sha1") == (
        "git-blob-sha1:eec944eb2d9e46061cd34a6913528797db6842fc"
    )


def test_real_wikitext2_from_a_file_url_passes_the_real_checksums(tmp_path):
    folder = shared_wikitext2()
    dest = tmp_path / "wikitext-2"
    files = fetch_wikitext2(dest, [folder.as_uri() + "/"])  # the default WIKITEXT2_CHECKSUMS
    assert sorted(p.name for p in dest.iterdir()) == sorted(SPLIT_FILES)
    assert files["train.txt"].stat().st_size == (folder / "train.txt").stat().st_size


def test_corrupted_train_copy_is_deleted_with_a_one_line_error(tmp_path, caplog):
    folder = shared_wikitext2()
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in SPLIT_FILES:
        shutil.copyfile(folder / name, copy / name)
    # One flipped byte in the middle of train.txt: same size, different sha256.
    with open(copy / "train.txt", "r+b") as f:
        f.seek(5_000_000)
        byte = f.read(1)
        f.seek(5_000_000)
        f.write(bytes([byte[0] ^ 0x20]))
    dest = tmp_path / "wikitext-2"
    for source in (str(copy), copy.as_uri() + "/"):  # a local path, then a file:// URL
        with caplog.at_level(logging.WARNING), pytest.raises(DataError) as info:
            fetch_wikitext2(dest, [source])
        message = str(info.value)
        assert "checksum mismatch in train.txt (deleted)" in message and "\n" not in message
        assert WIKITEXT2_CHECKSUMS["train.txt"] in caplog.text  # the warning names the expected
        assert not dest.exists()  # nothing half-written: not valid.txt, not the folder
    assert sorted(p.name for p in copy.iterdir()) == sorted(SPLIT_FILES)  # the source is kept
