// Bundles the client (client/src/extension.ts and vscode-languageclient) into the one file the
// manifest's "main" names.  `vscode` is provided by the editor at run time.
import * as esbuild from "esbuild";

const watch = process.argv.includes("--watch");
const options = {
    entryPoints: ["client/src/extension.ts"],
    outfile: "client/dist/extension.js",
    bundle: true,
    external: ["vscode"],
    format: "cjs",
    platform: "node",
    target: "node18",
    minify: true,
    keepNames: true,
    sourcemap: false,
    logLevel: "info",
};
if (watch) {
    await (await esbuild.context(options)).watch();
} else {
    await esbuild.build(options);
}
