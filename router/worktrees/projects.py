"""The projects: the git repositories sessions may be started in.

``projects.json`` in the settings directory (beside ``plugins.json``),
``{"projects": {NAME: {"path": "/abs/top/level"}}}``, read through the
settings converter (:class:`router.plugins.models.ProjectsDocument`) and
written whole, atomically, 0600. ``router projects add PATH`` refuses a
path that is not a git repository's top-level folder (``not-a-repository``,
with the top level when the path is inside one), a name already taken
(``project-exists``) and a bad name (``bad-name``); ``remove`` an unknown
one (``unknown-project``).

Only this module reads or writes the file; it holds no state of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path
from typing import Final

import attrs

from router.errors import Refusal
from router.plugins.models import ProjectSetting, ProjectsDocument, converter, read_capped, structure
from router.worktrees import git
from router.worktrees.core import name_refusal
from wire.json import JsonError, dumps, loads

__all__ = ["FILE", "Project", "add_project", "find_project", "load_projects", "remove_project"]

FILE: Final = "projects.json"


@attrs.frozen(kw_only=True)
class Project:
    name: str
    path: Path

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "path": str(self.path)}


def _read(settings: Path) -> ProjectsDocument:
    try:
        raw = read_capped(settings / FILE)
    except FileNotFoundError:
        return ProjectsDocument()
    if raw is None:
        raise Refusal("bad-projects", f"{settings / FILE} is larger than a settings file may be; fix or remove it")
    try:
        value = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, JsonError) as exc:
        raise Refusal("bad-projects", f"{settings / FILE} is not JSON: {exc}; fix or remove it") from None
    document = structure(value, ProjectsDocument, what=str(settings / FILE), code="bad-projects")
    if isinstance(document, Refusal):
        raise document
    return document


def _write(settings: Path, document: ProjectsDocument) -> None:
    settings.mkdir(parents=True, exist_ok=True)
    path = settings / FILE
    temporary = path.with_name(f".{FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(dumps(converter.unstructure(document)).encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def load_projects(settings: Path) -> list[Project]:
    """Every project, by name."""
    document = _read(settings)
    return [Project(name=name, path=Path(each.path)) for name, each in sorted(document.projects.items())]


def find_project(settings: Path, name: str) -> Project:
    """The project named ``name``, or (an absolute path) the one whose
    folder that is; ``unknown-project`` or ``not-a-project`` (a path
    outside every listed project) otherwise."""
    projects = load_projects(settings)
    if os.path.isabs(name):
        real = os.path.realpath(name)
        for project in projects:
            if os.path.realpath(project.path) == real:
                return project
        raise Refusal("not-a-project", f"{name} is not a listed project, and sessions start only in one; add it "
                      "with `router projects add PATH` (`router projects` lists them)", path=name)
    for project in projects:
        if project.name == name:
            return project
    known = ", ".join(each.name for each in load_projects(settings)) or "none yet"
    raise Refusal("unknown-project", f"there is no project {name!r} (projects: {known}); add it with "
                  "`router projects add PATH`", project=name)


def _default_name(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", path.name).lstrip(".-_") or "project"


async def add_project(settings: Path, path: Path, name: str | None = None) -> Project:
    """Add the repository whose top-level folder is ``path``."""
    path = Path(os.path.abspath(os.path.expanduser(str(path))))
    top = await git.toplevel(path)
    if top is None:
        raise Refusal("not-a-repository", f"{path} is not in a git repository; `git init` it first, or give the "
                      "path of a repository's top-level folder", path=str(path))
    if os.path.realpath(top) != os.path.realpath(path):
        raise Refusal("not-a-repository", f"{path} is inside the repository at {top}, not its top-level folder; "
                      f"add {top}", path=str(path), toplevel=str(top))
    name = name or _default_name(path)
    refused = name_refusal(name)
    if refused is not None:
        raise refused
    document = _read(settings)
    if name in document.projects:
        raise Refusal("project-exists", f"a project named {name!r} exists ({document.projects[name].path}); "
                      "choose another with --name, or remove it first", project=name)
    projects = {**document.projects, name: ProjectSetting(path=str(path))}
    _write(settings, attrs.evolve(document, projects=projects))
    return Project(name=name, path=path)


def remove_project(settings: Path, name: str) -> Project:
    document = _read(settings)
    if name not in document.projects:
        find_project(settings, name)  # raises unknown-project with the list
    removed = Project(name=name, path=Path(document.projects[name].path))
    _write(settings, attrs.evolve(document, projects={k: v for k, v in document.projects.items() if k != name}))
    return removed
