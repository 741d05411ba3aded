// The manifest against the code: every setting the client reads is contributed, with a description;
// @types/vscode is pinned to engines.vscode (vsce refuses a newer one); the commands exist.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { RESTART_KEYS, SERVER_KEYS } from "../src/settings";

const root = path.resolve(__dirname, "..", "..", "..");
const manifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));

test("every setting is contributed with a description", () => {
    const props = manifest.contributes.configuration.properties;
    const expected = [...SERVER_KEYS, ...RESTART_KEYS, "trace.server"].map((k) => `gradguard.${k}`).sort();
    assert.deepEqual(Object.keys(props).sort(), expected);
    for (const [key, value] of Object.entries(props) as [string, { markdownDescription?: string; description?: string }][]) {
        assert.ok((value.markdownDescription ?? value.description ?? "").length > 20, key);
    }
});

test("@types/vscode is the engines.vscode version", () => {
    assert.equal(`^${manifest.devDependencies["@types/vscode"]}`, manifest.engines.vscode);
});

test("activation, entry point and commands", () => {
    assert.deepEqual(manifest.activationEvents.slice(0, 3),
        ["onLanguage:python", "onNotebook:jupyter-notebook", "workspaceContains:pyproject.toml"]);
    assert.equal(manifest.main, "./client/dist/extension.js");
    const titles = manifest.contributes.commands.map((c: { category: string; title: string }) => `${c.category}: ${c.title}`);
    assert.deepEqual(titles, ["GradGuard: Restart Server", "GradGuard: Show Logs", "GradGuard: Show Rule Documentation",
        "GradGuard: Explain a Traceback",
        "GradGuard: Fix All in This File", "GradGuard: Fix All in This File, Unsafe Fixes Included",
        "GradGuard: Check Workspace"]);
    const source = fs.readFileSync(path.join(root, "client", "src", "extension.ts"), "utf8");
    for (const c of manifest.contributes.commands) {
        assert.ok(source.includes(`"${c.command}"`), c.command);
    }
});
