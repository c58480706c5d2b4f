"""Hostile answers to the download itself (issue 31): redirects, headers, listings and bodies that
made huggingface_hub's downloaders write outside the cache. Whatever the server answers, nothing
is written outside the zoo root and the cache, no publisher file lands where Python would run it,
and the pull is refused with one line (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_server import HubServer, git_blob_oid
from test_security_pull import REPO, assert_refused, edited, good, hub, outside, plant, pull, root, tree  # noqa: F401 (fixtures)

import zoo
from zoo.hub import fetch_entry
from zoo.errors import ZooError

ESCAPE = "../../../../site-packages/zoo-escape.pth"  # from blobs/ of the cache: four levels up is tmp_path


def cache_files(tmp_path: Path) -> list[str]:
    """Every file under the Hugging Face home (folders left empty do not count)."""
    home = tmp_path / "hf-home"
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if not p.is_dir()) if home.exists() else []


def assert_nothing_escaped(tmp_path: Path) -> None:
    assert outside(tmp_path) == []
    assert not list(tmp_path.rglob("*.pth")) and not list(tmp_path.rglob("*ESCAPE*"))
    assert cache_files(tmp_path) == []  # a refused download leaves nothing behind, not even in the cache


def refused_everywhere(capsys, tmp_path: Path, root: Path, needle: str) -> None:
    """`zoo pull case 33` and `zoo.load(source="hub")` both refused; nothing written anywhere (checked
    first: an escape is the failure that matters)."""
    before = tree(root)
    code, out, err = pull(capsys, root, "case", "33")
    assert_nothing_escaped(tmp_path)
    assert_refused(code, err, needle)
    assert out == "" and tree(root) == before
    with pytest.raises(ZooError, match=needle):
        zoo.load("case-33", repo_id=REPO, source="hub")
    assert_nothing_escaped(tmp_path)


def test_same_host_redirect_with_traversal_etag_writes_nothing(hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-33", edited(good["case-33"]))
    commit = hub.repos[REPO].head.oid
    hub.redirect = "same-host"
    hub.redirect_headers = {"X-Repo-Commit": commit, "ETag": f'"{ESCAPE}"'}
    refused_everywhere(capsys, tmp_path, root, "which holds a path; refused")
    assert any(path.startswith("/cdn/") for _, path in hub.requests)  # the redirect was really followed


def test_redirect_to_404_with_traversal_commit_writes_nothing(hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-33", edited(good["case-33"]))
    hub.redirect = "404"
    hub.redirect_headers = {"X-Repo-Commit": "../../../../COMMIT-ESCAPE"}
    refused_everywhere(capsys, tmp_path, root, "answered a download with commit")


@pytest.mark.parametrize("extra", [
    {"xetHash": "../../../../XET-ESCAPE", "lfs": {"oid": "a" * 64, "size": None, "pointerSize": 134}},
    {"xetHash": "b" * 64, "lfs": {"oid": "../../../../LFS-ESCAPE", "size": None, "pointerSize": 134}},
])
def test_xet_listing_with_traversal_hashes_writes_nothing(extra, hub, good, root, tmp_path, capsys,
                                                          monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_DISABLE_XET", raising=False)  # Xet on, as it is for users by default
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    files = edited(good["case-33"])
    plant(hub, "case-33", files)
    size = len(files["model.safetensors"])
    hub.tree_extra = {"case-33/model.safetensors": {**extra, "lfs": {**extra["lfs"], "size": size}}}
    refused_everywhere(capsys, tmp_path, root, "not a hash; refused" if "XET" in str(extra) else "not a sha256")
    assert not any("/resolve/" in path for _, path in hub.requests)  # refused from the listing alone


def test_file_larger_than_its_listing_is_cut_off(hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-33", edited(good["case-33"]))
    hub.serve_instead = {"case-33/README.md": b"# card\n" * (1 << 20)}  # 7 MiB behind a listing of a few KB
    refused_everywhere(capsys, tmp_path, root, "more than the")


def test_oversized_listing_is_refused_before_downloading(hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-33", edited(good["case-33"]))
    hub.tree_extra = {"case-33/README.md": {"size": 300 << 20}}
    refused_everywhere(capsys, tmp_path, root, "over its limit of 4 MiB; refused before downloading")
    assert not any("/resolve/" in path for _, path in hub.requests)


def test_bytes_that_differ_from_the_listed_hash_are_refused(hub, good, root, tmp_path, capsys) -> None:
    files = edited(good["case-33"])
    plant(hub, "case-33", files)
    readme = files["README.md"]
    hub.serve_instead = {"case-33/README.md": readme[:-1] + b"!"}  # same size, other bytes
    refused_everywhere(capsys, tmp_path, root, "do not match the hash")


def test_honest_redirects_are_followed_and_the_token_stays_home(hub, good, root, tmp_path, capsys) -> None:
    """The real Hub sends LFS files to a CDN: a redirect with honest answers still downloads, and the
    token goes to the endpoint's host only."""
    plant(hub, "case-33", edited(good["case-33"]))
    with HubServer() as cdn:
        cdn.repos = hub.repos
        hub.redirect, hub.cdn_endpoint = "cdn", cdn.endpoint
        path = fetch_entry("case-33", repo_id=REPO, token="hf_secret_token")
        assert sorted(p.name for p in path.iterdir()) == sorted(good["case-33"])
        assert cdn.requests and all(auth is None for _, auth in cdn.authorization)
    assert any(auth == "Bearer hf_secret_token" for p, auth in hub.authorization if "/resolve/" in p)
    commit = hub.repos[REPO].head.oid
    snapshot = f"hub/models--zoo-test--zoo/snapshots/{commit}/case-33/"
    assert all(f.startswith(snapshot) or f == "hub/models--zoo-test--zoo/refs/main" for f in cache_files(tmp_path))
    assert outside(tmp_path) == []
    code, out, err = pull(capsys, root, "case", "33")  # the cached snapshot is reused, and installs
    assert code == 0, err
    assert (root / "entries" / "case-33" / "model.safetensors").read_bytes() == good["case-33"]["model.safetensors"]


