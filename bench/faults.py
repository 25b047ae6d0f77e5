"""The fault campaign (docs/reliability.md): faults and hostile input against real
processes on loopback. Prints two tables.

    .venv/bin/python bench/faults.py [--seed N] [--faults N] [--inputs N] [--short] [--only cluster]

``--faults`` is the number of faults to aim for across the phases (SIGKILL
of ``router prompt``, of a host in its own process, of ``router serve``, of
our daemon and the reference daemon; TCP cuts through the cutting proxy;
``router serve``'s session containers killed, removed, paused and
restarted where a Docker engine runs; three ``router serve`` on one
private PostgreSQL, each SIGKILLed, stopped past its lease, and their
shared daemon SIGKILLed; PostgreSQL restarted fast and immediate and its
backends terminated under three routers, in both cluster modes; a full
and a slow disk; hostile daemons and HTTP peers; a second local user);
``--inputs`` the number of generated inputs per parser, a tenth of it per
live endpoint. ``--short`` is the test suite's size (tests/faults);
``--only NAME`` runs that group of phases alone (``cluster``,
``postgres``, ``disk``, ``hostile``, ``user``, ``docker``; with ``--faults`` their
share of them). The same seed draws the same inputs and the same fault
plan. The phases and the checks are in
``tests/support/campaign.py``; docs/reliability.md has the figures.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.campaign import FaultRow, InputRow, run_faults, run_inputs  # noqa: E402
from tests.support.campaign_docker import PHASE  # noqa: E402

#: A full run: the issue's floor of 1,000 faults and 100,000 inputs per
#: parser (10,000 per live endpoint).
FULL_FAULTS = 1000
FULL_INPUTS = 100_000
#: The short run the test suite makes (tests/faults).
SHORT_FAULTS = 40
SHORT_INPUTS = 2000


def fault_line(row: FaultRow) -> str:
    def cell(value: int | None) -> str:
        return "n/a" if value is None else f"{value:,}"

    return (f"| {row.phase} | {row.faults:,} | {row.operations:,} | {row.lost} | {row.duplicated} | {row.wrong} "
            f"| {cell(row.exits)} | {cell(row.stopped)} |")


def total_row(rows: list[FaultRow]) -> FaultRow:
    total = FaultRow("**total**", *(sum(getattr(r, f) for r in rows)
                                    for f in ("faults", "operations", "lost", "duplicated", "wrong")))
    for field in ("exits", "stopped"):
        measured = [getattr(r, field) for r in rows if getattr(r, field) is not None]
        setattr(total, field, sum(measured) if measured else None)
    return total


def input_line(row: InputRow) -> str:
    def cell(value: int | None) -> str:
        return "n/a" if value is None else f"{value:,}"

    return (f"| {row.target} | {row.inputs:,} | {row.crashes:,} | {row.hangs} | {cell(row.tracebacks)} "
            f"| {cell(row.good_client_failures)} |")


def notes(rows: list) -> list[str]:
    out = []
    for row in rows:
        for note in row.notes[:3]:
            out.append(f"- {getattr(row, 'phase', None) or row.target}: {note[:300]}")
    return out


def print_faults(fault_rows: list[FaultRow], docker: str) -> None:
    print("\nFaults\n")
    print("| phase | faults | operations | lost | duplicated | wrong | router exits | sessions stopped |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in fault_rows:
        print(fault_line(row))
    print(fault_line(total_row(fault_rows)))
    if docker:  # the Docker phase could not run here
        print(f"| Docker containers | {docker} | | | | | | |")
    for row in fault_rows:
        if row.kinds:
            print(f"\n{row.phase}, faults by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(row.kinds.items())))
        if row.refusals:
            print(f"\n{row.phase}, answers other than 200 (each resent): "
                  + ", ".join(f"{k} {n}" for k, n in sorted(row.refusals.items())))
    for row in fault_rows:
        if row.phase == PHASE and row.cases:
            print("\nWhat each container fault did (the session's daemon afterwards)\n\n| fault | outcomes |\n|---|---|")
            print("\n".join(f"| {name} | {outcome} |" for name, outcome in row.cases))
    cases = [case for row in fault_rows if row.phase != PHASE for case in row.cases]
    if cases:
        print("\nHostile cases\n\n| case | outcome |\n|---|---|")
        print("\n".join(f"| {name} | {outcome} |" for name, outcome in cases))


async def main(args: argparse.Namespace) -> None:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="faults-"))
    fault_rows: list[FaultRow] = []
    input_rows: list[InputRow] = []
    print(f"seed {args.seed}, faults {args.faults}, inputs {args.inputs} per parser, "
          f"{args.inputs // 10} per endpoint; work in {work}", flush=True)
    if not args.no_faults:
        last = [time.monotonic()]

        def done(row: FaultRow) -> None:
            print("  done:", fault_line(row), f"({time.monotonic() - last[0]:.0f} s)", flush=True)
            last[0] = time.monotonic()

        fault_rows, docker = await run_faults(args.faults, args.seed, work / "faults", only=args.only, report=done)
        print_faults(fault_rows, docker)
    if not args.no_inputs:
        input_rows = await run_inputs(args.inputs, args.inputs // 10, args.seed, work / "inputs",
                                      report=lambda row: print("  done:", input_line(row), flush=True))
        print("\nHostile input\n")
        print("| target | inputs | crashes | hangs | tracebacks | good-client failures |\n|---|---:|---:|---:|---:|---:|")
        for row in input_rows:
            print(input_line(row))
    found = notes(fault_rows) + notes(input_rows)
    if found:
        print("\nWhat the non-zero figures are (first of each):")
        print("\n".join(found))
    print(f"\nwall time {time.monotonic() - started:.0f} s")
    if args.keep:
        print(f"the processes' logs and stores are in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--faults", type=int, default=None, help=f"faults to aim for (default {FULL_FAULTS:,})")
    parser.add_argument("--inputs", type=int, default=None, help=f"inputs per parser (default {FULL_INPUTS:,})")
    parser.add_argument("--short", action="store_true", help="the test suite's size")
    parser.add_argument("--no-faults", action="store_true", help="the hostile-input half only")
    parser.add_argument("--no-inputs", action="store_true", help="the fault half only")
    parser.add_argument("--only", choices=["cluster", "postgres", "disk", "hostile", "user", "docker"], default=None,
                        help="one fault phase (or group of phases) alone")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, stores)")
    arguments = parser.parse_args()
    if arguments.faults is None:
        arguments.faults = SHORT_FAULTS if arguments.short else FULL_FAULTS
    if arguments.inputs is None:
        arguments.inputs = SHORT_INPUTS if arguments.short else FULL_INPUTS
    trio.run(main, arguments)
