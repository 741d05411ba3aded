"""The language server's lifecycle and concurrency, spoken in raw JSON-RPC over stdio to the
real `python -m gradguard lsp`: what a client that sends something wrong (or at the wrong
time) gets back, how the process ends, and that one slow document holds no other back.

Raw messages, because a typed client (pytest-lsp) cannot send malformed params or JSON."""
from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from gradguard.lsp.documents import Analyses
from gradguard.lsp.workers import WorkerDied, Workers
from adversarial import nested_blocks
from lsp_support import REPO, SERVER

BUGGY = """\
import torch

x = torch.randn(3, requires_grad=True)
loss = (x.exp() * 2).sum()
loss.backward()
loss.backward()  # raises: the graph was freed
"""
INVALID_PARAMS, INVALID_REQUEST, NOT_INITIALIZED = -32602, -32600, -32002
# Slow by construction: `if`/`for`/`with`/`while` blocks nested 99 deep.  Each loop level runs
# its body at least twice, so the work grows about 1.35 times per level (840,000 steps at 28
# levels): no machine ends its analysis inside a budget of seconds.
SLOW = nested_blocks(99)


class Server:
    """`gradguard lsp` in a subprocess; messages read on a thread, so a wait can time out."""

    def __init__(self, cwd: Path | None = None):
        self.proc = subprocess.Popen(SERVER.server_command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=SERVER.server_env, cwd=cwd)
        self.inbox: queue.Queue = queue.Queue()
        self.seen: list[dict] = []  # every message received, in order
        self.unread: list[dict] = []  # those no `wait` has matched yet
        threading.Thread(target=self._read, daemon=True).start()
        self._ids = 0

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = 0
            while True:
                line = out.readline()
                if not line:
                    self.inbox.put(None)
                    return
                if line in (b"\r\n", b"\n"):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.inbox.put(json.loads(out.read(length)))

    def send_bytes(self, body: bytes) -> None:
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params=None) -> None:
        self.send_bytes(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode())

    def request(self, method: str, params=None, timeout: float = 30) -> dict:
        """The response (its `result` or `error`) to a request."""
        self._ids += 1
        msg_id = self._ids
        self.send_bytes(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode())
        return self.wait(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    def wait(self, match, timeout: float = 30) -> dict:
        """The first message received that is `match`ed and was not returned before."""
        for message in self.unread:
            if match(message):
                self.unread.remove(message)
                return message
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no such message within {timeout} s; received: {self.seen[-5:]}") from None
            if message is None:
                raise AssertionError(f"the server ended: {self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            self.seen.append(message)
            if match(message):
                return message
            self.unread.append(message)

    def diagnostics(self, uri: str, timeout: float = 30) -> list[dict]:
        message = self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                            and m["params"]["uri"] == uri, timeout)
        return message["params"]["diagnostics"]

    def initialize(self, options=None, capabilities: dict | None = None) -> dict:
        result = self.request("initialize", {"processId": None, "rootUri": None, "capabilities": capabilities or {},
                                             "initializationOptions": options})
        self.notify("initialized", {})
        return result

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python",
                                                             "version": version, "text": text}})

    def change(self, uri: str, version: int, *changes: dict) -> None:
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": list(changes)})

    def logged(self) -> list[str]:
        return [m["params"]["message"] for m in self.seen if m.get("method") == "window/logMessage"]

    def shown(self) -> list[dict]:
        return [m for m in self.seen if m.get("method") == "window/showMessage"]

    def exit_code(self, timeout: float = 10) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


@pytest.fixture
def server():
    started = Server()
    yield started
    started.close()


@pytest.fixture
def ready(server: Server) -> Server:
    server.initialize()
    return server


def _range(start_line: int, start_char: int, end_line: int, end_char: int) -> dict:
    return {"start": {"line": start_line, "character": start_char}, "end": {"line": end_line, "character": end_char}}


# ---------------------------------------------------------------------- protocol errors
def test_a_request_with_invalid_params_is_answered_invalid_params(ready: Server):
    """pygls dropped such a request (the client waited forever) and showed an error dialog."""
    for params in ({"textDocument": 5, "position": {"line": 0, "character": 0}},
                   {"textDocument": {"uri": "file:///x.py"}, "position": {"line": -1, "character": 0}},
                   None):
        error = ready.request("textDocument/hover", params)["error"]
        assert error["code"] == INVALID_PARAMS and error["message"].startswith("invalid params")
    ready.notify("textDocument/didOpen", {"textDocument": {"uri": 7}})  # a notification: logged, no answer
    assert ready.request("shutdown")["result"] is None  # the server still works
    assert any("textDocument/didOpen ignored: invalid params" in line for line in ready.logged())
    assert ready.shown() == []


