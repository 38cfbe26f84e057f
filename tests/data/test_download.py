"""The real download code against local archives served by file:// URLs."""

from __future__ import annotations

import hashlib
import logging
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

CONTENT = {
    "train.txt": b" = Train = \n some words here \n",
    "valid.txt": b" = Valid = \n other words \n",
    "test.txt": b" = Test = \n more words \n",
}


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def git_blob(data: bytes) -> str:
    return "git-blob-sha1:" + hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# Mirrors WIKITEXT2_CHECKSUMS: train checked by git blob id, the others by sha256.
CHECKSUMS = {
    "train.txt": git_blob(CONTENT["train.txt"]),
    "valid.txt": sha256(CONTENT["valid.txt"]),
    "test.txt": sha256(CONTENT["test.txt"]),
}


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
    assert not verify_file(path, sha256(b"other"))
    assert not verify_file(tmp_path / "missing", sha256(b"hello\n"))


def test_wikitext2_checksums_match_the_shared_files(shared_data):
    for name in ("valid.txt", "test.txt"):
        assert verify_file(shared_data / "wikitext-2" / name, WIKITEXT2_CHECKSUMS[name])
    # The README lists the git blob ids: check our git-blob-sha1 on a file we have.
    assert file_checksum(shared_data / "wikitext-2" / "valid.txt", "git-blob-sha1") == (
        "git-blob-sha1:eec944eb2d9e46061cd34a6913528797db6842fc"
    )
