import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import type { InterpreterChoice } from "../src/interpreter";
import { commandLine, decide, type DecideInput, MIN_PYTHON, PROBE, type ProbeInfo, probeOutcome } from "../src/launch";

const PY = "/home/ada/venv/bin/python";
const fromSetting: InterpreterChoice = { path: PY, source: "setting" };
const fromExtension: InterpreterChoice = { path: PY, source: "python-extension" };

function info(overrides: Partial<ProbeInfo> = {}): ProbeInfo {
    return {
        version: [3, 11, 7], executable: PY, gradguard: true, gradguard_lsp: true, gradguard_version: "0.1.0",
        pygls: true, lsprotocol: true, libcst: true, pip: true, ...overrides,
    };
}

function input(overrides: Partial<DecideInput> = {}): DecideInput {
    return {
        interpreter: fromSetting, probe: { kind: "ok", info: info() }, importStrategy: "fromEnvironment",
        bundledLibs: "/ext/client/bundled/libs", pythonExtension: false, platform: "linux", ...overrides,
    };
}

test("gradguard installed in the environment: python -m gradguard lsp, nothing added", () => {
    const d = decide(input());
    assert.equal(d.kind, "start");
    assert.ok(d.kind === "start");
    assert.deepEqual([d.launch.mode, d.launch.command, d.launch.args, d.launch.env],
        ["environment", PY, ["-m", "gradguard", "lsp"], {}]);
    assert.equal(d.notice, undefined);
});

test("no gradguard in the environment: the bundled server, found first on PYTHONPATH", () => {
    const d = decide(input({ probe: { kind: "ok", info: info({ gradguard: false, gradguard_lsp: false, pygls: false, lsprotocol: false }) },
        pythonPath: "/mine" }));
    assert.ok(d.kind === "start");
    assert.equal(d.launch.mode, "bundled");
    assert.deepEqual(d.launch.args, ["-m", "gradguard", "lsp"]);
    assert.deepEqual(d.launch.env, { PYTHONPATH: "/ext/client/bundled/libs:/mine" });
    assert.equal(d.notice, undefined);  // libcst is there: quick fixes work, nothing to say
    assert.match(d.launch.description, /has no gradguard package/);
});

test("on Windows PYTHONPATH is joined with ;", () => {
    const d = decide(input({ probe: { kind: "ok", info: info({ gradguard: false }) }, platform: "win32", pythonPath: "C:\\mine" }));
    assert.ok(d.kind === "start");
    assert.equal(d.launch.env.PYTHONPATH, "/ext/client/bundled/libs;C:\\mine");
});

test("no gradguard and no libcst: the bundled server and one warning naming the command to run", () => {
    const d = decide(input({ probe: { kind: "ok", info: info({ gradguard: false, libcst: false }) } }));
    assert.ok(d.kind === "start");
    assert.equal(d.launch.mode, "bundled");
    assert.ok(d.notice);
    assert.equal(d.notice.severity, "warning");
    assert.equal(d.notice.message,
        `GradGuard runs its bundled server, as "${PY}" has no gradguard package. ` +
        `GradGuard's quick fixes need libcst, which "${PY}" lacks. Run: ${PY} -m pip install libcst`);
    assert.deepEqual(d.notice.action, { kind: "install", title: "Install libcst", python: PY, steps: [["-m", "pip", "install", "libcst"]] });
});

test("no pip either: the command installs pip first with ensurepip", () => {
    const d = decide(input({ probe: { kind: "ok", info: info({ gradguard: false, libcst: false, pip: false }) } }));
    assert.ok(d.kind === "start" && d.notice);
    assert.ok(d.notice.message.endsWith(`Run: ${PY} -m ensurepip --upgrade && ${PY} -m pip install libcst`), d.notice.message);
    assert.deepEqual(d.notice.action, { kind: "install", title: "Install libcst", python: PY,
        steps: [["-m", "ensurepip", "--upgrade"], ["-m", "pip", "install", "libcst"]] });
});

