import assert from "node:assert/strict";
import { test } from "node:test";
import { changeEffect, configurationAnswer, explicitValue, initializationOptions, serverSettings } from "../src/settings";

test("only explicitly set values count, the most specific level winning", () => {
    assert.equal(explicitValue({ defaultValue: true }), undefined);
    assert.equal(explicitValue(undefined), undefined);
    assert.equal(explicitValue({ defaultValue: true, globalValue: false }), false);
    assert.deepEqual(explicitValue({ defaultValue: [], globalValue: ["GG1"], workspaceValue: ["GG001"] }), ["GG001"]);
    assert.equal(explicitValue({ globalValue: 3, workspaceValue: 4, workspaceFolderValue: 5 }), 5);
    assert.equal(explicitValue({ globalValue: 3, globalLanguageValue: 7 }), 7);
});

test("nothing set: the server gets an empty gradguard object, so pyproject.toml decides", () => {
    assert.deepEqual(initializationOptions({}), { gradguard: {} });
});

test("every server setting reaches initializationOptions under the gradguard key", () => {
    assert.deepEqual(initializationOptions({
        enable: false, select: ["GG0", "gg101"], ignore: [" GG103 "], severity: { GG101: "info" }, timeout: 2.5,
        followImports: false, diagnosticMode: "workspace",
    }), {
        gradguard: {
            enable: false, select: ["GG0", "GG101"], ignore: ["GG103"], severity: { GG101: "info" }, timeout: 2.5,
            followImports: false, diagnosticMode: "workspace",
        },
    });
});

test("empty lists and objects, nulls and wrong types are left out", () => {
    assert.deepEqual(serverSettings({
        enable: "yes", select: [], ignore: ["", "  "], severity: {}, timeout: null, followImports: "no",
        diagnosticMode: "everything",
    }), {});
    assert.deepEqual(serverSettings({ diagnosticMode: null }), {});
    assert.deepEqual(serverSettings({ timeout: 0 }), {});
    assert.deepEqual(serverSettings({ timeout: -1 }), {});
    assert.deepEqual(serverSettings({ timeout: Number.NaN }), {});
    assert.deepEqual(serverSettings({ select: "GG001" }), {});
    assert.deepEqual(serverSettings({ severity: ["GG001"] }), {});
});

test("severity: known levels kept (lower-cased), others dropped", () => {
    assert.deepEqual(serverSettings({ severity: { gg101: "INFO", GG102: "fatal", GG103: 3, GG001: "hint" } }),
        { severity: { GG101: "info", GG001: "hint" } });
});

test("enable=true set explicitly is sent (it overrides a project's enabled = false)", () => {
    assert.deepEqual(serverSettings({ enable: true }), { enable: true });
});

test("interpreter and import strategy restart the server; rule settings are sent to it", () => {
    const only = (...sections: string[]) => (s: string) => sections.includes(s) || sections.some((x) => x.startsWith(`${s}.`));
    assert.equal(changeEffect(only("gradguard.interpreter")), "restart");
    assert.equal(changeEffect(only("gradguard.importStrategy")), "restart");
    assert.equal(changeEffect(only("gradguard.select", "gradguard.interpreter")), "restart");
    for (const key of ["enable", "select", "ignore", "severity", "timeout", "followImports", "diagnosticMode"]) {
        assert.equal(changeEffect(only(`gradguard.${key}`)), "reconfigure", key);
    }
    assert.equal(changeEffect(only("gradguard.trace.server")), "none");
    assert.equal(changeEffect(only("python.analysis.typeCheckingMode")), "none");
});

test("workspace/configuration is answered per scope, with the settings set there only", () => {
    const perFolder: Record<string, Record<string, unknown>> = {
        "file:///ws/a/train.py": { ignore: ["gg001"], enable: true },
        "file:///ws/b/train.py": { select: [], severity: { GG003: "warning" } },
    };
    const asked: (string | undefined)[] = [];
    const answer = configurationAnswer([
        { scopeUri: "file:///ws/a/train.py", section: "gradguard" },
        { scopeUri: "file:///ws/b/train.py", section: "gradguard" },
        { section: "gradguard" },
    ], (scope) => {
        asked.push(scope);
        return scope ? perFolder[scope] : {};
    });
    assert.deepEqual(answer, [{ ignore: ["GG001"], enable: true }, { severity: { GG003: "warning" } }, {}]);
    assert.deepEqual(asked, ["file:///ws/a/train.py", "file:///ws/b/train.py", undefined]);
});

test("a request for any other section is left to the language client", () => {
    assert.equal(configurationAnswer([{ section: "python" }, { section: "gradguard" }], () => ({})), undefined);
    assert.equal(configurationAnswer([{ scopeUri: "file:///x.py" }], () => ({})), undefined);
});
