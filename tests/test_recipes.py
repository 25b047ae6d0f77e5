"""Every command block a person is told to paste runs, as pasted.

A fenced block whose info string is ``sh recipe`` (GitHub still highlights
it as ``sh``) in ``README.md`` or ``docs/*.md`` is a recipe. The blocks of
one document run in order, in one fresh directory, with one environment: a
fresh ``HOME``, data, settings and run directories, and this checkout's
``router`` first on the ``PATH``, exactly as a person with the README's
virtual environment would have it. Words after ``recipe``:

- ``background``: a long-running program (``router serve``, a daemon): the
  block is started and the next one runs once the program has printed its
  first line (what each of ours prints when it is ready), or ``ready=N``
  lines (a block that starts several); it is stopped (its whole process
  group) when the document's recipes end.
- ``needs=postgres``: ``PGURL`` names a fresh database of a private
  PostgreSQL cluster (the recipe says ``PGURL=${PGURL:-…}``, so a person's
  own value wins when pasted).
- ``needs=docker``: skipped unless a Docker engine answers (the tests'
  base image made first, as the doc's own steps make it).
- ``cwd=repo``: run in this checkout instead (a recipe that builds from
  it, like ``docker build .``).

A ```` ```text ```` block right after a recipe is its expected output:
each of its non-empty lines must appear in what the recipe printed.

Every other block is prose: never run (a doc can show a command without
promising it runs here, like ``claude --plugin-dir plugin``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import attrs
import pytest

from router.cli import COMMANDS
from tests.support.postgres import postgres  # noqa: F401  (the fixture, asked for by name below)

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
#: Seconds a background program may take to print its first line, and a
#: recipe to finish (bounds, not figures: a loaded machine is slow).
READY_BOUND = 90
RUN_BOUND = 240


@attrs.frozen
class Recipe:
    document: Path
    line: int
    body: str
    background: bool
    needs: frozenset[str]
    expected: tuple[str, ...]
    in_repo: bool = False
    ready: int = 1

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def recipes(path: Path) -> Iterator[Recipe]:
    text = path.read_text()
    fences = list(FENCE.finditer(text))
    for index, fence in enumerate(fences):
        words = fence["info"].split()
        if words[:2] != ["sh", "recipe"]:
            continue
        expected: tuple[str, ...] = ()
        following = fences[index + 1] if index + 1 < len(fences) else None
        if following is not None and following["info"].strip() == "text" \
                and not text[fence.end():following.start()].strip():
            expected = tuple(line.strip() for line in following["body"].splitlines() if line.strip())
        needs = frozenset(word.split("=", 1)[1] for word in words[2:] if word.startswith("needs="))
        yield Recipe(document=path, line=text.count("\n", 0, fence.start()) + 1, body=fence["body"],
                     background="background" in words[2:], needs=needs, expected=expected,
                     in_repo="cwd=repo" in words[2:],
                     ready=next((int(word[6:]) for word in words[2:] if word.startswith("ready=")), 1))


def _documents_with_recipes() -> list[Path]:
    return [path for path in DOCUMENTS if any(recipes(path))]


def test_the_recipes_are_found() -> None:
    # The runner below runs something: the README's quick start is a recipe.
    assert any(recipe.document.name == "README.md" for recipe in recipes(REPO / "README.md"))


def _environment(work: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ROUTER_", "XDG_", "CF_HARNESS_", "PYTEST_"))}
    for name in ("home", "data", "settings"):
        (work / name).mkdir(mode=0o700)
    # A short run directory, as a login session's is: a Unix socket's path
    # is at most 108 bytes, and pytest's folders are long.
    run = tempfile.mkdtemp(prefix="rr-", dir="/tmp")
    env.update(HOME=str(work / "home"), ROUTER_DATA_DIR=str(work / "data"), ROUTER_SETTINGS_DIR=str(work / "settings"),
               XDG_RUNTIME_DIR=run, PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               PYTHONPATH=str(REPO))
    return env


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("document", _documents_with_recipes(), ids=lambda path: str(path.relative_to(REPO)))
def test_the_recipes_of_a_document_run_as_pasted(document: Path, tmp_path: Path,
                                                 request: pytest.FixtureRequest) -> None:
    env = _environment(tmp_path)
    found = list(recipes(document))
    if any("postgres" in recipe.needs for recipe in found):
        cluster = request.getfixturevalue("postgres")
        env["PGURL"] = cluster.create_database()
    if any("docker" in recipe.needs for recipe in found):
        from tests.support.docker import ensure_base_image, require_docker

        require_docker()  # skips, or fails under ROUTER_REQUIRE_DOCKER=1, when no engine answers
        ensure_base_image()
    background: list[subprocess.Popen[bytes]] = []
    try:
        for recipe in found:
            script = tmp_path / f"recipe-{recipe.line}.sh"
            script.write_text(recipe.body)
            command = ["bash", "-euo", "pipefail", str(script)]
            if recipe.background:
                log = open(tmp_path / f"recipe-{recipe.line}.log", "wb")  # noqa: SIM115 (kept for the process)
                process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=log,
                                           start_new_session=True)
                background.append(process)
                assert process.stdout is not None
                first = _first_line(process, tmp_path / f"recipe-{recipe.line}.log", recipe)
                for line in recipe.expected:
                    assert line in first, f"{recipe.name}: expected {line!r} in {first!r}"
                continue
            done = subprocess.run(command, cwd=REPO if recipe.in_repo else tmp_path, env=env, capture_output=True,
                                  timeout=RUN_BOUND, start_new_session=True)
            out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
            assert done.returncode == 0, f"{recipe.name} exited {done.returncode}:\n{out}\n{err}"
            for line in recipe.expected:
                assert line in out, f"{recipe.name}: expected {line!r} in its output:\n{out}\n{err}"
    finally:
        for process in reversed(background):
            _stop(process)
        shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)


def _first_line(process: subprocess.Popen[bytes], log: Path, recipe: Recipe) -> str:
    """The background program's first ``recipe.ready`` lines, read with a
    bound (a thread: a pipe read cannot be given a deadline portably)."""
    import threading

    got: list[bytes] = []

    def read() -> None:
        for _ in range(recipe.ready):
            got.append(process.stdout.readline())  # type: ignore[union-attr]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(READY_BOUND)
    line = b"".join(got).decode(errors="replace")
    assert len(got) == recipe.ready and got[-1], (
        f"{recipe.name} printed {line!r}, not {recipe.ready} line(s), within {READY_BOUND} s (exit {process.poll()}): "
        f"{log.read_text()}")
    # Keep draining its output so it never blocks on a full pipe.
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()  # type: ignore[union-attr]
    return line


# --------------------------------------------------------------------------- every other command block

#: What a ``sh`` block that is not a recipe may be, by the word after ``sh``:
#: ``synopsis`` (a command's shape, with placeholders: its ``router`` and
#: ``bench/`` flags are checked against the programs' own ``--help``),
#: ``bench`` (benchmark runs: long, for a quiet machine; flags checked the
#: same way) and ``external`` (other programs' commands: npm, claude, git,
#: debootstrap, pytest; not ours to check).
KINDS = ("recipe", "synopsis", "bench", "external")
INVOCATION = re.compile(r"(?:^|\s)(?:(?:\.venv/bin/)?router\s+(?P<command>[a-z][a-z-]*)|\S*bench/(?P<bench>[a-z_]+)\.py)"
                        r"(?P<rest>(?:\s+\S+)*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
SEPARATORS = re.compile(r"&&|\|\||[|;&]|#.*$")


def _sh_blocks() -> Iterator[tuple[Path, int, str, str]]:
    for path in DOCUMENTS:
        text = path.read_text()
        for fence in FENCE.finditer(text):
            words = fence["info"].split()
            if words[:1] == ["sh"]:
                yield path, text.count("\n", 0, fence.start()) + 1, (words[1] if len(words) > 1 else ""), fence["body"]


def test_every_sh_block_says_what_it_is() -> None:
    untagged = [f"{path.relative_to(REPO)}:{line}" for path, line, kind, _ in _sh_blocks() if kind not in KINDS]
    assert untagged == [], f"tag these blocks `sh recipe|synopsis|bench|external` (tests/test_recipes.py): {untagged}"


def _help(argv: list[str], cache: dict[tuple[str, ...], str]) -> str:
    key = tuple(argv)
    if key not in cache:
        done = subprocess.run([*argv, "--help"], capture_output=True, text=True, cwd=REPO, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        cache[key] = done.stdout if done.returncode == 0 else ""
    return cache[key]


def _router_help(words: list[str], cache: dict[tuple[str, ...], str]) -> tuple[list[str], str]:
    """The longest subcommand path among ``words`` that ``router`` knows, and its help."""
    path = []
    for word in words:
        if not re.fullmatch(r"[a-z][a-z-]*", word):
            break
        path.append(word)
    while path:
        text = _help([sys.executable, "-m", "router", *path], cache)
        if text:
            return path, text
        path.pop()
    return [], ""


def test_the_flags_every_command_block_shows_exist() -> None:
    cache: dict[tuple[str, ...], str] = {}
    wrong: list[str] = []
    for path, line, kind, body in _sh_blocks():
        if kind not in ("recipe", "synopsis", "bench"):
            continue
        for text in body.splitlines():
            for part in SEPARATORS.split(text):
                match = INVOCATION.search(part)
                if match is None or (match["command"] and match["command"] not in COMMANDS):
                    continue
                words = match["rest"].split()
                if "--" in words:  # what follows is another program's (`router service install -- ...`)
                    words = words[: words.index("--")]
                if match["bench"]:
                    help_text = _help([sys.executable, f"bench/{match['bench']}.py"], cache)
                    where = f"bench/{match['bench']}.py"
                else:
                    subcommand, help_text = _router_help([match["command"], *words], cache)
                    where = "router " + " ".join(subcommand)
                    if not subcommand:
                        wrong.append(f"{path.relative_to(REPO)}:{line}: no router command in {part.strip()!r}")
                        continue
                for flag in FLAG.findall(" ".join(words)):
                    if flag not in help_text:
                        wrong.append(f"{path.relative_to(REPO)}:{line}: {where} has no {flag} ({part.strip()!r})")
    assert wrong == [], "\n".join(wrong)
