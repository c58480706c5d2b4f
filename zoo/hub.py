"""Zoo entries <-> one Hugging Face Hub model repository (one folder per entry, plus the benchmark
table and card at the root), through the real huggingface_hub client.

Which repository: the `repo_id` argument, else `$ZOO_REPO_ID`. There is no built-in default, so
nothing is pushed to, or loaded from, a repository the user did not name.

huggingface_hub reads its environment once, at import. zoo reads HF_ENDPOINT, HF_HUB_CACHE /
HF_HOME and HF_HUB_OFFLINE again at each call and passes them explicitly, so setting them after
import (a notebook, a test) takes effect too.

Safety: the server is not trusted. A revision must be a 40-hex commit or a plain ref name, and
the commit a server answers must be 40 hex characters (both become cache paths: `refs/<revision>`,
`snapshots/<commit>`). huggingface_hub is used for JSON API calls only (repository info, commits);
it never downloads, because its downloaders build paths from answers (ETag, X-Repo-Commit, Xet
hashes) and follow redirects before a check can see them. Entry files are downloaded by
zoo.hub_download into a folder the zoo makes, each checked against the listed size and hash, and
the entry's remote file names are checked against the artifact's allowed names first; the folder
is then verified (leading bytes, then sha256 sums) before anything is parsed. `pull` then checks
the whole entry (zoo.entry_check, zoo.behaviour_check) and installs exactly the bytes it checked,
atomically; `--all` checks every entry before installing any. Every failure becomes one HubError /
ArtifactError line (a ZooError: exit 2 on the CLI).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from zoo.artifact import ALLOWED_FILES, MANIFEST, check_entry_name, verify_entry
from zoo.errors import ZooError

REPO_ENV = "ZOO_REPO_ID"
DEFAULT_REVISION = "main"
COMMIT = re.compile(r"[0-9a-f]{40}")
REF_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}|refs/pr/[0-9]{1,9}")
_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


class HubError(ZooError):
    """The Hub refused, or lacked what was asked for."""


class HubUnreachable(HubError):
    """No answer from the Hub (down, no network, offline mode)."""


@dataclasses.dataclass(frozen=True)
class HubSettings:
    """Where to talk to and cache from, resolved at call time (see the module docstring)."""

    repo_id: str
    revision: str
    endpoint: str
    cache_dir: Path
    offline: bool
    token: str | bool | None = None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def resolve_repo_id(repo_id: str | None = None) -> str:
    """repo_id, else $ZOO_REPO_ID; checked to be `org/name`. There is no built-in default: the zoo
    does not guess which repository a user trusts."""
    chosen = repo_id or os.environ.get(REPO_ENV)
    if not chosen:
        raise HubError(f"no repository given: pass --repo-id ORG/NAME or set ${REPO_ENV}")
    parts = chosen.split("/")
    if len(parts) != 2 or not all(_REPO_PART.fullmatch(p) and ".." not in p for p in parts):
        raise HubError(f"invalid repository id {chosen[:100]!r}: expected ORG/NAME (letters, digits, - _ .; "
                       "at most 96 characters each, no ..)")
    return chosen


def check_revision(revision: str) -> str:
    """`revision` if it is a 40-hex commit or a safe ref name (a branch or tag without slashes, or
    refs/pr/N); huggingface_hub makes it a path in the cache, so `..` and slashes are refused."""
    ok = isinstance(revision, str) and (COMMIT.fullmatch(revision) or REF_NAME.fullmatch(revision))
    if not ok or ".." in revision or revision.endswith((".", ".lock")):
        raise HubError(f"invalid revision {str(revision)[:60]!r}: expected a 40-hex commit or a branch / tag "
                       "name (letters, digits, . _ -; no slashes, no ..) or refs/pr/N")
    return revision


def check_commit(sha: object, what: str) -> str:
    """A commit id the server answered, if it is 40 lowercase hex characters."""
    if not isinstance(sha, str) or not COMMIT.fullmatch(sha):
        raise HubError(f"{what}: the Hub answered commit {str(sha)[:60]!r}, not 40 hex characters; refused "
                       "(it would become a path in the cache)")
    return sha


def settings(repo_id: str | None = None, revision: str | None = None, *,
             token: str | bool | None = None, cache_dir: str | os.PathLike[str] | None = None) -> HubSettings:
    from huggingface_hub import constants

    if cache_dir is None:
        env_cache, env_home = os.environ.get("HF_HUB_CACHE"), os.environ.get("HF_HOME")
        cache_dir = env_cache or (os.path.join(env_home, "hub") if env_home else constants.HF_HUB_CACHE)
    return HubSettings(
        repo_id=resolve_repo_id(repo_id),
        revision=check_revision(revision or DEFAULT_REVISION),
        endpoint=(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/"),
        cache_dir=Path(cache_dir).expanduser(),
        offline=_truthy(os.environ.get("HF_HUB_OFFLINE")) or constants.is_offline_mode(),
        token=token,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.contextmanager
def hub_errors(s: HubSettings, what: str) -> Iterator[None]:
    """Turn huggingface_hub / network exceptions into one HubError line saying what to do."""
    import httpx2
    from huggingface_hub import errors

    where = f"{s.repo_id} on {s.endpoint}"
    try:
        yield
    except (errors.RepositoryNotFoundError, errors.GatedRepoError):
        raise HubError(f"{what}: repository {where} not found (check --repo-id / ${REPO_ENV}; "
                       "a private repository needs HF_TOKEN)") from None
    except errors.RevisionNotFoundError:
        raise HubError(f"{what}: revision {s.revision!r} not found in {where}") from None
    except (httpx2.TransportError, errors.OfflineModeIsEnabled) as exc:
        raise HubUnreachable(f"{what}: cannot reach the Hub at {s.endpoint} ({_first_line(exc)}); "
                       "check HF_ENDPOINT and the network, or set HF_HUB_OFFLINE=1 to use the cache") from None
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        hint = " (no write access? set HF_TOKEN)" if status in (401, 403) else ""
        raise HubError(f"{what}: the Hub answered {status} for {where}: {_first_line(exc)}{hint}") from None


def _quiet_tqdm() -> type:
    """Progress bars off for these calls only (entries are kilobytes; errors must stay one line)."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class Quiet(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet


