"""Containers benchmark: a session per container, through the ``docker``
launcher module and a real host. Prints a table.

    .venv/bin/python bench/containers.py [--repeat 5] [--sizes 10,25,50]
                                         [--concurrency 4] [--network bridge]

``--builds`` first times the image builds, into scratch tags it removes:
the base by debootstrap, the project's image cold (``--no-cache``), again
with nothing changed, and after a change to the code (a copy of the
context with one line added).

Needs a Docker engine; builds the images first when missing (the base by
debootstrap, about a minute, then the project's; tests/support/docker.py).
Everything it starts carries the label ``router.test=bench-<hex>`` and is
removed at the end, whatever happens.

1. **Time to the first frame**, from a delivery (``HostSession.submit`` of
   an echo prompt) to the host's ``operation-start`` event for it (the
   daemon's first frame of the operation, recorded by the host):

   - *cold*: the image is there, no container: the clock starts before
     ``launcher.start``, so it covers ``docker run``, the daemon's start,
     the health wait, the host's connection and ``hello``, the delivery;
   - *warm*: the container runs and the host is connected (one turn done);
   - *replacement*: the container was killed (``docker kill``, seen by
     ``launcher.wait``); the clock starts at the delivery of the next turn,
     which starts a new container on the same workspace volume, a host on it
     that restores the session from its record, and delivers.

   Median and worst of ``--repeat`` runs, each a fresh session.

2. **Containers per host**: for each of ``--sizes``, start that many echo
   containers (``--concurrency`` starts at a time), one session and one
   host each, one turn on each, then measure: the wall time to have them
   all answering, and per session: the containers' own memory (``docker
   stats``, the cgroup's), Docker's runtime beside each (the PSS of its
   ``containerd-shim`` and ``docker-proxy``), this process's RSS growth
   (the hosts: one per session here), their total, and the machine's memory
   in use (``MemTotal - MemAvailable``) over the figure before (noisy when
   others share the machine). A size
   that cannot be reached within ``--level-timeout`` seconds stops the
   series there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import trio  # noqa: E402

from router.host import DaemonEndpoint, Host, HostSettings, OperationStarted, Store  # noqa: E402
from tests.support.docker import (  # noqa: E402
    BASE_IMAGE,
    IMAGE_INPUTS,
    TEST_LABEL,
    build_base_image,
    build_project_image,
    docker,
    ensure_project_image,
    launch_context,
    load_docker_launcher,
    remove_labelled,
    renewed,
)

#: Reconnect quickly, as the fault tests do: a killed daemon is the point.
SETTINGS = HostSettings(reconnect_base=0.02, reconnect_cap=0.25)


def proc_kib(path: str, *fields: str) -> dict[str, int]:
    """``Name:   123 kB`` lines of a /proc file, by name (missing: 0)."""
    found = dict.fromkeys(fields, 0)
    try:
        with open(path) as lines:
            for line in lines:
                name, _, rest = line.partition(":")
                if name in found:
                    found[name] = int(rest.split()[0])
    except OSError:
        pass
    return found


def rss_kib() -> int:
    return proc_kib("/proc/self/status", "VmRSS")["VmRSS"]


def machine_used_kib() -> int:
    memory = proc_kib("/proc/meminfo", "MemTotal", "MemAvailable")
    return memory["MemTotal"] - memory["MemAvailable"]


def containers_memory_kib(label: str) -> int:
    """The sum of ``docker stats``' memory use of the label's containers."""
    ids = docker("ps", "-q", "--filter", f"label={TEST_LABEL}={label}").stdout.split()
    if not ids:
        return 0
    out = docker("stats", "--no-stream", "--format", "{{json .}}", *ids, timeout=300).stdout
    total = 0.0
    units = {"B": 1 / 1024, "KiB": 1, "MiB": 1024, "GiB": 1024 * 1024}
    for line in out.splitlines():
        used = json.loads(line)["MemUsage"].split("/")[0].strip()
        for unit in sorted(units, key=len, reverse=True):
            if used.endswith(unit):
                total += float(used[: -len(unit)]) * units[unit]
                break
    return int(total)


def runtime_overhead_kib(containers: set[str], ports: set[str]) -> int:
    """The proportional memory (PSS) of what Docker runs on the host beside
    each container: its ``containerd-shim`` and, in bridge mode, the
    ``docker-proxy`` of its published port. Only processes with those names
    are looked at, and only their own command line."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as comm:
                name = comm.read().strip()
            if not name.startswith(("containerd-shim", "docker-proxy")):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        value = lambda flag: argv[argv.index(flag) + 1] if flag in argv[:-1] else None  # noqa: E731
        if value("-id") in containers or value("-host-port") in ports:
            total += proc_kib(f"/proc/{pid}/smaps_rollup", "Pss")["Pss"]
    return total


