"""Which Hub repository: only one the user names (argument or $ZOO_REPO_ID), never a guess."""

from __future__ import annotations

import pytest

from zoo.errors import ZooError


def test_load_without_local_entry_or_repository_says_how_to_name_one(monkeypatch):
    import zoo

    monkeypatch.delenv("ZOO_REPO_ID", raising=False)
    with pytest.raises(ZooError, match=r"--repo-id ORG/NAME or set \$ZOO_REPO_ID"):
        zoo.load("case-33")


@pytest.mark.parametrize("bad", ["noslash", "a/b/c", "../x", "org/"])
def test_malformed_repository_ids_are_refused(bad):
    from zoo.hub import resolve_repo_id

    with pytest.raises(ZooError, match="invalid repository id"):
        resolve_repo_id(bad)


def test_environment_names_the_repository(monkeypatch):
    from zoo.hub import resolve_repo_id

    monkeypatch.setenv("ZOO_REPO_ID", "my-lab/zoo")
    assert resolve_repo_id() == "my-lab/zoo"
    assert resolve_repo_id("other/zoo") == "other/zoo"