def test_git_blob_oid_of_the_test_server_is_gits() -> None:
    assert git_blob_oid(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object`


def test_pull_all_leaves_alone_a_folder_that_is_not_an_entry(hub, good, root, tmp_path, capsys) -> None:
    plant(hub, "case-33", edited(good["case-33"]))
    plant(hub, "case-33.failed", edited(good["case-33"]))  # a failed run pushed by hand: not an entry
    code, out, err = pull(capsys, root, "--all")
    assert code == 0, err
    assert sorted(p.name for p in (root / "entries").iterdir()) == ["case-33"]


@pytest.mark.parametrize("repo_id", ["zoo test/zoo", "zoo/zoo zoo", "zoo/" + "x" * 97, "zoo/.x", "zoo/a..b"])
def test_a_malformed_repo_id_is_one_line(repo_id, root, capsys) -> None:
    from zoo.cli import main

    code = main(["pull", "case", "33", "--repo-id", repo_id, "--root", str(root)])
    _, err = capsys.readouterr()
    assert_refused(code, err, "invalid repository id")


def test_repository_info_larger_than_its_bound_is_refused(hub, good, root, tmp_path, capsys, monkeypatch) -> None:
    import zoo.hub

    plant(hub, "case-33", edited(good["case-33"]))
    monkeypatch.setattr(zoo.hub, "MAX_INFO_BYTES", 1 << 20)  # the real bound is 64 MiB: the same code, faster
    hub.info_padding = 2 << 20
    refused_everywhere(capsys, tmp_path, root, "the Hub sent more than 1048576 bytes; refused")
    assert not any("/resolve/" in path for _, path in hub.requests)


def test_a_server_that_stops_answering_does_not_hang_the_pull(hub, good, root, tmp_path, capsys, monkeypatch) -> None:
    """Without a read timeout the client waits out the stall and the pull then succeeds (exit 0):
    exit 2 is the timeout's doing (no timed assertion needed)."""
    plant(hub, "case-33", edited(good["case-33"]))
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")
    hub.stall_s = 8.0
    code, _, err = pull(capsys, root, "case", "33")
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("zoo: error: "), err
    assert "cannot reach the Hub" in err
    assert_nothing_escaped(tmp_path)
