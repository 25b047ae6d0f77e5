"""Sessions in git worktrees with a real ``router serve``, real git and tmux,
on the echo harness (fast): projects, ``router new`` / ``diff`` / ``end``
from the command line, two sessions on one project, and the refusals."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import httpx
import pytest
import trio

from tests.worktrees.helpers import Bench, git


@pytest.fixture
async def bench(tmp_path: Path) -> AsyncIterator[Bench]:
    made = Bench.make(tmp_path)
    try:
        yield made
    finally:
        await made.close()


async def test_projects_are_repositories_top_levels(bench: Bench) -> None:
    (bench.root / "plain").mkdir()
    code, _, err = await bench.router("projects", "add", str(bench.root / "plain"))
    assert code == 1 and "not-a-repository" in err, err
    (bench.repo / "sub").mkdir()
    code, _, err = await bench.router("projects", "add", str(bench.repo / "sub"))
    assert code == 1 and "not-a-repository" in err and str(bench.repo) in err, err
    code, out, err = await bench.router_json("projects", "add", str(bench.repo), "--name", "proj", "--json")
    assert code == 0 and out == {"name": "proj", "path": str(bench.repo)}, err
    code, _, err = await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    assert code == 1 and "project-exists" in err
    code, out, _ = await bench.router_json("projects", "--json")
    assert out == {"projects": [{"name": "proj", "path": str(bench.repo)}]}
    async with bench.serve():
        async with httpx.AsyncClient(base_url=bench.url, headers={"authorization": f"Bearer {bench.token}"}) as http:
            answer = await http.get("/projects")
            assert answer.json() == {"projects": [{"name": "proj", "path": str(bench.repo)}]}
            refused = await http.post("/sessions", json={"project": "nope"})
            assert refused.status_code == 404 and refused.json()["error"] == "unknown-project"
    code, out, _ = await bench.router("projects", "remove", "proj")
    assert code == 0
    code, _, err = await bench.router("projects", "remove", "proj")
    assert code == 1 and "unknown-project" in err


async def test_new_diff_end_on_the_echo_harness(bench: Bench) -> None:
    await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    async with bench.serve():
        code, made, err = await bench.router_json("new", "proj", "--name", "one", "--harness", "echo",
                                                  "--prompt", "hello there", "--json")
        assert code == 0, err
        worktree = Path(made["worktree"])
        assert made["session"] == "one" and made["branch"] == "router/one" and worktree.is_dir()
        assert git(worktree, "rev-parse", "--abbrev-ref", "HEAD").strip() == "router/one"
        assert made["base"] == git(bench.repo, "rev-parse", "HEAD").strip()
        assert await bench.tmux_has("one")
        listed = await bench.listed()
        assert listed["one"]["project"] == "proj" and listed["one"]["branch"] == "router/one"
        assert listed["one"]["worktree"] == str(worktree)
        # The first prompt went in once: the echo answered it.
        async with httpx.AsyncClient(base_url=bench.url, headers={"authorization": f"Bearer {bench.token}"}) as http:
            messages = (await http.get("/sessions/one/messages")).json()["messages"]
            place = (await http.get("/sessions/one/place")).json()  # what `router attach` reads
            assert place["tmux"] == "one" and place["session"] == "one"
        assert [m["role"] for m in messages] == ["user", "assistant"], messages

        (worktree / "notes.txt").write_text("one\ntwo\n")
        (worktree / "README.md").write_text("a project\nchanged\n")
        code, diff, err = await bench.router_json("diff", "one", "--json")
        assert code == 0, err
        files = {each["path"]: each for each in diff["files"]}
        assert (files["notes.txt"]["added"], files["notes.txt"]["removed"]) == (2, 0)
        assert (files["README.md"]["added"], files["README.md"]["removed"]) == (1, 0)
        assert "+changed" in files["README.md"]["patch"] and diff["commits"] == []
        code, text, _ = await bench.router("diff", "one")
        assert "+2 -0 notes.txt" in text and "+1 -0 README.md" in text

        code, _, err = await bench.router("end", "one")
        assert code == 1 and "unsaved-work" in err and "notes.txt" in err, err
        assert worktree.is_dir() and await bench.tmux_has("one")
        git(worktree, "add", "-A")
        git(worktree, "commit", "-q", "-m", "the notes")
        code, diff, _ = await bench.router_json("diff", "one", "--json")
        assert [c["subject"] for c in diff["commits"]] == ["the notes"]
        code, _, err = await bench.router("end", "one")
        assert code == 1 and "unsaved-work" in err and "the notes" in err, err  # on no other branch
        git(bench.repo, "merge", "-q", "--ff-only", "router/one")
        code, out, err = await bench.router("end", "one")
        assert code == 0 and "removed its worktree and branch" in out, err
        assert not worktree.exists() and not await bench.tmux_has("one")
        assert "router/one" not in git(bench.repo, "branch", "--list")
        assert "one" not in await bench.listed()
        code, _, err = await bench.router("send", "one", "again")
        assert code != 0 and ("session-ended" in err or "unknown-session" in err), err
    # Its record stays readable.
    code, out, err = await bench.router("transcript", "--store", str(bench.root / "data" / "host.sqlite"),
                                        "--session", "one")
    assert code == 0 and "hello there" in out, (out, err)


async def test_two_sessions_never_touch_and_force(bench: Bench) -> None:
    await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    async with bench.serve():
        made = {}
        for name in ("left", "right"):
            code, made[name], err = await bench.router_json("new", "proj", "--name", name, "--harness", "echo",
                                                            "--json")
            assert code == 0, err
        left, right = Path(made["left"]["worktree"]), Path(made["right"]["worktree"])
        assert left != right and not left.is_relative_to(right) and not right.is_relative_to(left)
        (left / "left.txt").write_text("l\n")
        (right / "right.txt").write_text("r\n")
        for name, only in (("left", "left.txt"), ("right", "right.txt")):
            _, diff, _ = await bench.router_json("diff", name, "--json")
            assert [each["path"] for each in diff["files"]] == [only]
        code, out, err = await bench.router("end", "left", "--force")
        assert code == 0, err
        assert not left.exists() and "router/left" not in git(bench.repo, "branch", "--list")
        assert (right / "right.txt").read_text() == "r\n"
        code, out, err = await bench.router("end", "right", "--keep-worktree")
        assert code == 0 and right.is_dir() and "router/right" in git(bench.repo, "branch", "--list"), err
        assert not await bench.tmux_has("right")
        # Two at once for one name: one is made, the other refused; nothing is overwritten.
        async with httpx.AsyncClient(base_url=bench.url, headers={"authorization": f"Bearer {bench.token}"},
                                     timeout=60) as http:
            answers: list[httpx.Response] = []

            async def post() -> None:
                answers.append(await http.post("/sessions", json={"project": "proj", "name": "same",
                                                                  "harness": "echo"}))

            async with trio.open_nursery() as both:
                both.start_soon(post)
                both.start_soon(post)
            assert sorted(each.status_code for each in answers) == [201, 409], [each.text for each in answers]
            refused = next(each for each in answers if each.status_code == 409).json()
            assert refused["error"] in ("session-exists", "branch-exists", "worktree-exists"), refused
            ended = await http.post("/sessions/same/end", json={"force": True})
            assert ended.status_code == 200 and ended.json()["worktreeRemoved"] is True, ended.text


async def test_refusals_each_with_its_code(bench: Bench) -> None:
    await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    git(bench.repo, "branch", "router/taken")
    async with bench.serve():
        # From the command line: the refusal on stderr, exit 1.
        code, _, err = await bench.router("new", "proj", "--name", "taken", "--harness", "echo")
        assert code == 1 and "branch-exists" in err, err
        assert git(bench.repo, "rev-parse", "router/taken") == git(bench.repo, "rev-parse", "main")
        code, _, err = await bench.router("new", str(bench.root), "--harness", "echo")
        assert code == 1 and "not-a-project" in err, err  # a path outside the listed projects
        code, _, err = await bench.router("launch", "a\x01b")
        assert code == 1 and "bad-session-id" in err, err
        # The same refusals through the API the page uses: status and code.
        cases = [
            ({"project": "elsewhere", "harness": "echo"}, 404, "unknown-project"),
            ({"project": "proj", "name": "bad/name", "harness": "echo"}, 400, "bad-name"),
            ({"project": "proj", "from": "no-such-ref", "harness": "echo"}, 400, "unknown-ref"),
            ({"project": "proj", "harness": "nonsense", "where": "container"}, 400, "unknown-harness"),
            ({"project": "proj", "where": "moon"}, 400, "bad-where"),
            ({"project": "proj", "name": 3}, 400, "bad-body"),
            ({"id": ""}, 400, "bad-session-id"),
            ({"id": "x" * 201}, 400, "bad-session-id"),
            ({"id": "tab\there"}, 400, "bad-session-id"),
            ({"id": "fine", "harness": "nonsense"}, 400, "unknown-harness"),
            ({"id": "fine", "harness": "claude-code"}, 409, "harness-off"),  # plugins.json's defaults: echo only
            ({"id": "fine", "harness": "codex"}, 409, "harness-unsupported"),  # the in-process launcher: echo only
        ]
        async with httpx.AsyncClient(base_url=bench.url, headers={"authorization": f"Bearer {bench.token}"}) as http:
            for body, status, code_ in cases:
                answer = await http.post("/sessions", json=body)
                assert (answer.status_code, answer.json()["error"]) == (status, code_), (body, answer.text)
            end = await http.post("/sessions/nobody/end", json={})
            assert (end.status_code, end.json()["error"]) == (409, "not-ended-here"), end.text
            assert "fine" not in {each["id"] for each in (await http.get("/sessions")).json()["sessions"]}
        assert git(bench.repo, "worktree", "list").count("\n") == 1  # nothing was made
        # An id with a slash and spaces is taken, and reached by every command.
        odd = "team/a b"
        code, _, err = await bench.router("launch", odd)
        assert code == 0, err
        code, out, err = await bench.router_json("send", odd, "hi", "--json")
        assert code == 0 and out["reply"]["status"] == "done", err
        code, out, err = await bench.router("end", odd)
        assert code == 0, err
        assert odd not in await bench.listed()


async def test_attach_puts_this_terminal_on_the_sessions_tmux(bench: Bench) -> None:
    """`router attach` in a terminal (a pane of another tmux server, as a
    person's terminal) becomes a client of the session's tmux session: what
    runs there shows in that terminal."""
    import shlex

    from tests.api.processes import REPO, ROUTER

    await bench.router("projects", "add", str(bench.repo), "--name", "proj")
    async with bench.serve():
        code, _, err = await bench.router_json("new", "proj", "--name", "one", "--harness", "echo", "--json")
        assert code == 0, err
        command = f"cd {shlex.quote(str(REPO))} && {shlex.join([*ROUTER, 'attach', 'one'])}"
        outer = ["tmux", "-L", "outer"]
        try:
            await trio.run_process([*outer, "new-session", "-d", "-s", "person", "-x", "160", "-y", "40", command],
                                   env=bench.env)

            async def clients() -> str:
                done = await trio.run_process(["tmux", "-L", "router", "list-clients", "-t", "=one"], env=bench.env,
                                              capture_stdout=True, check=False)
                return done.stdout.decode()

            async def screen() -> str:
                done = await trio.run_process([*outer, "capture-pane", "-p", "-t", "person"], env=bench.env,
                                              capture_stdout=True, check=False)
                return done.stdout.decode()

            with trio.fail_after(60):  # another process's terminal: asked again until it shows
                while not (await clients()).strip():
                    await trio.sleep(0.1)
                await trio.run_process(["tmux", "-L", "router", "send-keys", "-t", "=one:", "echo attached-$((6*7))",
                                        "Enter"], env=bench.env)
                while "attached-42" not in await screen():
                    await trio.sleep(0.1)
        finally:
            await trio.run_process([*outer, "kill-server"], env=bench.env, check=False, capture_stderr=True)
        code, _, err = await bench.router("attach", "nobody")
        assert code != 0 and "unknown" in err, err