class Session:
    """One session: its launch context, its container and its host."""

    def __init__(self, launcher: Any, context: dict[str, Any], store: Store) -> None:
        self.launcher, self.context, self.store = launcher, context, store
        self.container: str | None = None
        self.port: str | None = None
        self.host: Host | None = None

    async def launch(self, nursery: trio.Nursery) -> None:
        started = await self.launcher.start(self.context)
        if "code" in started:
            raise RuntimeError(f"start refused: {started}")
        self.container = started["container"]
        self.port = started["url"].rsplit(":", 1)[1]
        self.host = Host(self.store, DaemonEndpoint(started["url"], self.context["token"]), SETTINGS)
        await nursery.start(self.host.run)

    async def first_frame(self, text: str) -> None:
        """Deliver ``text`` and return at the operation's first frame."""
        assert self.host is not None
        operation = f"op-{uuid.uuid4().hex[:8]}"
        session = self.host.session()
        async with session.events() as stream:
            await session.submit(text, operation_id=operation)
            async for batch in stream:
                if any(isinstance(e, OperationStarted) and e.operation_id == operation for e in batch):
                    break
        await session.wait(operation)

    async def kill(self) -> None:
        assert self.container is not None
        docker("kill", self.container)
        ended = await self.launcher.wait(self.context, self.container)
        assert ended["state"] == "killed", ended
        await self.launcher.stop(self.context, self.container)
        assert self.host is not None
        await self.host.aclose()

    async def close(self) -> None:
        if self.host is not None:
            await self.host.aclose()
        if self.container is not None:
            await self.launcher.stop(self.context, self.container)
        await self.launcher.remove_workspace(self.context)


async def first_frames(launcher: Any, image: str, label: str, network: str, repeat: int, work: Path) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"cold": [], "warm": [], "replacement": []}
    for index in range(repeat):
        with Store(work / f"first-{index}.db") as store:
            async with trio.open_nursery() as nursery:
                context = launch_context(label, image, session=f"first-{index}", options={"network": network})
                session = Session(launcher, context, store)
                began = time.perf_counter()
                await session.launch(nursery)
                await session.first_frame("cold")
                timings["cold"].append(time.perf_counter() - began)

                began = time.perf_counter()
                await session.first_frame("warm")
                timings["warm"].append(time.perf_counter() - began)

                await session.kill()
                session.context = renewed(context)
                began = time.perf_counter()
                await session.launch(nursery)
                await session.first_frame("after the kill")
                timings["replacement"].append(time.perf_counter() - began)
                await session.close()
    return timings


async def per_host(launcher: Any, image: str, label: str, network: str, size: int, concurrency: int,
                   timeout: float, work: Path) -> dict[str, float] | None:
    level = f"{label}-n{size}"
    before_machine, before_rss = machine_used_kib(), rss_kib()
    limiter = trio.CapacityLimiter(concurrency)
    stores = [Store(work / f"n{size}-{i}.db") for i in range(size)]
    sessions = [Session(launcher, launch_context(level, image, session=f"s{i}", options={"network": network}), store)
                for i, store in enumerate(stores)]
    began = time.perf_counter()
    try:
        async with trio.open_nursery() as nursery:
            async def bring_up(session: Session) -> None:
                async with limiter:
                    await session.launch(nursery)
                    await session.first_frame("hello")

            with trio.move_on_after(timeout) as scope:
                async with trio.open_nursery() as starting:
                    for session in sessions:
                        starting.start_soon(bring_up, session)
            if scope.cancelled_caught:
                print(f"  {size}: not all answering within {timeout:.0f} s; stopping the series", flush=True)
                nursery.cancel_scope.cancel()
                return None
            elapsed = time.perf_counter() - began
            await trio.sleep(2)  # let the containers settle before reading memory
            containers = {s.container for s in sessions if s.container}
            ports = {s.port for s in sessions if s.port}
            figures = {
                "sessions": size,
                "up_s": elapsed,
                "machine_mib": (machine_used_kib() - before_machine) / 1024 / size,
                "containers_mib": containers_memory_kib(level) / 1024 / size,
                "runtime_mib": runtime_overhead_kib(containers, ports) / 1024 / size,
                "host_rss_mib": (rss_kib() - before_rss) / 1024 / size,
            }
            async with trio.open_nursery() as stopping:
                for session in sessions:
                    async def close(session: Session = session) -> None:
                        async with limiter:
                            await session.close()
                    stopping.start_soon(close)
            nursery.cancel_scope.cancel()
        return figures
    finally:
        remove_labelled(level)
        for store in stores:
            store.close()