def _api(s: HubSettings):
    from huggingface_hub import HfApi

    return HfApi(endpoint=s.endpoint, token=s.token)


# ------------------------------------------------------------------------------------------------
# download


def remote_entries(names: Sequence[str]) -> list[str]:
    """Entry folder names among repository paths; other folders (a failed run's `case-33.failed`,
    anything not named like an entry) are not entries and are left alone."""
    from zoo.artifact import is_entry_name

    folders = {p.split("/", 1)[0] for p in names if "/" in p}
    return sorted(f for f in folders if is_entry_name(f))


def _check_remote_folder(s: HubSettings, name: str, repo_files: Sequence[str]) -> None:
    """Refuse a missing entry or a folder holding anything but the artifact's files, unread."""
    prefix = name + "/"
    inside = [p[len(prefix):] for p in repo_files if p.startswith(prefix)]
    if not inside:
        known = ", ".join(remote_entries(repo_files)) or "none"
        raise HubError(f"entry {name} is not in {s.repo_id}@{s.revision} (entries there: {known})")
    bad = sorted(p for p in inside if p not in ALLOWED_FILES)
    if bad:
        raise HubError(f"entry {name} in {s.repo_id} holds unexpected files {bad}; refused without "
                       f"downloading them (an entry holds only {', '.join(sorted(ALLOWED_FILES))})")


def _storage(s: HubSettings) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return s.cache_dir / repo_folder_name(repo_id=s.repo_id, repo_type="model")


def _remember_revision(s: HubSettings, sha: str) -> None:
    """Record revision -> commit in the cache's refs/ (what snapshot_download would have written),
    so the entry loads offline by its revision; the revision is checked, so the path stays inside."""
    if s.revision == sha:
        return
    ref = _storage(s) / "refs" / s.revision
    try:
        ref.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref.with_name(f".{ref.name}.{os.getpid()}.tmp")
        tmp.write_text(sha)
        os.replace(tmp, ref)
    except OSError:
        pass  # best effort, as in huggingface_hub: the download itself succeeded


def _client_source(s: HubSettings, commit: str | None) -> tuple[Any, Any]:
    """huggingface_hub's shared HTTP client (the user's proxy and TLS settings) and what to ask it."""
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers

    from zoo.hub_download import Source

    return get_session(), Source(endpoint=s.endpoint, repo_id=s.repo_id, commit=commit,
                                 headers=build_hf_headers(token=s.token))


