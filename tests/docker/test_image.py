"""The project's image: built from the repository's Dockerfile on the local
base, by either builder, holding the project as a regular install, with
``router daemon`` as its entry point."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.docker import (
    BASE_IMAGE,
    DockerUnavailable,
    TEST_LABEL,
    build_project_image,
    docker,
    image_id,
    image_inputs_hash,
)


def run_in(image: str, label: str, *command: str) -> str:
    done = docker("run", "--rm", "--label", f"{TEST_LABEL}={label}", "--entrypoint", command[0], image, *command[1:])
    return done.stdout


def test_the_image_holds_the_project_installed_not_editable(docker_image: str, docker_label: str) -> None:
    probe = (
        "import json, router, wire, importlib.metadata as m, pathlib;"
        "p = pathlib.Path(router.__file__).parent;"
        "print(json.dumps({'router': str(p), 'wire': wire.__file__, 'version': m.version('router'),"
        " 'launcher': (p / 'plugins/launcher/docker/__init__.py').is_file(),"
        " 'page': (p / 'api/page.html').is_file()}))"
    )
    found = json.loads(run_in(docker_image, docker_label, "python3", "-c", probe))
    assert found["router"].startswith("/usr/") and ("site-packages" in found["router"] or "dist-packages" in found["router"])
    assert "/tmp/src" not in found["router"] and "/tmp/src" not in found["wire"]
    assert found["version"] == "0.1.0" and found["launcher"] and found["page"]
    # Nothing but the package went in: no tests, no .git, no virtual environment.
    listing = run_in(docker_image, docker_label, "sh", "-c", "ls -a / /workspace; test ! -e /src && test ! -e /tmp/src && echo no-src")
    assert "no-src" in listing and ".venv" not in listing and "tests" not in listing.split()


def test_the_entry_point_is_router_daemon_with_the_echo_and_port_8080(docker_image: str) -> None:
    [config] = json.loads(docker("image", "inspect", docker_image).stdout)
    assert config["Config"]["Entrypoint"] == ["router", "daemon", "--host", "0.0.0.0"]
    assert config["Config"]["Cmd"] == ["--adapter", "echo"]
    env = dict(item.split("=", 1) for item in config["Config"]["Env"])
    assert env["CF_HARNESS_PORT"] == "8080" and env["HOME"] == "/workspace/home"
    assert "8080/tcp" in config["Config"]["ExposedPorts"]


def test_the_tag_is_the_hash_of_what_goes_in(docker_image: str) -> None:
    assert docker_image == f"router:{image_inputs_hash()}"
    assert image_id("router:latest") == image_id(docker_image)


def test_the_dockerfile_builds_with_buildkit_too(docker_image: str) -> None:
    """The same Dockerfile under Debian's client with BuildKit (the tests'
    own image comes from the legacy builder, which every client has)."""
    client = "/usr/bin/docker"
    if not os.access(client, os.X_OK):
        if os.environ.get("ROUTER_REQUIRE_DOCKER") == "1":
            pytest.fail("Debian's docker client (/usr/bin/docker, package docker.io) is missing")
        pytest.skip("Debian's docker client (/usr/bin/docker) is not installed; BuildKit is tried with it")
    tag = f"router-buildkit-test:{image_inputs_hash()}"
    try:
        build_project_image(tag, base=BASE_IMAGE, buildkit=True, client=client)
        [config] = json.loads(docker("image", "inspect", tag).stdout)
        assert config["Config"]["Entrypoint"] == ["router", "daemon", "--host", "0.0.0.0"]
    except DockerUnavailable as exc:
        pytest.fail(str(exc))
    finally:
        docker("rmi", "-f", tag, check=False)
