"""The loader, on real files and symlinks in a temporary copy of the tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import router.plugins.loader as loader_module
from router.plugins.loader import Loader, check_paths

from .conftest import USAGE_SOURCE_OK, is_root, write_module

KIND = "usage-source"


def load(loader: Loader, *names: str):
    return loader.load({KIND: list(names)}, only=[KIND])


def only_refusal(result):
    assert len(result.refused) == 1, result.refused
    return result.refused[0]


def test_loads_a_module_and_lists_it(tree: Path, log: list) -> None:
    write_module(tree, KIND, "good", USAGE_SOURCE_OK)
    loader = Loader(root=str(tree), log=log.append)
    result = load(loader, "good")
    assert result.refused == ()
    assert result.loaded[KIND] == ("good",)
    assert [m.name for m in loader.modules(KIND)] == ["good"]
    assert loader.modules(KIND)[0].module.INTERFACE_VERSION == 1
    assert log == []


def test_bad_name(tree: Path, log: list) -> None:
    loader = Loader(root=str(tree), log=log.append)
    refusal = only_refusal(load(loader, "Bad_Name"))
    assert (refusal.code, refusal.name) == ("bad-name", "Bad_Name")
    assert log == [refusal.log_entry()]
    assert log[0]["event"] == "plugin-refused"


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda tree: None, id="no-directory"),
        pytest.param(lambda tree: (tree / KIND / "gone").mkdir(), id="no-init"),
        pytest.param(lambda tree: (tree / KIND / "gone" / "__init__.py").mkdir(parents=True),
                     id="init-is-a-directory"),
        pytest.param(lambda tree: (tree / KIND / "gone").write_text("x"), id="module-is-a-file"),
    ],
)
def test_missing(tree: Path, log: list, make) -> None:
    make(tree)
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "gone"))
    assert refusal.code == "missing"
    assert refusal.kept == ()


def test_missing_kind_directory(tree: Path, log: list) -> None:
    import shutil

    shutil.rmtree(tree / KIND)
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "frames"))
    assert refusal.code == "missing"


def test_symlinked_module_directory(tree: Path, log: list) -> None:
    write_module(tree, KIND, "real", USAGE_SOURCE_OK)
    (tree / KIND / "alias").symlink_to(tree / KIND / "real")
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "alias"))
    assert refusal.code == "symlink"
    assert "alias" in refusal.message


def test_symlinked_init_file(tree: Path, tmp_path: Path, log: list) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("INTERFACE_VERSION = 1\nasync def read_turn(request, deps):\n    return None\n")
    (tree / KIND / "linked").mkdir()
    (tree / KIND / "linked" / "__init__.py").symlink_to(outside)
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "linked"))
    assert refusal.code == "symlink"


def test_symlinked_kind_directory(tree: Path, tmp_path: Path, log: list) -> None:
    other = tmp_path / "elsewhere"
    (tree / KIND).rename(other)
    (tree / KIND).symlink_to(other)
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "frames"))
    assert refusal.code == "symlink"


def test_symlinked_root(tree: Path, tmp_path: Path, log: list) -> None:
    link = tmp_path / "plugins-link"
    link.symlink_to(tree)
    refusal = only_refusal(load(Loader(root=str(link), log=log.append), "frames"))
    assert refusal.code == "symlink"


def test_ancestors_of_the_root_are_not_checked(tree: Path, tmp_path: Path, log: list) -> None:
    # The root sits below a symlinked directory: allowed, as documented.
    link = tmp_path / "via-link"
    link.symlink_to(tree.parent)
    write_module(tree, KIND, "good", USAGE_SOURCE_OK)
    result = load(Loader(root=str(link / "plugins"), log=log.append), "good")
    assert result.refused == ()


def test_swapped_for_a_symlink_after_the_path_checks(
    tree: Path, tmp_path: Path, log: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 3: a link that appears between the path checks and the import."""
    write_module(tree, KIND, "raced", USAGE_SOURCE_OK)
    elsewhere = tmp_path / "elsewhere"
    write_module(elsewhere, KIND, "raced", USAGE_SOURCE_OK)
    real_check = loader_module.check_paths

    def check_then_swap(kind, name, *, root=None):
        answer = real_check(kind, name, root=root)
        module_dir = tree / KIND / "raced"
        os.rename(module_dir, tmp_path / "moved-away")
        module_dir.symlink_to(elsewhere / KIND / "raced")
        return answer

    monkeypatch.setattr(loader_module, "check_paths", check_then_swap)
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "raced"))
    assert refusal.code == "symlink"
    assert "resolves to" in refusal.message


