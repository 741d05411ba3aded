// How to start the server, or why it cannot start.  Pure: no `vscode` import, unit-tested in
// client/test.  The extension runs PROBE with the chosen interpreter, then `decide` picks:
//   - the environment's gradguard (`python -m gradguard lsp`) when it is installed there
//     (and gradguard.importStrategy is fromEnvironment, the default);
//   - otherwise the server bundled in the extension: the same command with the bundled
//     pure-Python packages (gradguard, pygls, lsprotocol, cattrs, attrs, ...) first on
//     PYTHONPATH.  libcst is compiled per platform, so it is not bundled: the environment's
//     libcst is used when it has one, and without it diagnostics and hovers still work and
//     one warning says which command installs libcst for quick fixes;
//   - or, when the interpreter is missing, broken or older than 3.9, one error that says so,
//     with one action that fixes it.
import type { InterpreterChoice } from "./interpreter";
import { describeSource } from "./interpreter";

export const MIN_PYTHON: readonly [number, number] = [3, 9];

/** Runs on any Python, 2.7 included, so that an old one can be named; prints one marked JSON line. */
export const PROBE = `
import sys, json
r = {"version": list(sys.version_info[:3]), "executable": sys.executable}
if sys.version_info >= (3, 4):
    import importlib.util
    def found(name):
        try:
            return importlib.util.find_spec(name) is not None
        except Exception:
            return False
    for name in ("gradguard", "pygls", "lsprotocol", "libcst", "pip"):
        r[name] = found(name)
    r["gradguard_lsp"] = r["gradguard"] and found("gradguard.lsp")
    if r["gradguard"]:
        try:
            import gradguard
            r["gradguard_version"] = getattr(gradguard, "__version__", None)
            r["gradguard_path"] = getattr(gradguard, "__file__", None)
        except Exception as exc:
            r["gradguard_error"] = repr(exc)
print("GRADGUARD-PROBE " + json.dumps(r))
`;

export interface ProbeInfo {
    version: [number, number, number];
    executable: string;
    gradguard: boolean;
    gradguard_lsp: boolean;
    gradguard_version?: string | null;
    gradguard_path?: string | null;
    gradguard_error?: string;
    pygls: boolean;
    lsprotocol: boolean;
    libcst: boolean;
    /** Whether `python -m pip` can run (Debian's system Python and `venv --without-pip` have none). */
    pip: boolean;
}

export type ProbeOutcome =
    | { kind: "ok"; info: ProbeInfo }
    | { kind: "not-found" }
    | { kind: "failed"; detail: string };

/** The outcome of running PROBE: `error` is the spawn error (its `code`), if any. */
export function probeOutcome(stdout: string, stderr: string, error?: { code?: unknown; message?: string }): ProbeOutcome {
    if (error && (error.code === "ENOENT" || error.code === "EACCES" || error.code === "ENOTDIR")) {
        return { kind: "not-found" };
    }
    const line = stdout.split(/\r?\n/).find((l) => l.startsWith("GRADGUARD-PROBE "));
    if (line) {
        try {
            const raw = JSON.parse(line.slice("GRADGUARD-PROBE ".length));
            if (Array.isArray(raw.version) && raw.version.length === 3) {
                return {
                    kind: "ok",
                    info: {
                        version: raw.version, executable: String(raw.executable ?? ""),
                        gradguard: raw.gradguard === true, gradguard_lsp: raw.gradguard_lsp === true,
                        gradguard_version: raw.gradguard_version, gradguard_path: raw.gradguard_path,
                        gradguard_error: raw.gradguard_error,
                        pygls: raw.pygls === true, lsprotocol: raw.lsprotocol === true, libcst: raw.libcst === true,
                        pip: raw.pip !== false,
                    },
                };
            }
        } catch {
            // fall through: not the probe's output
        }
    }
    const lines = (stderr.trim() || stdout.trim() || error?.message || "no output").split(/\r?\n/);
    return { kind: "failed", detail: lines[lines.length - 1].trim() };
}

export type Action =
    | { kind: "command"; title: string; command: string }
    | { kind: "settings"; title: string; query: string }
    /** Run `python ...step` for each step, in order, in a task; restart the server if all succeed. */
    | { kind: "install"; title: string; python: string; steps: string[][] };

export interface Notice {
    severity: "error" | "warning";
    message: string;
    action: Action;
}

export interface Launch {
    mode: "environment" | "bundled";
    command: string;
    args: string[];
    /** Variables to set on top of the extension host's environment. */
    env: Record<string, string>;
    /** For the logs and the status item. */
    description: string;
}

export type Decision = { kind: "start"; launch: Launch; notice?: Notice } | { kind: "fail"; notice: Notice };

