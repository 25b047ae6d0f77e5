"""router._deferred: a module deferred is bound by ``import`` without being
run, runs on its first attribute read (once, whichever thread reads first),
and is then the module itself. Each case in a fresh interpreter, so the
test process's own ``sys.modules`` stays as it was."""

from __future__ import annotations

import subprocess
import sys

from tests.api.processes import REPO

CASE = """
import sys, threading
from router._deferred import defer, is_deferred

defer("ssl", "no_such_module_here")
assert "no_such_module_here" not in sys.modules
import trio  # imports ssl, reads nothing of it
import ssl
assert is_deferred("ssl") and "_ssl" not in sys.modules
stand_in = ssl

seen = []
def read():
    seen.append(ssl.SSLContext)
readers = [threading.Thread(target=read) for _ in range(8)]
for each in readers:
    each.start()
for each in readers:
    each.join()
from ssl import PROTOCOL_TLS_CLIENT, create_default_context
from ssl import *
assert not is_deferred("ssl") and "_ssl" in sys.modules
assert sys.modules["ssl"] is stand_in and type(stand_in) is type(sys)
assert len(seen) == 8 and len(set(seen)) == 1 and SSLContext is seen[0]
assert create_default_context().protocol is PROTOCOL_TLS_CLIENT
try:
    ssl.no_such_name
except AttributeError:
    pass
else:
    raise AssertionError("a name the module does not have")
print("ok")
"""


def test_a_deferred_module_runs_on_its_first_read_and_is_the_module_after() -> None:
    done = subprocess.run([sys.executable, "-c", CASE], capture_output=True, text=True, cwd=REPO, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
