"""`zoo push` and `zoo pull`: entries of the local zoo root <-> one Hugging Face Hub repository.

    zoo push case 33 --repo-id ORG/NAME     one entry, as folder case-33/ of the repository
    zoo push --all --repo-id ORG/NAME       every good entry of the local root, in one commit
                                            (not `case-N.failed/`, nor one that missed its criterion)
    zoo pull case 33 [--repo-id ORG/NAME]   download, verify, install into the local root

The repository is --repo-id, else $ZOO_REPO_ID; there is no built-in default.
Top level: standard library only; huggingface_hub is imported inside the verbs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

_ENTRY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


def register(sub: argparse._SubParsersAction) -> None:
    from zoo.commands.common import add_common

    for verb, help_text, description in (
        ("push", "upload entries to a Hugging Face Hub repository (one commit)",
         "Upload one entry (or --all entries of the local root) as folders of one Hub model "
         "repository, in one commit, with their cards; the root benchmark table "
         "(benchmark_metadata.json / .csv / .parquet) is merged with the remote one and the "
         "benchmark card regenerated. Each entry is verified against its sha256 sums first."),
        ("pull", "download entries from a Hugging Face Hub repository into the local root",
         "Download an entry (or --all) into the Hugging Face cache, refuse anything that is not "
         "safetensors / JSON / the card, verify every sha256, check every file (config fields "
         "allow-listed and bounded, tensors against the config and finite, circuit inside the "
         "model's graph, folder name against case id) and run the model on its case's inputs "
         "against validation.json's accuracy; only then install it into the local zoo root "
         "atomically. With --all, nothing is installed unless every entry passes. "
         "HF_HUB_OFFLINE=1 pulls from the cache."),
    ):
        p = sub.add_parser(verb, help=help_text, description=description)
        p.add_argument("kind", nargs="?", choices=("case", "planted"), help="what kind of entry")
        p.add_argument("id", nargs="?", help="case number (e.g. 33) or planted model name")
        p.add_argument("--all", action="store_true", help="every entry (push: of the local root, leaving out those whose "
                       "training missed its criterion; pull: of the repository)")
        p.add_argument("--repo-id", metavar="ORG/NAME", help="Hub repository (default $ZOO_REPO_ID)")
        p.add_argument("--revision", metavar="REV", help="branch or commit (default main)")
        if verb == "push":
            p.add_argument("--private", action="store_true", help="create the repository as private")
            p.add_argument("--message", metavar="TEXT", help="commit message")
        add_common(p, kind_id=False)
        p.set_defaults(func=run_push if verb == "push" else run_pull)


def entry_name(kind: str, entry_id: str) -> str:
    """`case-33`, `planted-ioi`: the same rule as rasp_programs.Case.entry_name, without importing it."""
    from zoo.errors import ZooError

    if not _ENTRY_ID.fullmatch(entry_id):
        raise ZooError(f"invalid id {entry_id!r}: expected a case number, package.module:function or a name")
    return f"{kind}-{entry_id.replace(':', '-')}"


def _names(args: argparse.Namespace) -> list[str] | None:
    """Entry names from `kind id`, or None for --all; a one-line error for anything else."""
    from zoo.errors import ZooError

    if args.all:
        if args.kind or args.id:
            raise ZooError("give either `<kind> <id>` or --all, not both")
        return None
    if not (args.kind and args.id):
        raise ZooError(f"`zoo {args.verb}` needs `<kind> <id>` (e.g. `case 33`) or --all")
    return [entry_name(args.kind, args.id)]


def run_push(args: argparse.Namespace) -> int:
    from zoo.artifact import ENTRY_NAME
    from zoo.errors import ZooError
    from zoo.hub import push_entries
    from zoo.paths import entries_dir, zoo_root

    entries = entries_dir(zoo_root(args.root))
    names = _names(args)
    left_out: list[str] = []
    if names is None:  # every good entry: `case-N.failed/` never, nor one whose training missed its criterion
        names = sorted(p.name for p in entries.iterdir() if ENTRY_NAME.fullmatch(p.name)) if entries.is_dir() else []
        left_out = [name for name in names if _missed_criterion(entries / name)]
        names = [name for name in names if name not in left_out]
        if left_out:
            print(f"zoo: left out {', '.join(left_out)}: training did not meet its criterion "
                  "(push one by name to publish it anyway)", file=sys.stderr)
        if not names:
            raise ZooError(f"no entries in {entries} to push (train one with `zoo train case <id>`)")
    dirs: list[Path] = []
    for name in names:
        if not (entries / name).is_dir():
            raise ZooError(f"entry {name} is not in {entries} (train it with `zoo train`, or pass --root)")
        dirs.append(entries / name)
    result = push_entries(dirs, repo_id=args.repo_id, revision=args.revision,
                          private=True if args.private else None, message=args.message)
    if left_out:
        result = {**result, "left_out": left_out}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"pushed {', '.join(result['entries'])} to {result['repo_id']}@{result['commit'][:12]} "
              f"({result['entry_bytes'] / 1024:.1f} KiB, {result['table_entries']} entries in the table, "
              f"{result['seconds']:.2f} s)")
    return 0


def _missed_criterion(entry_dir: Path) -> bool:
    """Whether the entry's training.json says it did not meet its criterion (absent: not known)."""
    try:
        return json.loads((entry_dir / "training.json").read_text()).get("met_criterion") is False
    except (OSError, ValueError, AttributeError):
        return False  # push verifies the entry and reports what is wrong with it


def run_pull(args: argparse.Namespace) -> int:
    import time

    from zoo.hub import check_revision, list_remote_entries, pull_entries
    from zoo.paths import entries_dir, zoo_root

    start = time.perf_counter()
    if args.revision is not None:
        check_revision(args.revision)  # before any request or write
    entries = entries_dir(zoo_root(args.root))
    names = _names(args)
    if names is None:
        names = list_remote_entries(repo_id=args.repo_id, revision=args.revision)
    pulled = pull_entries(names, entries, repo_id=args.repo_id, revision=args.revision)
    result = {"entries": names, "paths": [str(p.path) for p in pulled],
              "checks": {p.name: p.describe() for p in pulled}, "seconds": round(time.perf_counter() - start, 3)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for p in pulled:
            print(f"pulled {p.name} -> {p.path} (verified: {p.describe()})")
    if not names:
        print("the repository holds no entries", file=sys.stderr)
    return 0