test("importStrategy useBundled runs the bundled server even when the environment has gradguard", () => {
    const d = decide(input({ importStrategy: "useBundled" }));
    assert.ok(d.kind === "start");
    assert.equal(d.launch.mode, "bundled");
    assert.match(d.launch.description, /useBundled/);
});

test("an incomplete gradguard in the environment falls back to the bundled server", () => {
    for (const broken of [{ gradguard_lsp: false }, { pygls: false }, { lsprotocol: false }, { gradguard_error: "ImportError('x')" }]) {
        const d = decide(input({ probe: { kind: "ok", info: info(broken) } }));
        assert.ok(d.kind === "start", JSON.stringify(broken));
        assert.equal(d.launch.mode, "bundled", JSON.stringify(broken));
    }
});

test("the environment's gradguard without libcst still starts, with the libcst warning", () => {
    const d = decide(input({ probe: { kind: "ok", info: info({ libcst: false }) } }));
    assert.ok(d.kind === "start");
    assert.equal(d.launch.mode, "environment");
    assert.equal(d.notice?.action.title, "Install libcst");
});

test("no gradguard and a build without the bundled server: one error with the pip command", () => {
    const d = decide(input({ bundledLibs: undefined, probe: { kind: "ok", info: info({ gradguard: false }) } }));
    assert.ok(d.kind === "fail");
    assert.equal(d.notice.message,
        `GradGuard cannot start: "${PY}" has no gradguard package, and this build of the extension bundles no server. ` +
        `Run: ${PY} -m pip install gradguard`);
    assert.deepEqual(d.notice.action, { kind: "install", title: "Install gradguard", python: PY, steps: [["-m", "pip", "install", "gradguard"]] });
});

test("Python too old: says which version it found and which it needs", () => {
    const d = decide(input({ probe: { kind: "ok", info: info({ version: [3, 8, 18] }) } }));
    assert.ok(d.kind === "fail");
    assert.equal(d.notice.message,
        `GradGuard cannot start: it needs Python ${MIN_PYTHON.join(".")} or newer, and "${PY}" (set by gradguard.interpreter) is Python 3.8.18.`);
    assert.deepEqual(d.notice.action, { kind: "settings", title: "Open Settings", query: "gradguard.interpreter" });
    const d2 = decide(input({ probe: { kind: "ok", info: info({ version: [2, 7, 18] }) } }));
    assert.ok(d2.kind === "fail");
    assert.match(d2.notice.message, /is Python 2\.7\.18\.$/);
    const d3 = decide(input({ probe: { kind: "ok", info: info({ version: [3, 9, 0] }) } }));
    assert.equal(d3.kind, "start");
});

test("the fixing action: Select Interpreter when the Python extension chose it, Open Settings otherwise", () => {
    const old = { kind: "ok" as const, info: info({ version: [3, 7, 16] as [number, number, number] }) };
    const viaExtension = decide(input({ interpreter: fromExtension, pythonExtension: true, probe: old }));
    assert.ok(viaExtension.kind === "fail");
    assert.deepEqual(viaExtension.notice.action, { kind: "command", title: "Select Interpreter", command: "python.setInterpreter" });
    assert.match(viaExtension.notice.message, /selected in the Python extension/);
    // The setting wins over the Python extension's choice, so selecting another one there would not help.
    const viaSetting = decide(input({ pythonExtension: true, probe: old }));
    assert.ok(viaSetting.kind === "fail");
    assert.equal(viaSetting.notice.action.title, "Open Settings");
});

test("interpreter not found", () => {
    const d = decide(input({ interpreter: { path: "python3", source: "default" }, probe: { kind: "not-found" } }));
    assert.ok(d.kind === "fail");
    assert.equal(d.notice.message,
        'GradGuard cannot start: the Python interpreter "python3" (the default, as no interpreter is selected) was not found.');
    assert.equal(d.notice.action.title, "Open Settings");
});