def build_times(label: str) -> dict[str, float]:
    """Seconds for each build, into scratch tags removed afterwards."""
    times: dict[str, float] = {}
    base, tag, changed_tag = f"router-base-{label}:bookworm", f"router-{label}:timing", f"router-{label}:changed"
    try:
        began = time.perf_counter()
        build_base_image(base)
        times["base image (debootstrap + import)"] = time.perf_counter() - began
        times["project, cold (--no-cache)"] = build_project_image(tag, base=BASE_IMAGE, no_cache=True)
        times["project, nothing changed"] = build_project_image(tag, base=BASE_IMAGE)
        with tempfile.TemporaryDirectory(prefix="bench-context-") as scratch:
            context = Path(scratch)
            for name in IMAGE_INPUTS:
                source = REPO / name
                (shutil.copytree if source.is_dir() else shutil.copy2)(source, context / name)
            with open(context / "router" / "__init__.py", "a") as changed:
                changed.write(f"\n# bench {label}\n")
            times["project, code changed"] = build_project_image(changed_tag, base=BASE_IMAGE, context=context)
    finally:
        docker("rmi", "-f", base, tag, changed_tag, check=False)
    return times


def show(timings: dict[str, list[float]], levels: list[dict[str, float]]) -> None:
    print()
    print(f"{'first frame':<14}{'median ms':>11}{'worst ms':>10}{'runs':>6}")
    for name, values in timings.items():
        print(f"{name:<14}{statistics.median(values) * 1000:>11.0f}{max(values) * 1000:>10.0f}{len(values):>6}")
    print()
    print("per session, MiB: container = docker stats; runtime = shim + proxy (PSS); host = this process's RSS;")
    print("machine = MemTotal - MemAvailable over the figure before (noisy on a shared machine)")
    print(f"{'sessions':>8}{'all up s':>10}{'container':>11}{'runtime':>9}{'host':>7}{'total':>7}{'machine':>9}")
    for level in levels:
        total = level["containers_mib"] + level["runtime_mib"] + level["host_rss_mib"]
        print(f"{level['sessions']:>8}{level['up_s']:>10.1f}{level['containers_mib']:>11.1f}{level['runtime_mib']:>9.1f}"
              f"{level['host_rss_mib']:>7.2f}{total:>7.1f}{level['machine_mib']:>9.1f}")


async def main(args: argparse.Namespace) -> None:
    image = ensure_project_image()
    launcher = load_docker_launcher()
    label = f"bench-{uuid.uuid4().hex[:8]}"
    print(f"image {image}, engine {docker('info', '--format', '{{.ServerVersion}}').stdout.strip()}, "
          f"{os.cpu_count()} cores, network {args.network}, label {TEST_LABEL}={label}", flush=True)
    if args.builds:
        for name, seconds in build_times(label).items():
            print(f"  build: {name}: {seconds:.1f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-containers-") as scratch:
        work = Path(scratch)
        try:
            timings = await first_frames(launcher, image, label, args.network, args.repeat, work)
            levels = []
            for size in args.sizes:
                print(f"  {size} containers ...", flush=True)
                figures = await per_host(launcher, image, label, args.network, size, args.concurrency,
                                         args.level_timeout, work)
                if figures is None:
                    break
                levels.append(figures)
        finally:
            remove_labelled(label)
    show(timings, levels)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", type=lambda v: [int(n) for n in v.split(",")], default=[10, 25, 50])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--network", choices=("bridge", "host"), default="bridge")
    parser.add_argument("--level-timeout", type=float, default=300.0)
    parser.add_argument("--builds", action="store_true",
                        help="first time the builds: the base (debootstrap), the project cold, unchanged and after a code change")
    return parser.parse_args()


if __name__ == "__main__":
    try:
        trio.run(main, parse_args())
    except subprocess.CalledProcessError as exc:
        sys.exit(f"bench: {exc}")