def test_messages_that_are_not_json_rpc_are_logged_never_shown(ready: Server):
    ready.send_bytes(b"{this is not json")
    ready.send_bytes(b'[1, 2, 3]')
    ready.send_bytes(b'{"id": 99, "method": "textDocument/hover"}')  # no "jsonrpc": invalid request
    assert ready.wait(lambda m: m.get("id") == 99)["error"]["code"] == INVALID_REQUEST
    ready.notify("no/suchNotification", {})
    assert ready.request("no/suchRequest", {})["error"]["code"] == -32601  # method not found
    assert ready.request("shutdown")["result"] is None
    logged = ready.logged()
    assert any("not JSON" in line for line in logged), logged
    assert ready.shown() == []
    ready.notify("exit")
    assert ready.exit_code() == 0
    assert "Traceback" not in ready.proc.stderr.read().decode(), "one line in the log, no traceback on stderr"


def test_a_request_before_initialize_is_answered_server_not_initialized(server: Server):
    error = server.request("textDocument/hover", {"textDocument": {"uri": "file:///x.py"},
                                                   "position": {"line": 0, "character": 0}})["error"]
    assert error["code"] == NOT_INITIALIZED
    assert "capabilities" in server.initialize()["result"]


# ---------------------------------------------------------------------- shutdown and exit
def test_requests_after_shutdown_are_answered_invalid_request_and_exit_ends_with_0(ready: Server):
    assert ready.request("shutdown")["result"] is None
    hover = ready.request("textDocument/hover", {"textDocument": {"uri": "file:///x.py"},
                                                 "position": {"line": 0, "character": 0}})
    assert hover["error"]["code"] == INVALID_REQUEST
    assert ready.request("shutdown")["error"]["code"] == INVALID_REQUEST
    ready.notify("exit")
    assert ready.exit_code() == 0


def test_exit_without_shutdown_ends_with_1(ready: Server):
    ready.notify("exit")
    assert ready.exit_code() == 1


