"""Hub answers -> an entry's files in a folder the zoo owns, where nothing the server says decides a path.

huggingface_hub's downloaders build cache paths from what the server answers: `blobs/<ETag>`,
`snapshots/<X-Repo-Commit>`, Xet chunk paths from a listing's `xetHash` / `lfs.oid`, and they
follow redirects before any check can see the answer. A hostile server used that to write outside
the cache (issue 31). So the zoo downloads entry files itself:

- the file list comes from the tree listing of the entry's folder at a checked 40-hex commit;
  every record must be a file of the artifact (zoo.artifact.ALLOWED_FILES) with a git oid (40 hex),
  a size within that file's limit and, for LFS files, a sha256 (64 hex); anything else is refused
  before a byte of content is read;
- each file is fetched from `{endpoint}/{repo}/resolve/{commit}/{path}` into a fresh temporary
  folder that the zoo made, under a name the zoo chose; redirects are followed by hand (the real
  Hub sends LFS files to a CDN): at most MAX_REDIRECTS, never from https to http, and the token is
  sent to the endpoint's host only. No header becomes a path; headers that would have (an ETag with
  a path in it, an X-Repo-Commit other than the commit asked for) are refused all the same, since
  only a hostile server sends them;
- at most the listed size is read (one byte more is an error), and the bytes must hash to the
  listed sha256 or git oid;
- the complete folder is verified against its manifest (zoo.artifact) and renamed into
  `snapshots/<commit>/<entry>` of the cache storage in one step.

Xet is never used: the Hub serves Xet-stored files at the same resolve URL (by a redirect), and
the Xet client derives paths from hashes the server sends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from zoo.artifact import ALLOWED_FILES, ArtifactError, file_limit, verify_entry
from zoo.errors import ZooError

MAX_REDIRECTS = 5
MAX_LISTING_BYTES = 1 << 20
"""A tree listing of one entry folder is a few hundred bytes; a larger answer is refused unread."""
_GIT_OID = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = _GIT_OID
_PATHLIKE = re.compile(r"[/\\\x00]|\.\.")


class DownloadError(ZooError):
    """The Hub's answer to a download was refused (one line; the CLI exits 2)."""


class StatusError(DownloadError):
    """The Hub answered a status other than 200 (after redirects)."""

    def __init__(self, message: str, status: int, code: str | None) -> None:
        super().__init__(message)
        self.status, self.code = status, code


@dataclasses.dataclass(frozen=True, kw_only=True)
class RemoteFile:
    """One file of an entry folder as the tree listing describes it, after checking."""

    name: str
    """The file's name inside the entry folder (one of zoo.artifact.ALLOWED_FILES)."""
    size: int
    """Its size in bytes, within its limit (zoo.artifact.file_limit)."""
    git_oid: str
    """Git's blob id (40 hex), what the Hub lists for every file."""
    sha256: str | None
    """The LFS object's sha256 (64 hex) for LFS files, None for regular ones."""

    def __post_init__(self) -> None:
        if self.name not in ALLOWED_FILES or not _GIT_OID.fullmatch(self.git_oid):
            raise ValueError(f"invalid remote file {self.name!r}")
        if self.sha256 is not None and not _SHA256.fullmatch(self.sha256):
            raise ValueError(f"invalid sha256 for {self.name!r}")

    def check(self, data_hash: str, blob_oid: str) -> bool:
        """Whether downloaded bytes (their sha256 and git blob id) are the listed file."""
        return data_hash == self.sha256 if self.sha256 is not None else blob_oid == self.git_oid


def parse_listing(raw: bytes, folder: str) -> list[RemoteFile]:
    """The checked files of `folder` from a tree listing's JSON bytes; DownloadError says what is wrong."""
    try:
        records = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise DownloadError(f"the Hub's listing of {folder} is not JSON; refused") from None
    if not isinstance(records, list):
        raise DownloadError(f"the Hub's listing of {folder} is not a list of files; refused")
    files: dict[str, RemoteFile] = {}
    for record in records:
        files_record = _file_record(record, folder)
        if files_record.name in files:
            raise DownloadError(f"the Hub lists {folder}/{files_record.name} twice; refused")
        files[files_record.name] = files_record
    return [files[n] for n in sorted(files)]


