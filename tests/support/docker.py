"""Docker for the tests: a working engine, the images, and labels that clean up.

Nothing here talks to an image registry: none is reachable from CI. The base
image ``router-base:bookworm`` is made on this machine, once, from Debian's
archive (:func:`ensure_base_image`): ``debootstrap --variant=minbase`` of
bookworm with Python 3.11 into a directory, then ``docker import``. The
project's image is built from the repository's ``Dockerfile`` on that base
(``--build-arg BASE=router-base:bookworm``), tagged ``router:<hash>`` by a
hash of every file that goes into it (so it is rebuilt only when they
change) and ``router:latest`` (:func:`ensure_project_image`).

When Docker cannot run here (no client, no engine answering, not root for
``debootstrap``), :func:`require_docker` and the fixtures skip with the
reason, or fail when ``ROUTER_REQUIRE_DOCKER=1`` (CI sets it, so a missing
engine can never turn a red run green).

Builds take a lock file in the test cache (``tests.support.npm.cache_root``)
so two test processes never build the same image twice at once.

Every container, volume and network a test makes carries the label the
``docker_label`` fixture hands it; the fixture removes whatever carries it
afterwards, and :func:`assert_nothing_left` checks that nothing does. Nothing
without the label is ever touched: the engine is shared.

Standard library only at import time (``python3 -m tests.support.warm``
builds the images before the virtual environment exists); pytest is imported
where a fixture or a skip needs it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

from tests.support.npm import cache_root

#: The repository root (this file is tests/support/docker.py).
REPO: Path = Path(__file__).resolve().parents[2]

#: The base image made by debootstrap; the Dockerfile's ``BASE`` in tests.
BASE_IMAGE = "router-base:bookworm"
#: The project image's repository; tags are a content hash and ``latest``.
PROJECT_REPO = "router"
PROJECT_LATEST = f"{PROJECT_REPO}:latest"
#: The label key every test resource carries; its value is unique per test.
TEST_LABEL = "router.test"

#: Debian release and packages of the base (docs/containers.md, "Building on
#: a machine with no registry"): Python 3.11 is bookworm's python3.
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates")
#: Where Debian's update-ca-certificates writes the bundle.
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
#: Local CAs (a TLS-re-signing egress proxy installs its CA here); copied in.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")

#: The files that go into the project image; their hash tags it. Must agree
#: with the Dockerfile's COPY lines and .dockerignore.
IMAGE_INPUTS = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "router", "wire")

# Generous bounds, for a loaded two-core machine: debootstrap fetches about
# 60 MB; a cold project build pip-installs every dependency.
BASE_BUILD_TIMEOUT = 900.0
PROJECT_BUILD_TIMEOUT = 900.0
#: `docker info` answers in well under a second on a live engine.
ENGINE_PROBE_TIMEOUT = 30.0


class DockerUnavailable(RuntimeError):
    """Docker cannot run the tests here; the message says why."""


# -- the engine --------------------------------------------------------------


def docker_binary() -> str:
    """The ``docker`` client on PATH (the static v28 client comes first on
    these machines and negotiates the API down to dockerd 20.10's 1.41)."""
    found = shutil.which("docker")
    if found is None:
        raise DockerUnavailable("no docker client on PATH (Debian: apt-get install docker.io)")
    return found


def docker(*args: str, timeout: float = 120.0, check: bool = True, input: bytes | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run one docker command; with ``check``, a failure raises
    :class:`DockerUnavailable` carrying docker's own words."""
    command = [docker_binary(), *args]
    try:
        done = subprocess.run(
            command, capture_output=True, timeout=timeout, input=input, env=env,
        )
    except subprocess.TimeoutExpired as exc:
        raise DockerUnavailable(f"`docker {' '.join(args[:3])}` took longer than {timeout:.0f} s") from exc
    result = subprocess.CompletedProcess(
        command, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )
    if check and result.returncode != 0:
        tail = " / ".join((result.stderr or result.stdout).strip().splitlines()[-6:])
        raise DockerUnavailable(f"`docker {' '.join(args[:3])}` failed ({result.returncode}): {tail}")
    return result


def engine_version() -> str:
    """The engine's version, or :class:`DockerUnavailable` when none answers."""
    done = docker("info", "--format", "{{.ServerVersion}}", timeout=ENGINE_PROBE_TIMEOUT, check=False)
    version = done.stdout.strip()
    if done.returncode != 0 or not version:
        tail = " / ".join(done.stderr.strip().splitlines()[-3:])
        raise DockerUnavailable(f"no docker engine answers `docker info`: {tail or 'no version reported'}")
    return version


def image_id(name: str) -> str | None:
    done = docker("image", "inspect", "--format", "{{.Id}}", name, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


@contextlib.contextmanager
def _build_lock(name: str) -> Iterator[None]:
    """An exclusive lock file in the test cache, held while one image builds."""
    path = cache_root() / "docker" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- the base image ------------------------------------------------------------


def ensure_base_image() -> str:
    """``router-base:bookworm``: present, or made now (about a minute)."""
    if image_id(BASE_IMAGE):
        return BASE_IMAGE
    with _build_lock("base"):
        if image_id(BASE_IMAGE):  # another process built it while we waited
            return BASE_IMAGE
        build_base_image(BASE_IMAGE)
    return BASE_IMAGE


def build_base_image(name: str) -> None:
    """Make the base image ``name`` by debootstrap (docs/containers.md,
    "Building on a machine with no registry"); :func:`ensure_base_image`
    calls it once per machine."""
    debootstrap = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None)
    if debootstrap is None:
        raise DockerUnavailable("debootstrap is not installed (Debian: apt-get install debootstrap); "
                                f"it makes the base image {name}")
    if os.geteuid() != 0:
        raise DockerUnavailable(f"making the base image {name} needs root (debootstrap and chroot)")
    work = cache_root() / "docker"
    with tempfile.TemporaryDirectory(dir=work, prefix=".base-") as scratch:
        root = Path(scratch) / "root"
        _run([debootstrap, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(root)],
             "debootstrap", timeout=BASE_BUILD_TIMEOUT)
        # The machine's own CAs, so TLS through a re-signing proxy verifies
        # in a build (pip) as it does on the host.
        target = root / "usr/local/share/ca-certificates"
        target.mkdir(parents=True, exist_ok=True)
        for crt in sorted(LOCAL_CAS.glob("*.crt")) if LOCAL_CAS.is_dir() else []:
            shutil.copyfile(crt, target / crt.name)
        _run(["chroot", str(root), "update-ca-certificates"], "update-ca-certificates in the chroot", timeout=120)
        # PEP 668's marker: without it pip installs into the system Python
        # as it does on the public python images, so one Dockerfile serves both.
        for marker in (root / "usr/lib").glob("python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        # Debootstrap's apt lists and caches are not needed in the image.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(root / junk, ignore_errors=True)
        changes = [
            f"ENV PIP_CERT={CA_BUNDLE}",
            f"ENV SSL_CERT_FILE={CA_BUNDLE}",
            f"ENV REQUESTS_CA_BUNDLE={CA_BUNDLE}",
            "ENV LANG=C.UTF-8",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["python3"]',
        ]
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        try:
            args = [docker_binary(), "import"]
            for change in changes:
                args += ["-c", change]
            done = subprocess.run([*args, "-", name], stdin=tar.stdout, capture_output=True,
                                  timeout=BASE_BUILD_TIMEOUT)
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait()
        if done.returncode != 0 or tar.returncode != 0:
            raise DockerUnavailable(f"docker import of {name} failed: {done.stderr.decode(errors='replace').strip()}")


def _run(command: list[str], what: str, *, timeout: float) -> None:
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise DockerUnavailable(f"{what} took longer than {timeout:.0f} s") from exc
    if done.returncode != 0:
        tail = " / ".join((done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-6:])
        raise DockerUnavailable(f"{what} failed ({done.returncode}): {tail}")


# -- the project image ---------------------------------------------------------


def _input_files() -> list[Path]:
    files: list[Path] = []
    for name in IMAGE_INPUTS:
        path = REPO / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(
                p for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
            )
    return sorted(files)


def image_inputs_hash(base: str = BASE_IMAGE) -> str:
    """A hash of what goes into the project image: its files and the base's id."""
    digest = hashlib.sha256()
    digest.update((image_id(base) or base).encode())
    for path in _input_files():
        digest.update(b"\0" + str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def ensure_project_image() -> str:
    """The project image on the local base, tagged by content; also ``router:latest``."""
    base = ensure_base_image()
    tag = f"{PROJECT_REPO}:{image_inputs_hash(base)}"
    if not image_id(tag):
        with _build_lock("project"):
            if not image_id(tag):
                build_project_image(tag, base=base)
    if image_id(PROJECT_LATEST) != image_id(tag):
        docker("tag", tag, PROJECT_LATEST)
    return tag


def build_project_image(tag: str, *, base: str = BASE_IMAGE, buildkit: bool = False,
                        client: str | None = None, context: Path = REPO, no_cache: bool = False) -> float:
    """Build the repository's Dockerfile as ``tag``; answers the seconds it took.

    The legacy builder (``DOCKER_BUILDKIT=0``) works with every client,
    the static one included; ``--force-rm`` removes the intermediate
    container of a failed step, which it otherwise leaves behind.
    """
    env = dict(os.environ, DOCKER_BUILDKIT="1" if buildkit else "0")
    command = [client or docker_binary(), "build", "--build-arg", f"BASE={base}", "-t", tag,
               "-q", str(context)]
    if not buildkit:
        command.insert(2, "--force-rm")
    if no_cache:
        command.insert(2, "--no-cache")
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, timeout=PROJECT_BUILD_TIMEOUT, env=env)
    except subprocess.TimeoutExpired as exc:
        raise DockerUnavailable(f"building {tag} took longer than {PROJECT_BUILD_TIMEOUT:.0f} s") from exc
    if done.returncode != 0:
        tail = " / ".join(done.stderr.decode(errors="replace").strip().splitlines()[-10:])
        raise DockerUnavailable(f"building {tag} from the Dockerfile failed: {tail}")
    return time.monotonic() - started


# -- for tests -------------------------------------------------------------------


def _unavailable(reason: str) -> None:
    import pytest

    if os.environ.get("ROUTER_REQUIRE_DOCKER") == "1":
        pytest.fail(f"docker is required (ROUTER_REQUIRE_DOCKER=1) but unavailable: {reason}")
    pytest.skip(f"docker unavailable: {reason}")


def require_docker() -> str:
    """The engine's version; a skip (a failure under CI) when none answers."""
    try:
        return engine_version()
    except DockerUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable: skip and fail raise


def require_project_image() -> str:
    """The project image's tag; a skip (a failure under CI) when it cannot be had."""
    require_docker()
    try:
        return ensure_project_image()
    except DockerUnavailable as exc:
        _unavailable(str(exc))
        raise


def labelled(kind: str, label: str) -> list[str]:
    """The ids of the ``kind`` (container, volume, network) carrying ``label``."""
    listing = {"container": ("ps", "-aq"), "volume": ("volume", "ls", "-q"), "network": ("network", "ls", "-q")}[kind]
    done = docker(*listing, "--filter", f"label={TEST_LABEL}={label}")
    return done.stdout.split()


def remove_labelled(label: str) -> None:
    """Remove every container, volume and network carrying ``label`` (only those)."""
    containers = labelled("container", label)
    if containers:
        docker("rm", "-f", "-v", *containers, check=False)
    volumes = labelled("volume", label)
    if volumes:
        docker("volume", "rm", "-f", *volumes, check=False)
    networks = labelled("network", label)
    if networks:
        docker("network", "rm", *networks, check=False)


def assert_nothing_left(label: str) -> None:
    left = {kind: labelled(kind, label) for kind in ("container", "volume", "network")}
    assert not any(left.values()), f"left behind with {TEST_LABEL}={label}: {left}"


def new_label() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


# -- the launcher module, and contexts for it ------------------------------------


def load_docker_launcher() -> Any:
    """The ``docker`` launcher module, through the plug-in loader once it
    knows the ``launcher`` kind, else imported by path as the loader does."""
    from router.plugins.kinds import KINDS

    if "launcher" in KINDS:
        from router.plugins.loader import import_module

        loaded = import_module("launcher", "docker")
        assert not hasattr(loaded, "code"), loaded
        return loaded.module  # type: ignore[union-attr]
    path = REPO / "router" / "plugins" / "launcher" / "docker" / "__init__.py"
    spec = importlib.util.spec_from_file_location("_router_test_launcher_docker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch_context(label: str, image: str, *, session: str = "root", harness: str = "echo",
                   options: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A fresh launch context (new runtime id and token) for one start of
    ``session``, labelled ``router.test=label`` (the launcher interface's
    ``context``)."""
    return {
        "session": session,
        "runtime": f"r-{secrets.token_hex(8)}",
        "token": secrets.token_hex(16),
        "harness": harness,
        "env": dict(env or {}),
        "labels": {TEST_LABEL: label, "router.session": session},
        "options": {"image": image, **(options or {})},
        "workspace": f"router-ws-{label}-{session}",
    }


def renewed(context: dict[str, Any]) -> dict[str, Any]:
    """The same session's context for a replacement: a new runtime and token."""
    return {**context, "runtime": f"r-{secrets.token_hex(8)}", "token": secrets.token_hex(16)}


# -- fixtures (pytest is there whenever they are used; warm.py runs without it) --

try:
    import pytest
except ImportError:  # pragma: no cover - python3 -m tests.support.warm, before the venv
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def docker_image() -> str:
        """The project image (built once per content hash), e.g. ``router:3f9c...``.

        Run this tag, not ``router:latest``: the engine is shared, and
        ``latest`` is whichever checkout built last."""
        return require_project_image()

    @pytest.fixture
    def docker_label() -> Iterator[str]:
        """A label value unique to this test (key :data:`TEST_LABEL`); whatever
        carries it is removed afterwards, and the test fails if removal left any."""
        require_docker()
        label = new_label()
        try:
            yield label
        finally:
            remove_labelled(label)
            assert_nothing_left(label)
