// The "GradGuard Trace" output, driven by the gradguard.trace.server setting.
//
// vscode-languageclient 10+ traces only when its trace channel's log level is Trace, which a
// user sets with "Developer: Set Log Level", not with `<id>.trace.server`.  This channel reports
// the level from the setting instead (off -> Info, messages/verbose -> Trace), so the setting
// alone turns tracing on and off; the client then reads messages/verbose from the same setting.
import * as vscode from "vscode";

export class TraceChannel implements vscode.LogOutputChannel {
    private readonly channel: vscode.OutputChannel;
    private readonly changes = new vscode.EventEmitter<vscode.LogLevel>();
    private level: vscode.LogLevel;
    private readonly watch: vscode.Disposable;
    readonly onDidChangeLogLevel = this.changes.event;

    constructor(readonly name: string, private readonly setting: () => string | undefined) {
        this.channel = vscode.window.createOutputChannel(name);
        this.level = this.fromSetting();
        this.watch = vscode.workspace.onDidChangeConfiguration((event) => {
            if (event.affectsConfiguration("gradguard.trace.server")) {
                const level = this.fromSetting();
                if (level !== this.level) {
                    this.level = level;
                    this.changes.fire(level);
                }
            }
        });
    }

    private fromSetting(): vscode.LogLevel {
        const value = this.setting();
        return value && value !== "off" ? vscode.LogLevel.Trace : vscode.LogLevel.Info;
    }

    get logLevel(): vscode.LogLevel {
        return this.level;
    }

    private line(kind: string, message: string | Error, args: unknown[]): void {
        const text = message instanceof Error ? (message.stack ?? message.message) : message;
        const extra = args.length ? ` ${args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ")}` : "";
        this.channel.appendLine(`${new Date().toISOString()} [${kind}] ${text}${extra}`);
    }

    trace(message: string, ...args: unknown[]): void {
        if (this.level === vscode.LogLevel.Trace) {
            this.line("trace", message, args);
        }
    }

    debug(message: string, ...args: unknown[]): void {
        this.line("debug", message, args);
    }

    info(message: string, ...args: unknown[]): void {
        this.line("info", message, args);
    }

    warn(message: string, ...args: unknown[]): void {
        this.line("warning", message, args);
    }

    error(error: string | Error, ...args: unknown[]): void {
        this.line("error", error, args);
    }

    append(value: string): void {
        this.channel.append(value);
    }

    appendLine(value: string): void {
        this.channel.appendLine(value);
    }

    replace(value: string): void {
        this.channel.replace(value);
    }

    clear(): void {
        this.channel.clear();
    }

    show(columnOrPreserveFocus?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
        if (typeof columnOrPreserveFocus === "boolean") {
            this.channel.show(columnOrPreserveFocus);
        } else {
            this.channel.show(columnOrPreserveFocus, preserveFocus);
        }
    }

    hide(): void {
        this.channel.hide();
    }

    dispose(): void {
        this.watch.dispose();
        this.changes.dispose();
        this.channel.dispose();
    }
}