MAX_INFO_BYTES = 64 << 20
"""A repository's info lists every file (about 60 bytes each); 64 MiB is a million files, and a
larger answer is refused before it is held in memory."""


def repo_files(s: HubSettings, what: str) -> tuple[str, list[str]]:
    """(commit, every file path) of `s.revision`, read with a size bound (huggingface_hub's repo_info
    reads an answer whole, however large)."""
    from urllib.parse import quote

    from zoo.hub_download import StatusError, read_bytes

    where = f"{s.repo_id} on {s.endpoint}"
    client, source = _client_source(s, None)
    url = f"{s.endpoint}/api/models/{quote(s.repo_id)}/revision/{quote(s.revision, safe='')}"
    try:
        with hub_errors(s, what):
            raw = read_bytes(client, source, url, MAX_INFO_BYTES, what)
    except StatusError as exc:
        if exc.code == "RevisionNotFound":
            raise HubError(f"{what}: revision {s.revision!r} not found in {where}") from None
        if exc.status in (401, 403, 404):
            raise HubError(f"{what}: repository {where} not found (check --repo-id / ${REPO_ENV}; "
                           "a private repository needs HF_TOKEN)") from None
        raise HubError(f"{exc} for {where}") from None
    try:
        info = json.loads(raw.decode("utf-8"))
        siblings = info["siblings"] if isinstance(info, dict) else None
        names = [f["rfilename"] for f in siblings or []]
        if not isinstance(siblings, list) or not all(isinstance(n, str) for n in names):
            raise TypeError
    except (ValueError, UnicodeDecodeError, RecursionError, KeyError, TypeError):
        raise HubError(f"{what}: the Hub's answer for {where} is not a repository's info; refused") from None
    return check_commit(info.get("sha"), what), names


def _cached_entry(s: HubSettings, name: str) -> Path | None:
    """The entry's folder in the cache for `s.revision`, if a download left one there."""
    from zoo.hub_download import cached_commit

    commit = cached_commit(_storage(s), s.revision)
    path = _storage(s) / "snapshots" / commit / name if commit else None
    return path if path is not None and path.is_dir() and not path.is_symlink() else None


