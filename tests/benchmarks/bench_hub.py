"""Push / pull wall times against the local Hub server, and entry / repository sizes. Prints JSON.

    python tests/benchmarks/bench_hub.py [case ids...]     (default: 3 13 33)

Entries are built from compiled cases (no training), as the tests do. Not part of the test suite.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: hub_server


def main(case_ids: list[str]) -> dict:
    from hub_server import HubServer, build_entry

    tmp = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    hub = HubServer().start()
    os.environ.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp / "hf"), HF_HUB_DISABLE_XET="1",
                      ZOO_HOME=str(tmp / "empty"), ZOO_REPO_ID="bench/zoo")
    os.environ.pop("HF_HUB_OFFLINE", None)
    from rasp_programs.lookup import get_case
    from rasp_programs.compile import compile_case
    from zoo.hub import pull_entry, push_entries
    from zoo.loader import load

    entries = []
    for cid in case_ids:
        entries.append(build_entry(compile_case(get_case(cid), tmp / "compiled"), tmp / "src" / "entries"))
    sizes = {d.name: sum(p.stat().st_size for p in d.iterdir()) for d in entries}
    push_one = []
    for d in entries:
        t = time.perf_counter()
        push_entries([d], repo_id="bench/zoo")
        push_one.append(time.perf_counter() - t)
    t = time.perf_counter()
    push_entries(entries, repo_id="bench/zoo-all")
    push_all = time.perf_counter() - t
    pulls = []
    for d in entries:
        t = time.perf_counter()
        pull_entry(d.name, tmp / "pulled" / "entries", repo_id="bench/zoo")
        pulls.append(time.perf_counter() - t)
    t = time.perf_counter()
    entry = load(entries[0].name, repo_id="bench/zoo-all", source="hub")
    _ = entry.state_dict
    load_s = time.perf_counter() - t
    repo_files = hub.files("bench/zoo")
    hub.stop()
    return {
        "cases": case_ids,
        "entry_bytes": sizes,
        "repository_bytes": sum(len(b) for b in repo_files.values()),
        "repository_files": len(repo_files),
        "root_files_bytes": {n: len(b) for n, b in repo_files.items() if "/" not in n},
        "push_one_entry_s": [round(x, 3) for x in push_one],
        "push_all_in_one_commit_s": round(push_all, 3),
        "pull_one_entry_s": [round(x, 3) for x in pulls],
        "load_from_hub_fresh_cache_s": round(load_s, 3),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:] or ["3", "13", "33"]), indent=1))
