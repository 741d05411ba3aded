// Which Python runs the server.  Pure: no `vscode` import, unit-tested in client/test.
//
// Order: the `gradguard.interpreter` setting when it is set (an explicit choice for this tool,
// as in Microsoft's Python tool extensions: pylint, black, isort); otherwise the interpreter
// selected in the Python extension; otherwise `python3` on PATH (`python` on Windows).
import * as path from "node:path";

export type InterpreterSource = "setting" | "python-extension" | "default";

export interface InterpreterChoice {
    path: string;
    source: InterpreterSource;
}

export interface Variables {
    workspaceFolder?: string;
    userHome: string;
    env: Record<string, string | undefined>;
}

/** `${workspaceFolder}`, `${userHome}`, `${env:NAME}` and a leading `~` expanded; unknown variables are kept. */
export function expandVariables(value: string, vars: Variables): string {
    let out = value.replace(/\$\{(workspaceFolder|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (whole, name, envName) => {
        if (envName !== undefined) {
            return vars.env[envName] ?? "";
        }
        if (name === "workspaceFolder") {
            return vars.workspaceFolder ?? whole;
        }
        return vars.userHome;
    });
    if (out === "~" || out.startsWith("~/") || out.startsWith("~\\")) {
        out = vars.userHome + out.slice(1);
    }
    return out;
}

export function defaultInterpreter(platform: NodeJS.Platform): string {
    return platform === "win32" ? "python" : "python3";
}

export function chooseInterpreter(options: {
    setting?: string;
    pythonExtension?: string;
    platform: NodeJS.Platform;
    vars: Variables;
}): InterpreterChoice {
    const setting = options.setting?.trim();
    if (setting) {
        let p = expandVariables(setting, options.vars);
        // A relative path with a directory part is relative to the workspace folder;
        // a bare name ("python3.12") is looked up on PATH when the process starts.
        const hasDir = p.includes("/") || (options.platform === "win32" && p.includes("\\"));
        const pathApi = options.platform === "win32" ? path.win32 : path.posix;
        if (hasDir && !pathApi.isAbsolute(p) && options.vars.workspaceFolder) {
            p = pathApi.join(options.vars.workspaceFolder, p);
        }
        return { path: p, source: "setting" };
    }
    const fromExtension = options.pythonExtension?.trim();
    if (fromExtension) {
        return { path: fromExtension, source: "python-extension" };
    }
    return { path: defaultInterpreter(options.platform), source: "default" };
}

export function describeSource(choice: InterpreterChoice): string {
    switch (choice.source) {
        case "setting":
            return "set by gradguard.interpreter";
        case "python-extension":
            return "selected in the Python extension";
        default:
            return "the default, as no interpreter is selected";
    }
}