test("an interpreter that does not run as Python", () => {
    const d = decide(input({ probe: { kind: "failed", detail: "Segmentation fault" } }));
    assert.ok(d.kind === "fail");
    assert.match(d.notice.message, /did not run as a Python interpreter: Segmentation fault$/);
});

test("probe output is parsed; noise before it is ignored; spawn errors are classified", () => {
    const line = `GRADGUARD-PROBE ${JSON.stringify({ version: [3, 9, 18], executable: "/p", gradguard: false, pygls: false, lsprotocol: false, libcst: true, gradguard_lsp: false })}`;
    const ok = probeOutcome(`sitecustomize says hi\n${line}\n`, "");
    assert.ok(ok.kind === "ok");
    assert.deepEqual(ok.info.version, [3, 9, 18]);
    assert.equal(ok.info.libcst, true);
    assert.equal(ok.info.gradguard, false);
    assert.equal(ok.info.pip, true);  // not reported: assume pip
    const py2 = probeOutcome('GRADGUARD-PROBE {"version": [2, 7, 18], "executable": "/usr/bin/python2"}\n', "");
    assert.ok(py2.kind === "ok");
    assert.equal(py2.info.gradguard, false);
    assert.deepEqual(probeOutcome("", "", { code: "ENOENT", message: "spawn nope ENOENT" }), { kind: "not-found" });
    assert.deepEqual(probeOutcome("", "", { code: "EACCES" }), { kind: "not-found" });
    assert.deepEqual(probeOutcome("", "Traceback...\nSyntaxError: invalid syntax\n", { code: 1 }),
        { kind: "failed", detail: "SyntaxError: invalid syntax" });
    assert.deepEqual(probeOutcome("GRADGUARD-PROBE {not json", ""), { kind: "failed", detail: "GRADGUARD-PROBE {not json" });
});

test("commands are shown as one would type them", () => {
    assert.equal(commandLine(["/usr/bin/python3", "-m", "pip", "install", "libcst"], "linux"), "/usr/bin/python3 -m pip install libcst");
    assert.equal(commandLine(["/My Envs/py", "-m", "pip"], "linux"), "'/My Envs/py' -m pip");
    assert.equal(commandLine(["C:\\Program Files\\Python\\python.exe", "-m", "pip"], "win32"), '"C:\\Program Files\\Python\\python.exe" -m pip');
});

function runProbe(python: string): Promise<ReturnType<typeof probeOutcome>> {
    return new Promise((resolve) => {
        execFile(python, ["-c", PROBE], { timeout: 30_000 }, (error, stdout, stderr) => {
            const code = (error as NodeJS.ErrnoException | null)?.code;
            resolve(probeOutcome(String(stdout), String(stderr), error ? { code, message: error.message } : undefined));
        });
    });
}

test("the real probe, run by a real interpreter", async () => {
    const python = process.env.GRADGUARD_TEST_PYTHON || "python3";
    const outcome = await runProbe(python);
    assert.ok(outcome.kind === "ok", JSON.stringify(outcome));
    assert.ok(outcome.info.version[0] === 3);
    if (process.env.GRADGUARD_TEST_PYTHON) {  // set by tests/test_vscode.py: an environment that has gradguard
        assert.equal(outcome.info.gradguard, true);
        const d = decide(input({ probe: outcome }));
        assert.ok(d.kind === "start" && d.launch.mode === "environment");
    }
    assert.deepEqual(await runProbe("/nonexistent/bin/python3"), { kind: "not-found" });
});

test("the probe runs on old interpreters too, so that they can be named", async (t) => {
    const old = process.env.GRADGUARD_TEST_OLD_PYTHON;
    if (!old) {
        t.skip("GRADGUARD_TEST_OLD_PYTHON is not set");
        return;
    }
    const outcome = await runProbe(old);
    assert.ok(outcome.kind === "ok", JSON.stringify(outcome));
    const d = decide(input({ probe: outcome }));
    assert.ok(d.kind === "fail");
    assert.match(d.notice.message, /needs Python 3\.9 or newer/);
});
