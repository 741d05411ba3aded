// Packages gradguard.vsix from a staging directory (build/vsix) that holds only what the
// .vsix may carry: vsce lists every file under its working directory before .vscodeignore
// filters them, and a checkout's .venv (torch: ~30,000 files) made that take ~27 s.
// .vscodeignore still decides what goes in; it is staged with the rest.
import { cpSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const stage = join(repo, "build", "vsix");
const shipped = ["package.json", ".vscodeignore", "LICENSE", "client/README.md", "client/dist", "client/bundled",
    "client/images"];

rmSync(stage, { recursive: true, force: true });
for (const path of shipped) {
    if (!existsSync(join(repo, path))) {
        console.error(`vsix: ${path} is missing (run \`npm run build\` and \`npm run bundle-server\` first)`);
        process.exit(1);
    }
    mkdirSync(dirname(join(stage, path)), { recursive: true });
    cpSync(join(repo, path), join(stage, path), { recursive: true });
}
const vsce = join(repo, "node_modules", "@vscode", "vsce", "vsce");
const args = ["package", "--no-dependencies", "--readme-path", "client/README.md", "--out", join(repo, "gradguard.vsix")];
const result = spawnSync(process.execPath, [vsce, ...args], { cwd: stage, stdio: "inherit" });
process.exit(result.status ?? 1);