def _file_record(record: Any, folder: str) -> RemoteFile:
    if not isinstance(record, dict) or not isinstance(record.get("path"), str):
        raise DownloadError(f"the Hub's listing of {folder} holds a record without a path; refused")
    path = record["path"]
    shown = path[:80]
    parent, _, name = path.rpartition("/")
    if parent != folder or name not in ALLOWED_FILES or record.get("type") != "file":
        raise DownloadError(f"the Hub lists {shown!r} in {folder}, which is not a file of a zoo entry; refused "
                            f"unread (an entry holds only {', '.join(sorted(ALLOWED_FILES))})")
    size, oid, lfs = record.get("size"), record.get("oid"), record.get("lfs")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise DownloadError(f"the Hub lists {shown} without a size; refused")
    if size > file_limit(name):
        raise DownloadError(f"the Hub lists {shown} at {size} bytes, over its limit of {file_limit(name) >> 20} MiB; "
                            "refused before downloading")
    if not isinstance(oid, str) or not _GIT_OID.fullmatch(oid):
        raise DownloadError(f"the Hub lists {shown} with oid {str(oid)[:60]!r}, not a git hash; refused")
    sha256 = None
    if lfs is not None:
        lfs_oid = lfs.get("oid", lfs.get("sha256")) if isinstance(lfs, dict) else None
        if not isinstance(lfs_oid, str) or not _SHA256.fullmatch(lfs_oid) or lfs.get("size", size) != size:
            raise DownloadError(f"the Hub lists {shown} with LFS oid {str(lfs_oid)[:60]!r}, not a sha256 of "
                                "the listed size; refused")
        sha256 = lfs_oid
    xet = record.get("xetHash")
    if xet is not None and (not isinstance(xet, str) or not _SHA256.fullmatch(xet)):
        raise DownloadError(f"the Hub lists {shown} with xetHash {str(xet)[:60]!r}, not a hash; refused")
    return RemoteFile(name=name, size=size, git_oid=oid, sha256=sha256)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Source:
    """Where and how to ask: the endpoint, repository, commit and the request headers."""

    endpoint: str
    """The Hub's base URL (no trailing slash)."""
    repo_id: str
    """`org/name`, already checked (zoo.hub.resolve_repo_id)."""
    commit: str | None
    """The 40-hex commit every file is fetched at; None for a request that names no commit (the
    repository's info, which is what tells the commit)."""
    headers: dict[str, str]
    """Headers for the endpoint's own host (user agent, and the token if any)."""

    def __post_init__(self) -> None:
        if self.commit is not None and not _COMMIT.fullmatch(self.commit):
            raise ValueError(f"commit {self.commit[:60]!r} is not 40 hex characters")

    def url(self, kind: str, path: str) -> str:
        """`resolve/<commit>/<path>` (a file) or `tree/<commit>/<path>` (a folder's listing)."""
        if self.commit is None:
            raise ValueError("a file or listing needs a commit")
        if kind == "tree":
            return f"{self.endpoint}/api/models/{quote(self.repo_id)}/tree/{self.commit}/{quote(path)}"
        return f"{self.endpoint}/{quote(self.repo_id)}/resolve/{self.commit}/{quote(path)}"


@contextlib.contextmanager
def _stream(client: Any, source: Source, url: str, what: str) -> Iterator[Any]:
    """GET `url`, following at most MAX_REDIRECTS redirects by hand; the final response (status 200),
    its body not yet read."""
    home = urlsplit(source.endpoint)
    for _ in range(MAX_REDIRECTS + 1):
        here = urlsplit(url)
        if here.scheme not in ("http", "https") or (home.scheme == "https" and here.scheme != "https"):
            raise DownloadError(f"{what}: the Hub redirected to {url[:80]!r} (only https, or the endpoint's own "
                                "scheme, is followed); refused")
        same_host = (here.scheme, here.netloc) == (home.scheme, home.netloc)
        headers = source.headers if same_host else {k: v for k, v in source.headers.items()
                                                    if k.lower() != "authorization"}
        with client.stream("GET", url, headers=headers, follow_redirects=False, timeout=_timeout()) as response:
            _check_headers(response, source, what)
            if response.status_code in (301, 302, 303, 307, 308):
                location = response.headers.get("Location")
                if not location:
                    raise DownloadError(f"{what}: the Hub answered a redirect without a location; refused")
                url = urljoin(url, location)
                continue
            if response.status_code != 200:
                code = response.headers.get("X-Error-Code")
                raise StatusError(f"{what}: the Hub answered {response.status_code}"
                                  + (f" ({code[:40]})" if code else ""), response.status_code, code)
            yield response
            return
    raise DownloadError(f"{what}: more than {MAX_REDIRECTS} redirects; refused")


