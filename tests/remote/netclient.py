"""A client run inside the phone's namespace (``ip netns exec``): it reads a
list of requests as JSON on stdin, makes them with httpx, and prints one
JSON list of answers: ``{status, body}`` or ``{error, kind}``.

Each request: ``{method, url, headers?, json?, cookie?, trust: "ca" |
"system"}``; ``ca`` trusts only the router's CA (``--ca FILE``), ``system``
only the system's store. It refuses to run outside the namespace ``--netns NAME``, so it can
never dial a test address from the root namespace.
"""

from __future__ import annotations

import json
import os
import ssl
import sys

import httpx


def main() -> int:
    netns = sys.argv[sys.argv.index("--netns") + 1]
    if os.stat("/proc/self/ns/net").st_ino != os.stat(f"/run/netns/{netns}").st_ino:
        print(f"netclient: run me inside the network namespace {netns} (ip netns exec {netns} ...)", file=sys.stderr)
        return 2
    ca = sys.argv[sys.argv.index("--ca") + 1]
    answers = []
    for request in json.load(sys.stdin):
        verify = ssl.create_default_context(cafile=ca) if request.get("trust", "ca") == "ca" \
            else ssl.create_default_context()
        try:
            with httpx.Client(verify=verify, timeout=20, cookies=request.get("cookies") or {}) as client:
                response = client.request(request["method"], request["url"], headers=request.get("headers") or {},
                                          json=request.get("json"))
            try:
                body = response.json()
            except ValueError:
                body = response.text
            answers.append({"status": response.status_code, "body": body,
                            "setCookie": response.headers.get("set-cookie")})
        except httpx.HTTPError as exc:
            answers.append({"error": str(exc), "kind": type(exc).__name__})
    print(json.dumps(answers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
