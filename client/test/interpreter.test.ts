import assert from "node:assert/strict";
import { test } from "node:test";
import { chooseInterpreter, describeSource, expandVariables } from "../src/interpreter";

const vars = { workspaceFolder: "/work/proj", userHome: "/home/ada", env: { VENV: "/opt/venv" } };

test("the gradguard.interpreter setting wins when set", () => {
    assert.deepEqual(chooseInterpreter({ setting: "/usr/bin/python3.12", pythonExtension: "/venv/bin/python", platform: "linux", vars }),
        { path: "/usr/bin/python3.12", source: "setting" });
});

test("then the Python extension's selected interpreter", () => {
    assert.deepEqual(chooseInterpreter({ setting: "", pythonExtension: "/venv/bin/python", platform: "linux", vars }),
        { path: "/venv/bin/python", source: "python-extension" });
    assert.deepEqual(chooseInterpreter({ setting: "   ", pythonExtension: "/venv/bin/python", platform: "linux", vars }),
        { path: "/venv/bin/python", source: "python-extension" });
});

test("then python3 on PATH (python on Windows)", () => {
    assert.deepEqual(chooseInterpreter({ platform: "linux", vars }), { path: "python3", source: "default" });
    assert.deepEqual(chooseInterpreter({ setting: "", pythonExtension: "", platform: "darwin", vars }),
        { path: "python3", source: "default" });
    assert.deepEqual(chooseInterpreter({ platform: "win32", vars }), { path: "python", source: "default" });
});

test("variables in the setting are expanded", () => {
    assert.equal(chooseInterpreter({ setting: "${workspaceFolder}/.venv/bin/python", platform: "linux", vars }).path,
        "/work/proj/.venv/bin/python");
    assert.equal(chooseInterpreter({ setting: "~/.venvs/t/bin/python", platform: "linux", vars }).path,
        "/home/ada/.venvs/t/bin/python");
    assert.equal(chooseInterpreter({ setting: "${env:VENV}/bin/python", platform: "linux", vars }).path, "/opt/venv/bin/python");
    assert.equal(chooseInterpreter({ setting: "${userHome}/py/bin/python", platform: "linux", vars }).path, "/home/ada/py/bin/python");
    assert.equal(expandVariables("${env:NOPE}x", vars), "x");
    assert.equal(expandVariables("${unknown}/python", vars), "${unknown}/python");
    assert.equal(expandVariables("${workspaceFolder}/p", { userHome: "/h", env: {} }), "${workspaceFolder}/p");
});

test("a relative path is relative to the workspace folder; a bare name is looked up on PATH", () => {
    assert.equal(chooseInterpreter({ setting: ".venv/bin/python", platform: "linux", vars }).path, "/work/proj/.venv/bin/python");
    assert.equal(chooseInterpreter({ setting: "python3.12", platform: "linux", vars }).path, "python3.12");
    assert.equal(chooseInterpreter({ setting: ".venv\\Scripts\\python.exe", platform: "win32", vars: { ...vars, workspaceFolder: "C:\\proj" } }).path,
        "C:\\proj\\.venv\\Scripts\\python.exe");
    assert.equal(chooseInterpreter({ setting: "C:\\Python312\\python.exe", platform: "win32", vars }).path, "C:\\Python312\\python.exe");
});

test("messages name where the interpreter came from", () => {
    assert.match(describeSource({ path: "p", source: "setting" }), /gradguard\.interpreter/);
    assert.match(describeSource({ path: "p", source: "python-extension" }), /Python extension/);
    assert.match(describeSource({ path: "p", source: "default" }), /default/);
});