def test_init_swapped_for_a_link_is_not_followed(
    tree: Path, tmp_path: Path, log: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 3's O_NOFOLLOW: the last component turns into a link that
    resolves to itself-like path after the realpath check."""
    path = write_module(tree, KIND, "raced", USAGE_SOURCE_OK)
    real_realpath = os.path.realpath

    def realpath_then_swap(p, *args, **kwargs):
        answer = real_realpath(p, *args, **kwargs)
        if str(p) == str(path):
            os.rename(path, tmp_path / "moved.py")
            os.symlink(tmp_path / "moved.py", path)
        return answer

    monkeypatch.setattr(loader_module.os.path, "realpath", realpath_then_swap)
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "raced"))
    assert refusal.code == "symlink"


def test_unreadable_name_too_long(tree: Path, log: list) -> None:
    # ENAMETOOLONG: the path exists or not, nobody can tell; not "missing".
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "a" * 300))
    assert refusal.code == "unreadable"


@pytest.mark.skipif(is_root(), reason="root reads through permission bits")
def test_unreadable_permission(tree: Path, log: list) -> None:  # pragma: no cover - non-root
    write_module(tree, KIND, "locked", USAGE_SOURCE_OK)
    (tree / KIND / "locked").chmod(0)
    try:
        refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "locked"))
        assert refusal.code == "unreadable"
    finally:
        (tree / KIND / "locked").chmod(0o755)


@pytest.mark.parametrize(
    "source, needle",
    [
        ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
        ("def broken(:\n", "SyntaxError"),
        ("import sys\nsys.exit(3)\n", "SystemExit"),
        ("import a_package_that_is_not_installed\n", "ModuleNotFoundError"),
    ],
)
def test_load_failed_is_told_apart_from_missing(tree: Path, log: list, source, needle) -> None:
    write_module(tree, KIND, "crashes", source)
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "crashes"))
    assert refusal.code == "load-failed"
    assert needle in refusal.message


@pytest.mark.parametrize(
    "source",
    [
        "INTERFACE_VERSION = 1\n",
        "async def read_turn(request, deps):\n    return None\n",
        "INTERFACE_VERSION = 1\nread_turn = 'not a function'\n",
        "INTERFACE_VERSION = 1\ndef read_turn(request, deps):\n    return None\n",
    ],
    ids=["no-function", "no-version", "not-callable", "not-async"],
)
def test_missing_export(tree: Path, log: list, source: str) -> None:
    write_module(tree, KIND, "partial", source)
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "partial"))
    assert refusal.code == "missing-export"


@pytest.mark.parametrize("version", ["2", "True", "'1'"])
def test_interface_version(tree: Path, log: list, version: str) -> None:
    write_module(tree, KIND, "old", f"INTERFACE_VERSION = {version}\n"
                 "async def read_turn(request, deps):\n    return None\n")
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "old"))
    assert refusal.code == "interface-version"


def test_a_refusal_refuses_the_whole_kind_and_keeps_what_it_had(tree: Path, log: list) -> None:
    write_module(tree, KIND, "good", USAGE_SOURCE_OK)
    write_module(tree, KIND, "also-good", USAGE_SOURCE_OK)
    loader = Loader(root=str(tree), log=log.append)
    load(loader, "good")
    refusal = only_refusal(load(loader, "also-good", "nowhere"))
    assert (refusal.code, refusal.name, refusal.kept) == ("missing", "nowhere", ("good",))
    # also-good loaded fine, but the kind as a whole was refused.
    assert loader.loaded()[KIND] == ["good"]
    assert log[-1] == {
        "event": "plugin-refused", "kind": KIND, "name": "nowhere", "code": "missing",
        "message": refusal.message, "kept": ["good"],
    }
    assert loader.refused(KIND) == refusal
    # A later good load clears the refusal.
    load(loader, "also-good")
    assert loader.loaded()[KIND] == ["also-good"]
    assert loader.refused(KIND) is None


def test_unknown_kind_refuses_only_itself(tree: Path, log: list) -> None:
    write_module(tree, KIND, "good", USAGE_SOURCE_OK)
    loader = Loader(root=str(tree), log=log.append)
    result = loader.load({"telepathy": ["x"], KIND: ["good"]})
    assert [(r.kind, r.code) for r in result.refused] == [("telepathy", "unknown-kind")]
    assert result.loaded[KIND] == ("good",)


@pytest.mark.parametrize("value", [[], "usage-source", None, 3])
def test_a_settings_value_that_is_not_an_object_refuses_every_kind(
    tree: Path, log: list, value
) -> None:
    write_module(tree, KIND, "good", USAGE_SOURCE_OK)
    loader = Loader(root=str(tree), log=log.append)
    load(loader, "good")
    result = loader.load(value)
    from router.plugins.kinds import KINDS

    assert sorted(r.kind for r in result.refused) == sorted(KINDS)
    assert {r.code for r in result.refused} == {"invalid-plugins"}
    assert loader.loaded()[KIND] == ["good"]


def test_bad_shape_of_one_kind(tree: Path, log: list) -> None:
    loader = Loader(root=str(tree), log=log.append)
    result = loader.load({KIND: "frames", "search-source": ["a", "b"]})
    assert sorted((r.kind, r.code) for r in result.refused) == [
        ("search-source", "invalid-plugins"), (KIND, "invalid-plugins"),
    ]


def test_an_absent_kind_is_switched_off(tree: Path, log: list) -> None:
    write_module(tree, KIND, "good", USAGE_SOURCE_OK)
    loader = Loader(root=str(tree), log=log.append)
    loader.load({KIND: ["good"]})
    loader.load({})
    assert loader.loaded()[KIND] == []


def test_every_load_reads_the_file_again(tree: Path, log: list) -> None:
    path = write_module(tree, KIND, "changes", USAGE_SOURCE_OK + "MARK = 'first'\n")
    loader = Loader(root=str(tree), log=log.append)
    load(loader, "changes")
    held = loader.modules(KIND)
    path.write_text(path.read_text().replace("first", "second"))
    load(loader, "changes")
    assert loader.modules(KIND)[0].module.MARK == "second"
    assert held[0].module.MARK == "first"  # what a caller holds never changes
    import sys

    assert not [k for k in sys.modules if k.startswith("_router_plugin__")]


def test_top_level_code_runs_before_the_export_check(tree: Path, tmp_path: Path, log: list) -> None:
    """A documented limit: a refused module has still run."""
    marker = tmp_path / "ran"
    write_module(tree, KIND, "runs", f"open({str(marker)!r}, 'w').close()\n")
    refusal = only_refusal(load(Loader(root=str(tree), log=log.append), "runs"))
    assert refusal.code == "missing-export"
    assert marker.exists()


def test_relative_submodule_imports_work(tree: Path, log: list) -> None:
    write_module(tree, KIND, "split", "INTERFACE_VERSION = 1\nfrom .helpers import read_turn\n")
    (tree / KIND / "split" / "helpers.py").write_text(
        "async def read_turn(request, deps):\n    return None\n"
    )
    result = load(Loader(root=str(tree), log=log.append), "split")
    assert result.refused == ()


def test_check_paths_imports_nothing(tree: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    write_module(tree, KIND, "quiet", f"open({str(marker)!r}, 'w').close()\n")
    assert check_paths(KIND, "quiet", root=str(tree)) is None
    assert not marker.exists()
    assert check_paths(KIND, "nope", root=str(tree)).code == "missing"


def test_shipped_modules_all_load() -> None:
    from router.plugins.kinds import KINDS

    loader = Loader(log=lambda entry: pytest.fail(str(entry)))
    for kind in KINDS:
        names = sorted(
            p.name for p in Path(loader.root, kind).iterdir()
            if p.is_dir() and not p.name.startswith("_")
        )
        assert names, f"no {kind} module ships"
        value = names if KINDS[kind].switch == "list" else names[0]
        for name in names if KINDS[kind].switch == "one" else [None]:
            loader.load({kind: name if name else value}, only=[kind])
            assert loader.refused(kind) is None