export interface DecideInput {
    interpreter: InterpreterChoice;
    probe: ProbeOutcome;
    importStrategy: string;
    /** The bundled packages' directory, or undefined when this build of the extension has none. */
    bundledLibs?: string;
    pythonExtension: boolean;
    /** The PYTHONPATH the server would inherit. */
    pythonPath?: string;
    platform: NodeJS.Platform;
}

/** A command line as the user would type it. */
export function commandLine(args: string[], platform: NodeJS.Platform): string {
    return args.map((a) => {
        if (/^[A-Za-z0-9_@%+=:,./\\-]+$/.test(a)) {
            return a;
        }
        return platform === "win32" ? `"${a.replace(/"/g, '\\"')}"` : `'${a.replace(/'/g, "'\\''")}'`;
    }).join(" ");
}

function installAction(python: string, pkg: string, platform: NodeJS.Platform, pip: boolean, upgrade = false) {
    const steps = [["-m", "pip", "install", ...(upgrade ? ["--upgrade"] : []), pkg]];
    if (!pip) {
        steps.unshift(["-m", "ensurepip", "--upgrade"]);  // pip first; ensurepip installs it without a download
    }
    return {
        line: steps.map((step) => commandLine([python, ...step], platform)).join(" && "),
        action: { kind: "install", title: `Install ${pkg}`, python, steps } as Action,
    };
}

function fixInterpreter(input: DecideInput): Action {
    if (input.pythonExtension && input.interpreter.source !== "setting") {
        return { kind: "command", title: "Select Interpreter", command: "python.setInterpreter" };
    }
    return { kind: "settings", title: "Open Settings", query: "gradguard.interpreter" };
}

export function decide(input: DecideInput): Decision {
    const python = input.interpreter.path;
    const where = `"${python}" (${describeSource(input.interpreter)})`;
    const probe = input.probe;
    if (probe.kind === "not-found") {
        return fail(`GradGuard cannot start: the Python interpreter ${where} was not found.`, fixInterpreter(input));
    }
    if (probe.kind === "failed") {
        return fail(`GradGuard cannot start: ${where} did not run as a Python interpreter: ${probe.detail}`,
            fixInterpreter(input));
    }
    const info = probe.info;
    const version = info.version.join(".");
    const [major, minor] = info.version;
    if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) {
        return fail(`GradGuard cannot start: it needs Python ${MIN_PYTHON.join(".")} or newer, and ${where} is ` +
            `Python ${version}.`, fixInterpreter(input));
    }
    const complete = info.gradguard && info.gradguard_lsp && info.pygls && info.lsprotocol && !info.gradguard_error;
    const libcstMissing = (reason: string): Notice => {
        const install = installAction(python, "libcst", input.platform, info.pip);
        return {
            severity: "warning",
            message: `${reason}GradGuard's quick fixes need libcst, which "${python}" lacks. Run: ${install.line}`,
            action: install.action,
        };
    };
    const args = ["-m", "gradguard", "lsp"];
    if (input.importStrategy !== "useBundled" && complete) {
        return {
            kind: "start",
            launch: {
                mode: "environment", command: python, args, env: {},
                description: `gradguard ${info.gradguard_version ?? "(unknown version)"} of ${python} (Python ${version})`,
            },
            notice: info.libcst ? undefined : libcstMissing(""),
        };
    }
    let why: string;
    if (input.importStrategy === "useBundled") {
        why = "gradguard.importStrategy is useBundled";
    } else if (!info.gradguard) {
        why = `"${python}" has no gradguard package`;
    } else if (info.gradguard_error) {
        why = `"${python}"'s gradguard does not import (${info.gradguard_error})`;
    } else if (!info.gradguard_lsp) {
        why = `"${python}"'s gradguard ${info.gradguard_version ?? ""} has no language server`.replace("  ", " ");
    } else {
        why = `"${python}"'s gradguard lacks ${!info.pygls ? "pygls" : "lsprotocol"}`;
    }
    if (!input.bundledLibs) {
        const install = installAction(python, "gradguard", input.platform, info.pip, info.gradguard);
        return fail(`GradGuard cannot start: ${why}, and this build of the extension bundles no server. ` +
            `Run: ${install.line}`, install.action);
    }
    const delimiter = input.platform === "win32" ? ";" : ":";
    return {
        kind: "start",
        launch: {
            mode: "bundled", command: python, args,
            env: { PYTHONPATH: [input.bundledLibs, input.pythonPath].filter((p) => p).join(delimiter) },
            description: `the bundled gradguard with ${python} (Python ${version}), as ${why}`,
        },
        notice: info.libcst ? undefined : libcstMissing(`GradGuard runs its bundled server, as ${why}. `),
    };
}

function fail(message: string, action: Action): Decision {
    return { kind: "fail", notice: { severity: "error", message, action } };
}
