"""The copy of WikiText-2 partf ships: unpacked and checked, a damaged copy refused in one
line with nothing left behind, and the download only where the copy is absent."""

from __future__ import annotations

import io
import lzma
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from partf.data import (
    SHIPPED_WIKITEXT2,
    WIKITEXT2_CHECKSUMS,
    DataError,
    get_wikitext2,
    unpack_wikitext2,
)
from partf.data.download import SPLIT_FILES
from tests.data.test_download import CHECKSUMS, CONTENT, closed_port_url, make_zip


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def make_tar_xz(path: Path, content: dict[str, bytes]) -> Path:
    """A tar.xz laid out as the shipped one: flat train.txt, valid.txt, test.txt."""
    with lzma.open(path, "wb") as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for name, data in content.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_shipped_copy_is_in_the_package_with_its_license():
    assert SHIPPED_WIKITEXT2.is_file(), SHIPPED_WIKITEXT2
    assert SHIPPED_WIKITEXT2.stat().st_size < 4_000_000
    notice = (SHIPPED_WIKITEXT2.parent / "README.md").read_text()
    for words in ("Merity", "Pointer Sentinel Mixture Models", "CC BY-SA 3.0", "byte for byte"):
        assert words in notice
    for checksum in WIKITEXT2_CHECKSUMS.values():
        assert checksum.removeprefix("sha256:") in notice
    # setup.py puts both into the wheel and the sdist.
    setup = (Path(__file__).resolve().parents[2] / "setup.py").read_text()
    assert '"wikitext2/wikitext-2.tar.xz", "wikitext2/README.md"' in setup


def test_the_shipped_copy_unpacks_to_the_published_files(tmp_path):
    dest = tmp_path / "data" / "wikitext-2"
    files = get_wikitext2(dest, sources=[closed_port_url()])  # no network needed
    assert sorted(files) == sorted(SPLIT_FILES)
    assert listing(tmp_path) == ["data", "data/wikitext-2", *(f"data/wikitext-2/{n}" for n in
                                 sorted(SPLIT_FILES))]  # fmt: skip
    assert files["train.txt"].stat().st_size == 10_797_148  # checked by sha256 on the way
    # A damaged split in place is unpacked again; other files in the folder stay.
    (dest / "valid.txt").write_bytes(b"edited\n")
    (dest / "notes.txt").write_bytes(b"mine\n")
    get_wikitext2(dest, sources=[])
    assert (dest / "valid.txt").stat().st_size == 1_121_681
    assert (dest / "notes.txt").read_bytes() == b"mine\n"
    assert listing(tmp_path / "data") == ["wikitext-2", *(f"wikitext-2/{n}" for n in
                                          sorted([*SPLIT_FILES, "notes.txt"]))]  # fmt: skip


def truncated(archive: Path) -> None:
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])


def corrupt(archive: Path) -> None:
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x55
    archive.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [truncated, corrupt], ids=["truncated", "corrupt"])
def test_a_damaged_shipped_copy_is_refused_in_one_line(tmp_path, monkeypatch, damage):
    archive = shutil.copyfile(SHIPPED_WIKITEXT2, tmp_path / "wikitext-2.tar.xz")
    damage(archive)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as info:
        get_wikitext2(tmp_path / "data" / "wikitext-2", archive, sources=[closed_port_url()])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("wikitext-2.tar.xz is corrupt or truncated (it cannot be read: ")
    # Outside a git checkout the fix is a reinstall; DATA_DIR is the other way.
    assert "restore it with pip install --force-reinstall --no-deps partf" in message
    assert "DATA_DIR" in message
    assert listing(tmp_path) == ["wikitext-2.tar.xz"]  # no data/, no staging folder, no download


@pytest.mark.parametrize(
    "content, why",
    [
        (
            dict(CONTENT, **{"valid.txt": b" = Not valid = \n"}),
            "sha256 of valid.txt does not match",
        ),
        ({k: v for k, v in CONTENT.items() if k != "test.txt"}, "it holds no test.txt"),
    ],
    ids=["other_bytes", "missing_split"],
)
def test_an_archive_of_other_files_is_refused_leaving_the_folder_as_it_was(tmp_path, content, why):
    archive = make_tar_xz(tmp_path / "copy.tar.xz", content)
    dest = tmp_path / "wikitext-2"
    dest.mkdir()
    (dest / "train.txt").write_bytes(b"an older train.txt\n")
    before = listing(tmp_path)
    with pytest.raises(DataError, match=f"copy.tar.xz is corrupt or truncated \\({why}\\)"):
        unpack_wikitext2(archive, dest, CHECKSUMS)
    assert listing(tmp_path) == before
    assert (dest / "train.txt").read_bytes() == b"an older train.txt\n"  # not half replaced
    unpack_wikitext2(make_tar_xz(tmp_path / "good.tar.xz", CONTENT), dest, CHECKSUMS)
    assert (dest / "train.txt").read_bytes() == CONTENT["train.txt"]


def test_links_and_folders_in_the_archive_never_become_paths(tmp_path):
    archive = tmp_path / "odd.tar.xz"
    with lzma.open(archive, "wb") as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        link = tarfile.TarInfo("train.txt")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
        for name, data in CONTENT.items():
            info = tarfile.TarInfo(f"../../somewhere/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    unpack_wikitext2(archive, tmp_path / "out" / "wikitext-2", CHECKSUMS)
    assert listing(tmp_path / "out") == ["wikitext-2", *(f"wikitext-2/{n}" for n in
                                         sorted(SPLIT_FILES))]  # fmt: skip
    assert not (tmp_path / "out" / "wikitext-2" / "train.txt").is_symlink()
    assert not (tmp_path.parent / "somewhere").exists()


def test_in_a_checkout_the_fix_is_git_checkout_and_it_works(tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    archive = repo / "partf" / "data" / "wikitext2" / "copy.tar.xz"
    archive.parent.mkdir(parents=True)
    make_tar_xz(archive, CONTENT)

    def git(*args: str, cwd: Path = repo) -> None:
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "copy")
    truncated(archive)
    monkeypatch.chdir(repo)
    with pytest.raises(DataError) as info:
        unpack_wikitext2(archive, repo / "data" / "wikitext-2", CHECKSUMS)
    command = "git checkout -- partf/data/wikitext2/copy.tar.xz"
    assert f"restore it with {command}, or point DATA_DIR" in str(info.value)
    # From another folder the command names the checkout.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=f"git -C {repo} checkout -- partf/data/wikitext2/"):
        unpack_wikitext2(archive, repo / "data" / "wikitext-2", CHECKSUMS)
    git(*command.split()[1:])  # the fix, as printed, run from the checkout
    unpack_wikitext2(archive, repo / "data" / "wikitext-2", CHECKSUMS)
    assert (repo / "data" / "wikitext-2" / "test.txt").read_bytes() == CONTENT["test.txt"]


def test_without_a_shipped_copy_it_downloads(tmp_path):
    missing = tmp_path / "no-such.tar.xz"
    dest = tmp_path / "wikitext-2"
    with pytest.raises(DataError, match="no network access"):
        get_wikitext2(dest, missing, [closed_port_url()], CHECKSUMS, timeout=5)
    zipped = make_zip(tmp_path / "w.zip", CONTENT)
    get_wikitext2(dest, missing, [zipped.as_uri()], CHECKSUMS)
    assert (dest / "valid.txt").read_bytes() == CONTENT["valid.txt"]