def _timeout() -> float:
    """Seconds to wait for a connection or for the next bytes (huggingface_hub's client waits
    forever by default; a server that never answers must not hang a pull). HF_HUB_DOWNLOAD_TIMEOUT
    overrides the default of 10 s, as it does for huggingface_hub's own downloads."""
    try:
        value = float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT") or 10)
    except ValueError:
        return 10.0
    return value if value > 0 else 10.0


def _check_headers(response: Any, source: Source, what: str) -> None:
    """Headers are never used as paths here; one that only a hostile server sends is refused anyway."""
    commit = response.headers.get("X-Repo-Commit")
    if commit is not None and source.commit is not None and commit != source.commit:
        raise DownloadError(f"{what}: the Hub answered a download with commit {commit[:60]!r}, not the "
                            f"{source.commit[:12]} asked for; refused")
    for header in ("ETag", "X-Linked-Etag"):
        value = response.headers.get(header)
        if value is not None and _PATHLIKE.search(value):
            raise DownloadError(f"{what}: the Hub answered a download with {header} {value[:60]!r}, which holds "
                                "a path; refused")


def _body(client: Any, source: Source, url: str, limit: int, too_much: str, what: str) -> Iterator[bytes]:
    """The chunks of the body at `url` (after redirects), refused as soon as they pass `limit` bytes
    (`too_much` says which limit, for the message); StatusError unless the answer is 200."""
    total = 0
    with _stream(client, source, url, what) as response:
        for chunk in response.iter_bytes():
            total += len(chunk)
            if total > limit:
                raise DownloadError(f"{what}: the Hub sent more than {too_much}; refused")
            yield chunk


def read_bytes(client: Any, source: Source, url: str, limit: int, what: str) -> bytes:
    """The body at `url` (after redirects), at most `limit` bytes; StatusError unless it is 200."""
    return b"".join(_body(client, source, url, limit, f"{limit} bytes", what))


def _download(client: Any, source: Source, folder: str, remote: RemoteFile, dest: Path) -> None:
    """One listed file into `dest` (a path the zoo chose): at most its listed size, its hash checked."""
    what = f"downloading {folder}/{remote.name}"
    sha, blob, total = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % remote.size), 0
    url = source.url("resolve", f"{folder}/{remote.name}")
    with open(dest, "xb") as out:
        for chunk in _body(client, source, url, remote.size, f"the {remote.size} bytes it listed", what):
            total += len(chunk)
            sha.update(chunk)
            blob.update(chunk)
            out.write(chunk)
    if total != remote.size:
        raise DownloadError(f"{what}: the Hub sent {total} bytes, not the {remote.size} it listed; refused")
    if not remote.check(sha.hexdigest(), blob.hexdigest()):
        raise DownloadError(f"{what}: the bytes do not match the hash the Hub listed; refused")


def download_entry(client: Any, source: Source, name: str, storage: Path) -> Path:
    """Entry folder `name` at `source.commit` -> `storage/snapshots/<commit>/<name>`, verified.

    The files land in a temporary folder the zoo makes under `storage`, which becomes the snapshot
    folder by one rename once complete and verified; on any failure it is removed, so nothing is
    left behind and nothing outside `storage` is ever written."""
    listing = read_bytes(client, source, source.url("tree", name), MAX_LISTING_BYTES, f"listing {name}")
    remote = parse_listing(listing, name)
    missing = {"manifest.json", "model.safetensors"} - {r.name for r in remote}
    if missing:
        raise DownloadError(f"entry {name} in {source.repo_id} lacks {', '.join(sorted(missing))}")
    staging_root = storage / ".zoo-incoming"
    staging_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{name}.", dir=staging_root))
    try:
        folder = staging / name
        folder.mkdir()
        for r in remote:
            _download(client, source, name, r, folder / r.name)
        verify_entry(folder, name=name)
        final = storage / "snapshots" / source.commit / name
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(folder, final)
        except OSError:
            if not final.is_dir():
                raise
            verify_entry(final, name=name)  # a concurrent download of the same commit won: keep it
        return final
    except ArtifactError as exc:
        raise DownloadError(f"entry {name} downloaded from {source.repo_id}: {exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def cached_commit(storage: Path, revision: str) -> str | None:
    """The commit a revision was last downloaded at (`refs/<revision>`, written by the zoo), or None."""
    if _COMMIT.fullmatch(revision):
        return revision
    try:
        sha = (storage / "refs" / revision).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return sha if _COMMIT.fullmatch(sha) else None
