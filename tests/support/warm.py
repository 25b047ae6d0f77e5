"""Fetch every npm peer the tests use into the test cache, and build the
Docker images, once, up front.

    python3 -m tests.support.warm

``.ci/run`` runs this before the test command so the downloads (the
reference daemon, and the Claude Code and Codex native builds, several
hundred MB) and the image builds (the debootstrap base, about a minute, and
the project's image on it) happen outside any test's timeout. Standard
library only: it runs before the virtual environment exists. Exits 1 and
says which step failed; the tests would then fail too
(``ROUTER_REQUIRE_NPM=1``, ``ROUTER_REQUIRE_DOCKER=1``), with the same reason.
"""

from __future__ import annotations

import sys
import time

from tests.support.claude import claude_binary_path
from tests.support.docker import DockerUnavailable, ensure_project_image
from tests.support.npm import AGENTS_SPEC, CLAUDE_CODE_ACP_SPEC, CODEX_ACP_SPEC, CODEX_SPEC, NpmUnavailable, npm_install, npm_package


def main() -> int:
    failed = 0
    fetches = [
        (AGENTS_SPEC, lambda: npm_package(AGENTS_SPEC)),
        ("claude", claude_binary_path),
        (CODEX_SPEC, lambda: npm_package(CODEX_SPEC)),
        (CLAUDE_CODE_ACP_SPEC, lambda: npm_install(CLAUDE_CODE_ACP_SPEC)),
        (CODEX_ACP_SPEC, lambda: npm_package(CODEX_ACP_SPEC)),
        ("@agentclientprotocol/sdk@2.4.0", lambda: npm_install("@agentclientprotocol/sdk@2.4.0")),
        ("docker images", ensure_project_image),
    ]
    for name, fetch in fetches:
        start = time.monotonic()
        try:
            path = fetch()
        except (NpmUnavailable, DockerUnavailable) as exc:
            failed += 1
            print(f"warm: {name}: {exc}", file=sys.stderr)
            continue
        print(f"warm: {name}: {path} ({time.monotonic() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