def _children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (Linux)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _gone(pids: set[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State"))
    except (OSError, StopIteration):
        return "zombie"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_exit_does_not_wait_for_an_analysis_and_leaves_no_worker(tmp_path: Path):
    """A slow document is being analysed: `exit` ends the server at once, its workers with it;
    and a server killed outright (an editor that crashed) leaves no worker behind either."""
    for kill in (False, True):
        server = Server()
        try:
            server.initialize({"timeout": 60})
            server.open((tmp_path / "slow.py").as_uri(), SLOW)
            time.sleep(1.5)  # the analysis is under way
            workers = _children(server.proc.pid)
            assert workers, "the analyses run in worker processes"
            start = time.monotonic()
            if kill:
                server.proc.send_signal(signal.SIGKILL)
            else:
                server.request("shutdown")
                server.notify("exit")
                assert server.exit_code() == 0
                assert time.monotonic() - start < 20  # the analysis has a minute to go
            assert _gone(workers, 10), [_state(pid) for pid in workers]
        finally:
            server.close()


# ---------------------------------------------------------------------- document sync
def test_a_change_outside_the_document_is_rejected_and_the_document_is_out_of_sync(ready: Server):
    """LSP has no way to ask for the text again: the document says it is out of sync (GG000)
    and nothing else until the whole text comes again; one log line says why."""
    uri = "file:///tmp/gradguard-lifecycle/train.py"
    ready.open(uri, BUGGY)
    assert [d["code"] for d in ready.diagnostics(uri)] == ["GG001"]
    for version, bad in ((2, _range(40, 0, 41, 0)), (3, _range(3, 5, 2, 0))):  # past the end; reversed
        ready.change(uri, version, {"range": bad, "text": "x"})
        [diag] = ready.diagnostics(uri)
        assert diag["code"] == "GG000" and "out of sync" in diag["message"] and "reopen" in diag["message"]
        ready.change(uri, version + 10, {"text": BUGGY})  # the whole text: in sync again
        assert [d["code"] for d in ready.diagnostics(uri)] == ["GG001"]
    rejected = [line for line in ready.logged() if "change rejected" in line]
    assert len(rejected) == 2 and "past the end of the document" in rejected[0] and "before it starts" in rejected[1]
    assert ready.shown() == []


def test_a_character_past_the_end_of_its_line_is_the_end_of_the_line(ready: Server):
    """As the specification says; pygls put the text after the line break, or one character
    before the end of a last line without one."""
    uri = "file:///tmp/gradguard-lifecycle/train.py"
    text = BUGGY.replace("loss.backward()  # raises: the graph was freed\n", "loss.backward()")
    ready.open(uri, text)
    assert [d["code"] for d in ready.diagnostics(uri)] == ["GG001"]
    ready.change(uri, 2, {"range": _range(4, 99, 4, 99), "text": "  # first"},  # inside the text
                 {"range": _range(5, 99, 5, 99), "text": "  # second"})  # its last line, no line break
    [diag] = ready.diagnostics(uri)
    assert diag["range"] == _range(5, 0, 5, 15) and diag["data"]["version"] == 2
    ready.change(uri, 3, {"range": _range(0, 0, 6, 0), "text": ""})  # the whole text deleted, as an editor does
    assert ready.diagnostics(uri) == []


# ---------------------------------------------------------------------- failures are shown
def test_a_pulling_client_gets_the_same_GG000_diagnostics(server: Server):
    """VS Code pulls diagnostics: a text that does not parse and a document out of sync answer
    with their GG000 as a push does, and nothing is pushed besides."""
    server.initialize(capabilities={"textDocument": {"diagnostic": {}}})
    uri = "file:///tmp/gradguard-lifecycle/train.py"
    server.open(uri, BUGGY + "for x in \n")

    def pulled() -> list[dict]:
        return server.request("textDocument/diagnostic", {"textDocument": {"uri": uri}})["result"]["items"]
    [syntax] = pulled()
    assert syntax["code"] == "GG000" and syntax["range"]["start"]["line"] == 6
    assert syntax["message"].startswith("syntax error")
    server.change(uri, 2, {"range": _range(0, 0, 0, 0), "text": "# a comment\n"},
                  {"range": _range(99, 0, 99, 0), "text": ""})
    [stale] = pulled()
    assert stale["code"] == "GG000" and "out of sync" in stale["message"]
    server.change(uri, 3, {"text": BUGGY})
    assert [d["code"] for d in pulled()] == ["GG001"]
    assert not [m for m in server.seen if m.get("method") == "textDocument/publishDiagnostics"]


def test_a_broken_pyproject_is_shown_on_the_document(tmp_path: Path):
    """`tool = 1`: the document is analysed with the defaults, and says why (GG000, line 1)."""
    (tmp_path / "pyproject.toml").write_text("tool = 1\n")
    (tmp_path / "train.py").write_text(BUGGY)
    server = Server()
    try:
        server.initialize()
        uri = (tmp_path / "train.py").as_uri()
        server.open(uri, BUGGY)
        diags = server.diagnostics(uri)
        assert sorted(d["code"] for d in diags) == ["GG000", "GG001"]
        [config] = [d for d in diags if d["code"] == "GG000"]
        assert config["range"]["start"]["line"] == 0 and config["severity"] == 1
        assert config["message"].startswith("configuration: ") and "pyproject.toml" in config["message"]
        assert "internal error" not in config["message"]
    finally:
        server.close()


# ---------------------------------------------------------------------- concurrency
def test_a_small_document_is_not_queued_behind_a_slow_one(tmp_path: Path):
    """A slow document is analysed in one worker process while a small one opened after it
    gets its diagnostics first; the slow one runs out of its time budget and says so (GG000).
    The order of the two publications is what is checked, not seconds: the small one's
    analysis takes a fraction of the slow one's budget even on a loaded machine."""
    server = Server()
    try:
        server.initialize({"timeout": 4})
        slow, small = (tmp_path / "slow.py").as_uri(), (tmp_path / "small.py").as_uri()
        server.open(slow, SLOW)
        server.open(small, BUGGY)
        assert [d["code"] for d in server.diagnostics(small)] == ["GG001"]
        hover = server.request("textDocument/hover", {"textDocument": {"uri": small},
                                                      "position": {"line": 5, "character": 3}})
        assert "GG001" in hover["result"]["contents"]["value"]
        assert not [m for m in server.seen if m.get("method") == "textDocument/publishDiagnostics"
                    and m["params"]["uri"] == slow], "the small document waited for the slow one"
        [budget] = server.diagnostics(slow, timeout=60)
        assert budget["code"] == "GG000" and "time budget" in budget["message"], budget
    finally:
        server.close()


def test_a_worker_that_dies_or_overruns_is_replaced():
    """A worker killed under an analysis (a crash, the out-of-memory killer) fails its job
    after one more try, a job past its time limit has its worker killed; either way the
    next job runs, on a worker started in its place, and no job of another caller is lost."""
    async def run():
        workers = Workers(2)
        workers.start()
        try:
            with pytest.raises(WorkerDied, match="exit status 3"):
                await workers.run(os._exit, 3)
            start = time.monotonic()
            with pytest.raises(TimeoutError):
                await workers.run(time.sleep, 30, limit=0.5)
            assert time.monotonic() - start < 15  # killed, not waited for: the sleep has 30 s to go
            other = asyncio.ensure_future(workers.run(pow, 3, 3))
            cancelled = asyncio.ensure_future(workers.run(time.sleep, 0.5))
            await asyncio.sleep(0.1)
            cancelled.cancel()  # its worker is free again once the sleep ends
            assert await asyncio.gather(other, *(workers.run(pow, 2, n) for n in range(4))) == [27, 1, 2, 4, 8]
            with pytest.raises(ZeroDivisionError):  # the function's own exception, as if it ran here
                await workers.run(divmod, 1, 0)
        finally:
            workers.stop()
    asyncio.run(run())


def test_a_document_stays_on_its_worker_while_that_one_is_free():
    """A document's analyses go to the worker that analysed it last (which keeps its last tree
    and the modules it imports), unless that one is busy; with nothing else running, a new
    document goes to the worker free last, so an idle pool keeps one worker's caches warm."""
    async def run():
        workers = Workers(2)
        workers.start()
        try:
            first = await workers.run(os.getpid, home="a.py")
            assert await workers.run(os.getpid, home="b.py") == first  # the worker free last
            assert [await workers.run(os.getpid, home="a.py") for _ in range(3)] == [first] * 3
            busy = asyncio.ensure_future(workers.run(time.sleep, 2, home="b.py"))  # on `first`
            while workers._idle:  # until `busy` holds it, however long the machine takes
                await asyncio.sleep(0)
            other = await workers.run(os.getpid, home="a.py")  # its worker is busy: the other one
            assert other != first
            await busy
            assert await workers.run(os.getpid, home="a.py") == other  # its new home
            assert await workers.run(os.getpid, home="b.py") == first
            workers.forget("a.py")  # closed: opened again, it goes to the worker free last
            assert await workers.run(os.getpid, home="a.py") == first
        finally:
            workers.stop()
    asyncio.run(run())


def test_an_analysis_that_fails_is_reported_and_the_next_text_is_analysed():
    """Whatever fails around an analysis (here the editor settings it needs) ends in a result
    that says so, GG000 at line 1, and the document's analyses go on: the next text gets its
    findings, and whoever waited for the first was answered."""
    async def run():
        logged, done = [], []

        async def settings_of(uri: str) -> dict:
            if not logged:
                raise RuntimeError("the settings are unavailable")
            return {}
        analyses = Analyses(debounce=0, log_error=logged.append)
        analyses.settings_of = settings_of
        try:
            for version in (1, 2):
                analyses.schedule("file:///tmp/train.py", version, BUGGY, None, lambda *args: done.append(args))
                last = await analyses.settled("file:///tmp/train.py")
                assert last is not None and last.version == version
        finally:
            analyses.stop()
        [(_, _, failed, _), (_, _, analysed, _)] = done
        assert failed.internal and failed.at == (1, 0)
        assert failed.cause.startswith("internal error in GradGuard: RuntimeError: the settings are unavailable "
                                       "(please report; at test_lsp_lifecycle.py:")
        assert "Traceback" in logged[0]
        assert [f.code for f in analysed.findings] == ["GG001"]
    asyncio.run(run())


def _resident(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's memory in Linux's /proc")
def test_the_server_forgets_each_notification_once_handled(ready: Server, tmp_path: Path):
    """pygls kept the future of every didChange for as long as the server ran (one per
    keystroke: ~1.7 MB per thousand); memory is flat over 3,500 of them after a warm-up."""
    uri = (tmp_path / "typed.py").as_uri()
    ready.open(uri, "x = 0\n")

    def typed(first: int, count: int) -> int:
        for version in range(first, first + count):
            ready.change(uri, version, {"range": {"start": {"line": 0, "character": 4},
                                                  "end": {"line": 0, "character": 5}}, "text": str(version % 10)})
        ready.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}})
        return _resident(ready.proc.pid)  # the hover is answered after every change before it was handled

    warm = typed(2, 500)
    assert typed(502, 3500) - warm < 3 * 2**20  # the leak would be ~6 MB