def fetch_entry(name: str, *, repo_id: str | None = None, revision: str | None = None,
                token: str | bool | None = None, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Download entry `name` into the Hugging Face cache folder of its repository (or find it there
    when offline or when the Hub is unreachable), verify its files, and return its folder.

    The download is the zoo's own (zoo.hub_download): nothing the server answers decides a path."""
    from zoo.hub_download import download_entry

    check_entry_name(name)
    s = settings(repo_id, revision, token=token, cache_dir=cache_dir)
    why = "HF_HUB_OFFLINE is set"
    if not s.offline:
        try:
            commit, files = repo_files(s, f"fetching {name}")
            _check_remote_folder(s, name, files)
            cached = _storage(s) / "snapshots" / commit / name
            if not (cached.is_dir() and not cached.is_symlink()):
                with hub_errors(s, f"fetching {name}"):
                    cached = download_entry(*_client_source(s, commit), name, _storage(s))
            verify_entry(cached, name=name)
            _remember_revision(s, commit)
            return cached
        except HubUnreachable as exc:
            why = str(exc)  # fall back to the cache silently, like huggingface_hub itself
    path = _cached_entry(s, name)
    if path is None:
        raise HubError(f"entry {name} of {s.repo_id}@{s.revision} is not in the Hugging Face cache "
                       f"({s.cache_dir}) and {why}")
    verify_entry(path, name=name)
    return path


def pull_entries(names: Sequence[str], entries: Path, *, repo_id: str | None = None, revision: str | None = None,
                 token: str | bool | None = None) -> list[Any]:
    """Fetch and check every entry of `names`, then install them all into `entries/<name>`
    (zoo.pull: nothing is installed unless all pass). Returns zoo.pull.Pulled records."""
    from zoo.pull import check_and_install as pull_checked

    return pull_checked(names, entries, lambda name: fetch_entry(name, repo_id=repo_id, revision=revision, token=token))


def pull_entry(name: str, entries: Path, *, repo_id: str | None = None, revision: str | None = None,
               token: str | bool | None = None) -> Path:
    """Fetch, verify and check entry `name`, then install it into `entries/name`."""
    return pull_entries([name], entries, repo_id=repo_id, revision=revision, token=token)[0].path


def list_remote_entries(*, repo_id: str | None = None, revision: str | None = None,
                        token: str | bool | None = None) -> list[str]:
    s = settings(repo_id, revision, token=token)
    return remote_entries(repo_files(s, "listing entries")[1])


# ------------------------------------------------------------------------------------------------
# upload


def _remote_rows(s: HubSettings, parent: str, repo_files: Sequence[str]) -> list[dict[str, Any]]:
    """The remote benchmark table, read into memory (bounded; nothing is written to disk)."""
    from zoo.artifact import MAX_FILE_BYTES
    from zoo.hub_metadata import METADATA_JSON, rows_from_json
    from zoo.hub_download import read_bytes

    if METADATA_JSON not in repo_files:
        return []
    client, source = _client_source(s, parent)
    data = read_bytes(client, source, source.url("resolve", METADATA_JSON), MAX_FILE_BYTES[".json"],
                      f"reading {METADATA_JSON}")
    try:
        return rows_from_json(json.loads(data.decode("utf-8")))
    except (ValueError, RecursionError) as exc:
        raise HubError(f"{METADATA_JSON} in {s.repo_id} is not a zoo table ({exc}); refusing to overwrite it") from None


def push_entries(entry_dirs: Sequence[Path], *, repo_id: str | None = None, revision: str | None = None,
                 private: bool | None = None, message: str | None = None,
                 token: str | bool | None = None) -> dict[str, Any]:
    """Upload entries (each verified first) as folders of one repository, in one commit, with the
    benchmark table merged with the remote one and the benchmark card regenerated."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    from zoo.hub_metadata import entry_row, merge_rows, table_files
    from zoo.card import render_benchmark_card
    from zoo.entry import read_checked

    if not entry_dirs:
        raise HubError("nothing to push")
    s = settings(repo_id, revision, token=token)
    if s.offline:
        raise HubError("cannot push with HF_HUB_OFFLINE set")
    start = time.perf_counter()
    for d in entry_dirs:
        check_entry_name(d.name)
    manifests = {d.name: verify_entry(d) for d in entry_dirs}  # never publish a broken entry:
    for d in entry_dirs:  # verified files, and contents a pull would accept
        read_checked(d)
    rows = [entry_row(d) for d in entry_dirs]
    api = _api(s)
    with hub_errors(s, "pushing"):
        api.create_repo(s.repo_id, exist_ok=True, private=private, token=s.token)
        parent = check_commit(api.repo_info(s.repo_id, revision=s.revision, token=s.token).sha, "pushing")
        repo_files = api.list_repo_files(s.repo_id, revision=parent, token=s.token)
        table = merge_rows(_remote_rows(s, parent, repo_files), rows)
        root_files = table_files(table)
        root_files["README.md"] = render_benchmark_card(table, repo_id=s.repo_id, tables=sorted(root_files)).encode()
        ops: list[Any] = []
        size = 0
        for d in entry_dirs:
            keep = sorted([*manifests[d.name], MANIFEST])
            stale = [p for p in repo_files if p.startswith(d.name + "/") and p.split("/", 1)[1] not in keep]
            ops += [CommitOperationDelete(path_in_repo=p) for p in stale]
            ops += [CommitOperationAdd(path_in_repo=f"{d.name}/{f}", path_or_fileobj=str(d / f)) for f in keep]
            size += sum((d / f).stat().st_size for f in keep)
        ops += [CommitOperationAdd(path_in_repo=n, path_or_fileobj=data) for n, data in root_files.items()]
        names = [d.name for d in entry_dirs]
        summary = message or f"zoo push {', '.join(names) if len(names) <= 5 else f'{len(names)} entries'}"
        with warnings.catch_warnings():
            # The Hub warns about data files (the Parquet table) in a model repo: intended here.
            warnings.filterwarnings("ignore", message=".*data file.*")
            commit = api.create_commit(s.repo_id, ops, commit_message=summary, revision=s.revision,
                                       parent_commit=parent, token=s.token)
    return {
        "repo_id": s.repo_id,
        "revision": s.revision,
        "commit": commit.oid,
        "commit_url": commit.commit_url,
        "entries": names,
        "entry_bytes": size,
        "table_entries": len(table),
        "seconds": round(time.perf_counter() - start, 3),
    }
