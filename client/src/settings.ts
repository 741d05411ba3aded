// Settings -> what the server receives.  Pure: no `vscode` import, unit-tested in client/test.
//
// The server merges what it receives over `[tool.gradguard]` of the nearest pyproject.toml
// (every key replaces the project's value, `severity` entries are added).  So only the
// settings the user actually set are sent: a default such as `select: []` or `enable: true`
// must not override a project that says otherwise.

/** What `WorkspaceConfiguration.inspect()` returns, reduced to the parts used here. */
export interface Inspected<T> {
    defaultValue?: T;
    globalValue?: T;
    workspaceValue?: T;
    workspaceFolderValue?: T;
    globalLanguageValue?: T;
    workspaceLanguageValue?: T;
    workspaceFolderLanguageValue?: T;
}

/** The value the user set at the most specific level, or undefined when only the default applies. */
export function explicitValue<T>(inspected: Inspected<T> | undefined): T | undefined {
    if (!inspected) {
        return undefined;
    }
    const levels = [
        inspected.workspaceFolderLanguageValue, inspected.workspaceLanguageValue, inspected.globalLanguageValue,
        inspected.workspaceFolderValue, inspected.workspaceValue, inspected.globalValue,
    ];
    return levels.find((v) => v !== undefined && v !== null);
}

/** The settings that reach the server (`initializationOptions` and `workspace/didChangeConfiguration`). */
export const SERVER_KEYS = ["enable", "select", "ignore", "severity", "timeout", "followImports", "diagnosticMode"] as const;
/** The settings that decide which process runs: a change restarts the server. */
export const RESTART_KEYS = ["interpreter", "importStrategy"] as const;

export type ServerKey = (typeof SERVER_KEYS)[number];
export type Explicit = Partial<Record<ServerKey, unknown>>;

export interface ServerSettings {
    enable?: boolean;
    select?: string[];
    ignore?: string[];
    severity?: Record<string, string>;
    timeout?: number;
    followImports?: boolean;
    diagnosticMode?: DiagnosticMode;
}

/** Which files the Problems panel covers: the open ones (workspace diagnostics are empty), or every file. */
export const DIAGNOSTIC_MODES = ["openFilesOnly", "workspace"] as const;
export type DiagnosticMode = (typeof DIAGNOSTIC_MODES)[number];

const SEVERITIES = new Set(["error", "warning", "info", "hint"]);

function codes(value: unknown): string[] | undefined {
    if (!Array.isArray(value)) {
        return undefined;
    }
    const out = value.filter((v): v is string => typeof v === "string")
        .map((v) => v.trim().toUpperCase()).filter((v) => v.length > 0);
    return out.length > 0 ? out : undefined;  // empty: the project's select/ignore apply
}

/** The explicitly set settings, cleaned: empty lists and objects, nulls and wrong types are left out. */
export function serverSettings(explicit: Explicit): ServerSettings {
    const out: ServerSettings = {};
    if (typeof explicit.enable === "boolean") {
        out.enable = explicit.enable;
    }
    const select = codes(explicit.select);
    if (select) {
        out.select = select;
    }
    const ignore = codes(explicit.ignore);
    if (ignore) {
        out.ignore = ignore;
    }
    if (explicit.severity && typeof explicit.severity === "object" && !Array.isArray(explicit.severity)) {
        const severity: Record<string, string> = {};
        for (const [code, level] of Object.entries(explicit.severity as Record<string, unknown>)) {
            if (typeof level === "string" && SEVERITIES.has(level.trim().toLowerCase())) {
                severity[code.trim().toUpperCase()] = level.trim().toLowerCase();
            }
        }
        if (Object.keys(severity).length > 0) {
            out.severity = severity;
        }
    }
    if (typeof explicit.timeout === "number" && Number.isFinite(explicit.timeout) && explicit.timeout > 0) {
        out.timeout = explicit.timeout;
    }
    if (typeof explicit.followImports === "boolean") {
        out.followImports = explicit.followImports;
    }
    if ((DIAGNOSTIC_MODES as readonly unknown[]).includes(explicit.diagnosticMode)) {
        out.diagnosticMode = explicit.diagnosticMode as DiagnosticMode;
    }
    return out;
}

/** `initializationOptions`, and the `settings` of `workspace/didChangeConfiguration`: `{"gradguard": {...}}`. */
export function initializationOptions(explicit: Explicit): { gradguard: ServerSettings } {
    return { gradguard: serverSettings(explicit) };
}

/** One item of a `workspace/configuration` request. */
export interface ConfigurationItem {
    scopeUri?: string;
    section?: string;
}

/**
 * The answer to the server's `workspace/configuration` request, which asks for the "gradguard"
 * section with a document's URI as scope (a multi-root window has settings per folder):
 * `explicitAt(scopeUri)` gives the settings set for that scope, cleaned as `serverSettings`
 * cleans them, so defaults never override pyproject.toml.  Undefined when an item asks for
 * anything else: vscode-languageclient's own answer serves it.
 */
export function configurationAnswer(items: ConfigurationItem[],
    explicitAt: (scopeUri: string | undefined) => Explicit): ServerSettings[] | undefined {
    if (!items.every((item) => item.section === "gradguard")) {
        return undefined;
    }
    return items.map((item) => serverSettings(explicitAt(item.scopeUri)));
}

export type ChangeEffect = "restart" | "reconfigure" | "none";

/**
 * What a configuration change asks for, given `affects(section)` (the event's
 * `affectsConfiguration`): a new interpreter or import strategy needs a new server process;
 * rule settings are sent to the running server, which re-checks the open documents.
 * `gradguard.trace.server` is applied by vscode-languageclient itself.
 */
export function changeEffect(affects: (section: string) => boolean): ChangeEffect {
    if (RESTART_KEYS.some((k) => affects(`gradguard.${k}`))) {
        return "restart";
    }
    if (SERVER_KEYS.some((k) => affects(`gradguard.${k}`))) {
        return "reconfigure";
    }
    return "none";
}
