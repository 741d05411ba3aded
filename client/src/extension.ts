// The GradGuard extension: starts `python -m gradguard lsp` (the environment's or the bundled
// one) with vscode-languageclient, restarts it when the interpreter or a setting that picks the
// process changes, sends rule settings to the running server, and says exactly why when the
// server cannot start.  The decisions are in pure modules (interpreter, launch, settings,
// selector) that client/test checks without VS Code.
import { execFile } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as vscode from "vscode";
import {
    DidChangeConfigurationNotification,
    ExecuteCommandRequest,
    LanguageClient,
    type LanguageClientOptions,
    type ServerOptions,
} from "vscode-languageclient/node";
import { chooseInterpreter, type InterpreterChoice } from "./interpreter";
import { type Action, commandLine, decide, type Launch, type Notice, PROBE, probeOutcome, type ProbeOutcome } from "./launch";
import { DOCUMENT_SELECTOR, VSCODE_SELECTOR } from "./selector";
import { TraceChannel } from "./trace";
import { changeEffect, configurationAnswer, type Explicit, explicitValue, initializationOptions, SERVER_KEYS } from "./settings";

const PYTHON_EXTENSION = "ms-python.python";
const RULE_SCHEME = "gradguard-rule";

let extension: GradGuard | undefined;

export function activate(context: vscode.ExtensionContext): void {
    extension = new GradGuard(context);
    void extension.start();  // activation does not wait for the interpreter probe and the server
}

export async function deactivate(): Promise<void> {
    await extension?.dispose();
    extension = undefined;
}

class GradGuard {
    private readonly log: vscode.LogOutputChannel;
    private readonly trace: TraceChannel;
    private readonly status: vscode.LanguageStatusItem;
    private readonly rules = new Map<string, string>();
    private readonly ruleChanges = new vscode.EventEmitter<vscode.Uri>();
    private client: LanguageClient | undefined;
    private launch: Launch | undefined;
    private queue: Promise<void> = Promise.resolve();
    private pythonWatch: vscode.Disposable | undefined;
    private pyprojectTimer: NodeJS.Timeout | undefined;
    private settingsTimer: NodeJS.Timeout | undefined;
    private pendingEffect: "restart" | "reconfigure" | undefined;

    constructor(private readonly context: vscode.ExtensionContext) {
        this.log = vscode.window.createOutputChannel("GradGuard", { log: true });
        this.trace = new TraceChannel("GradGuard Trace", () => this.config().get<string>("trace.server"));
        this.status = vscode.languages.createLanguageStatusItem("gradguard.status", VSCODE_SELECTOR);
        this.status.name = "GradGuard";
        this.status.text = "GradGuard";
        this.status.command = { title: "Show Logs", command: "gradguard.showLogs" };
        const pyproject = vscode.workspace.createFileSystemWatcher("**/pyproject.toml");
        const onPyproject = () => this.pyprojectChanged();
        context.subscriptions.push(
            this.log, this.trace, this.status, this.ruleChanges, pyproject,
            pyproject.onDidChange(onPyproject), pyproject.onDidCreate(onPyproject), pyproject.onDidDelete(onPyproject),
            vscode.commands.registerCommand("gradguard.restart", () => this.restart("GradGuard: Restart Server")),
            vscode.commands.registerCommand("gradguard.showLogs", () => this.log.show()),
            vscode.commands.registerCommand("gradguard.fixAll", () => this.fixAll(false)),
            vscode.commands.registerCommand("gradguard.fixAllUnsafe", () => this.fixAll(true)),
            vscode.commands.registerCommand("gradguard.checkWorkspace", () => this.checkWorkspace()),
            vscode.commands.registerCommand("gradguard.showRuleDocumentation",
                (code?: unknown) => this.showRuleDocumentation(typeof code === "string" ? code : undefined)),
            vscode.commands.registerCommand("gradguard.explainTraceback", () => this.explainTraceback()),
            vscode.workspace.registerTextDocumentContentProvider(RULE_SCHEME, {
                onDidChange: this.ruleChanges.event,
                provideTextDocumentContent: (uri) => this.rules.get(uri.path.replace(/^\/|\.md$/g, "")) ?? "",
            }),
            vscode.workspace.onDidChangeConfiguration((event) => {
                const effect = changeEffect((section) => event.affectsConfiguration(section));
                if (effect !== "none") {
                    this.settingsChanged(effect);
                }
            }),
        );
    }

    start(): Promise<void> {
        return this.restart("activation");
    }

    /** Stop the running server (if any) and start a new one; restarts are queued, never concurrent. */
    restart(reason: string): Promise<void> {
        this.queue = this.queue.then(() => this.doRestart(reason)).catch((error) => {
            this.log.error(`restart failed: ${error instanceof Error ? error.stack : String(error)}`);
        });
        return this.queue;
    }

    async dispose(): Promise<void> {
        this.pythonWatch?.dispose();
        await this.queue;
        await this.stopClient();
    }

    // ------------------------------------------------------------------ start-up
    private resource(): vscode.Uri | undefined {
        return vscode.workspace.workspaceFolders?.[0]?.uri;
    }

    private config(resource?: vscode.Uri): vscode.WorkspaceConfiguration {
        return vscode.workspace.getConfiguration("gradguard", resource ?? this.resource());
    }

    /** The settings set at `resource` (a document: its folder's win), by default the first folder's. */
    private explicitSettings(resource?: vscode.Uri): Explicit {
        const config = this.config(resource);
        const out: Explicit = {};
        for (const key of SERVER_KEYS) {
            const value = explicitValue(config.inspect(key));
            if (value !== undefined) {
                out[key] = value;
            }
        }
        return out;
    }

    private async pythonExtensionInterpreter(): Promise<string | undefined> {
        if (!vscode.extensions.getExtension(PYTHON_EXTENSION)) {
            return undefined;
        }
        try {
            const { PythonExtension } = await import("@vscode/python-extension");
            const api = await PythonExtension.api();
            if (!this.pythonWatch) {
                this.pythonWatch = api.environments.onDidChangeActiveEnvironmentPath(() => {
                    if (!this.config().get<string>("interpreter")?.trim()) {
                        void this.restart("the Python extension's interpreter changed");
                    }
                });
                this.context.subscriptions.push(this.pythonWatch);
            }
            const active = api.environments.getActiveEnvironmentPath(this.resource());
            const resolved = await api.environments.resolveEnvironment(active);
            return resolved?.executable.uri?.fsPath ?? active.path;
        } catch (error) {
            this.log.warn(`the Python extension gave no interpreter: ${String(error)}`);
            return undefined;
        }
    }

    private async interpreter(): Promise<InterpreterChoice> {
        return chooseInterpreter({
            setting: this.config().get<string>("interpreter"),
            pythonExtension: await this.pythonExtensionInterpreter(),
            platform: process.platform,
            vars: { workspaceFolder: this.resource()?.fsPath, userHome: os.homedir(), env: process.env },
        });
    }

    private probe(python: string): Promise<ProbeOutcome> {
        return new Promise((resolve) => {
            execFile(python, ["-c", PROBE], { timeout: 30_000, cwd: this.neutralDirectory(), env: process.env },
                (error, stdout, stderr) => {
                    const spawnError = error && typeof (error as NodeJS.ErrnoException).code === "string"
                        ? (error as NodeJS.ErrnoException) : undefined;
                    resolve(probeOutcome(String(stdout), String(stderr), spawnError ?? (error ? { message: error.message } : undefined)));
                });
        });
    }

    /** The working directory of every Python process: `-m` and `-c` put it first on sys.path, so a
     *  workspace's `gradguard/` or `pygls.py` would be imported instead of the real ones (and run
     *  code from a folder merely opened).  The extension's own directory holds nothing importable. */
    private neutralDirectory(): string {
        return this.context.extensionUri.fsPath;
    }

    private bundledLibs(): string | undefined {
        const libs = this.context.asAbsolutePath("client/bundled/libs");
        return fs.existsSync(`${libs}/gradguard/__init__.py`) ? libs : undefined;
    }

    private async doRestart(reason: string): Promise<void> {
        await this.stopClient();
        const interpreter = await this.interpreter();
        const probe = await this.probe(interpreter.path);
        const decision = decide({
            interpreter, probe,
            importStrategy: this.config().get<string>("importStrategy") ?? "fromEnvironment",
            bundledLibs: this.bundledLibs(),
            pythonExtension: vscode.extensions.getExtension(PYTHON_EXTENSION) !== undefined,
            pythonPath: process.env.PYTHONPATH,
            platform: process.platform,
        });
        this.log.info(`starting (${reason}): interpreter ${interpreter.path} (${interpreter.source}); ` +
            `probe ${JSON.stringify(probe)}`);
        if (decision.kind === "fail") {
            this.launch = undefined;
            this.log.error(decision.notice.message);
            this.setStatus("not running", decision.notice.message, vscode.LanguageStatusSeverity.Error);
            void this.showNotice(decision.notice);
            return;
        }
        const launch = decision.launch;
        this.launch = launch;
        this.log.info(`server: ${launch.description}: ${launch.command} ${launch.args.join(" ")}` +
            (launch.env.PYTHONPATH ? ` with PYTHONPATH=${launch.env.PYTHONPATH}` : ""));
        const serverOptions: ServerOptions = {
            command: launch.command,
            args: launch.args,
            options: { env: { ...process.env, ...launch.env }, cwd: this.neutralDirectory() },
        };
        const clientOptions: LanguageClientOptions = {
            documentSelector: DOCUMENT_SELECTOR,
            outputChannel: this.log,
            traceOutputChannel: this.trace,  // gradguard.trace.server turns it on (see trace.ts)
            initializationOptions: initializationOptions(this.explicitSettings()),
            diagnosticPullOptions: { onChange: true, onSave: true },
            middleware: {
                workspace: {
                    // Settings per document's folder (multi-root), only those the user set.
                    configuration: (params, token, next) => configurationAnswer(params.items,
                        (scope) => this.explicitSettings(scope ? vscode.Uri.parse(scope) : undefined)) ?? next(params, token),
                },
            },
            connectionOptions: { maxRestartCount: 4 },
            initializationFailedHandler: (error) => {
                this.log.error(`the server failed to initialize: ${String(error)}`);
                return false;
            },
        };
        const client = new LanguageClient("gradguard", "GradGuard", serverOptions, clientOptions);
        this.client = client;
        try {
            await client.start();
        } catch (error) {
            const message = `GradGuard's server (${launch.description}) did not start: ${error instanceof Error ? error.message : String(error)}`;
            this.log.error(message);
            this.setStatus("not running", message, vscode.LanguageStatusSeverity.Error);
            void this.showNotice({ severity: "error", message, action: { kind: "command", title: "Show Logs", command: "gradguard.showLogs" } });
            return;
        }
        this.log.info(`server running: ${launch.description}`);
        this.setStatus(launch.mode === "bundled" ? "bundled server" : "running", launch.description,
            decision.notice ? vscode.LanguageStatusSeverity.Warning : vscode.LanguageStatusSeverity.Information);
        if (decision.notice) {
            this.log.warn(decision.notice.message);
            void this.showNotice(decision.notice);
        }
    }

    private async stopClient(): Promise<void> {
        const client = this.client;
        this.client = undefined;
        if (client) {
            try {
                await client.stop(3000);
            } catch (error) {
                this.log.warn(`stopping the server: ${String(error)}`);
            }
            await client.dispose().catch(() => undefined);
        }
    }

    private setStatus(text: string, detail: string, severity: vscode.LanguageStatusSeverity): void {
        this.status.text = `GradGuard: ${text}`;
        this.status.detail = detail;
        this.status.severity = severity;
    }

    /** Rule settings reach the running server; it re-checks the open documents. */
    private async reconfigure(reason: string): Promise<void> {
        const client = this.client;
        if (!client?.isRunning()) {
            return;
        }
        const settings = initializationOptions(this.explicitSettings());
        this.log.info(`settings sent to the server (${reason}): ${JSON.stringify(settings)}`);
        await client.sendNotification(DidChangeConfigurationNotification.type, { settings });
    }

    /** Settings typed into the Settings editor arrive a few characters at a time: act once they settle. */
    private settingsChanged(effect: "restart" | "reconfigure"): void {
        this.pendingEffect = this.pendingEffect === "restart" ? "restart" : effect;
        clearTimeout(this.settingsTimer);
        this.settingsTimer = setTimeout(() => {
            const pending = this.pendingEffect;
            this.pendingEffect = undefined;
            if (pending === "restart") {
                void this.restart("a setting changed");
            } else if (pending === "reconfigure") {
                void this.reconfigure("a setting changed");
            }
        }, 600);
    }

    private pyprojectChanged(): void {
        clearTimeout(this.pyprojectTimer);
        this.pyprojectTimer = setTimeout(() => void this.reconfigure("pyproject.toml changed"), 300);
    }

    // ------------------------------------------------------------------ messages and their actions
    private async showNotice(notice: Notice): Promise<void> {
        const show = notice.severity === "error" ? vscode.window.showErrorMessage : vscode.window.showWarningMessage;
        const picked = await show(notice.message, notice.action.title);
        if (picked === notice.action.title) {
            await this.run(notice.action);
        }
    }

    private async run(action: Action): Promise<void> {
        if (action.kind === "command") {
            await vscode.commands.executeCommand(action.command);
        } else if (action.kind === "settings") {
            await vscode.commands.executeCommand("workbench.action.openSettings", action.query);
        } else {
            await this.install(action.python, action.steps, action.title);
        }
    }

    /** Run pip in tasks (their output stays in the terminal panel); restart the server when all succeed. */
    private async install(python: string, steps: string[][], title: string): Promise<void> {
        for (const args of steps) {
            const command = commandLine([python, ...args], process.platform);
            const task = new vscode.Task({ type: "gradguard" }, vscode.workspace.workspaceFolders?.[0] ?? vscode.TaskScope.Workspace,
                title, "GradGuard", new vscode.ProcessExecution(python, args));
            task.presentationOptions = { reveal: vscode.TaskRevealKind.Always, clear: false };
            const ended = new Promise<number | undefined>((resolve) => {
                const listener = vscode.tasks.onDidEndTaskProcess((event) => {
                    if (event.execution.task.definition.type === "gradguard" && event.execution.task.name === title) {
                        listener.dispose();
                        resolve(event.exitCode);
                    }
                });
            });
            await vscode.tasks.executeTask(task);
            const code = await ended;
            this.log.info(`${command} exited with ${code}`);
            if (code !== 0) {
                void vscode.window.showErrorMessage(`GradGuard: ${command} failed (exit code ${code}): its output is in the terminal.`);
                return;
            }
        }
        await this.restart(`${title} succeeded`);
    }

    // ------------------------------------------------------------------ rule documentation
    private runGradguard(args: string[]): Promise<string> {
        const launch = this.launch;
        if (!launch) {
            return Promise.reject(new Error("GradGuard's server is not running: see GradGuard: Show Logs"));
        }
        return new Promise((resolve, reject) => {
            execFile(launch.command, ["-m", "gradguard", ...args],
                { timeout: 30_000, env: { ...process.env, ...launch.env }, cwd: this.neutralDirectory(), maxBuffer: 4 * 1024 * 1024 },
                (error, stdout, stderr) => error ? reject(new Error(String(stderr).trim() || error.message)) : resolve(String(stdout)));
        });
    }

    private codeAtCursor(): string | undefined {
        const editor = vscode.window.activeTextEditor;
        if (!editor) {
            return undefined;
        }
        const here = vscode.languages.getDiagnostics(editor.document.uri)
            .find((d) => d.source === "gradguard" && d.range.contains(editor.selection.active));
        const code = here?.code;
        return typeof code === "object" ? String(code.value) : code !== undefined ? String(code) : undefined;
    }

    /** Apply every confirmed fix of the active file (safe ones, or all): the server computes the
     *  edit and sends it back as workspace/applyEdit (`gradguard.applyFixAll`). */
    private async fixAll(unsafe: boolean): Promise<void> {
        const document = vscode.window.activeTextEditor?.document;
        if (!document || !this.client) {
            void vscode.window.showWarningMessage(
                `GradGuard: ${document ? "the server is not running" : "no file is open"}: nothing to fix`);
            return;
        }
        try {
            const answer = await this.client.sendRequest(ExecuteCommandRequest.type, {
                command: "gradguard.applyFixAll",
                arguments: [{ uri: this.client.code2ProtocolConverter.asUri(document.uri), version: document.version, unsafe }],
            }) as { applied?: number; reason?: string } | null;
            const applied = answer?.applied ?? 0;
            void vscode.window.setStatusBarMessage(
                applied ? `GradGuard: ${applied} fix${applied === 1 ? "" : "es"} applied` : `GradGuard: ${answer?.reason ?? "nothing fixed"}`,
                5000);
        } catch (error) {
            void vscode.window.showErrorMessage(`GradGuard: fix all failed: ${error instanceof Error ? error.message : String(error)}`);
        }
    }

    /** Check every Python file of the workspace folders (`gradguard.checkWorkspace`): the findings
     *  go to the Problems panel, which is shown, and the counts to the status bar. */
    private async checkWorkspace(): Promise<void> {
        const client = this.client;
        if (!client) {
            void vscode.window.showWarningMessage("GradGuard: the server is not running: nothing checked");
            return;
        }
        try {
            const answer = await vscode.window.withProgress(
                { location: vscode.ProgressLocation.Window, title: "GradGuard: checking the workspace" },
                () => client.sendRequest(ExecuteCommandRequest.type, { command: "gradguard.runWorkspaceCheck", arguments: [] }),
            ) as { files?: number; findings?: number; errors?: number } | null;
            const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
            void vscode.window.setStatusBarMessage(`GradGuard: ${plural(answer?.files ?? 0, "file")} checked, ` +
                `${plural(answer?.findings ?? 0, "finding")}` +
                (answer?.errors ? `, ${plural(answer.errors, "file")} not checked (see GradGuard: Show Logs)` : ""), 8000);
            await vscode.commands.executeCommand("workbench.actions.view.problems");
        } catch (error) {
            void vscode.window.showErrorMessage(`GradGuard: check workspace failed: ${error instanceof Error ? error.message : String(error)}`);
        }
    }

    private async showRuleDocumentation(code?: string): Promise<void> {
        try {
            let chosen = code ?? this.codeAtCursor();
            if (!chosen) {
                const rules = JSON.parse(await this.runGradguard(["rules", "--format", "json"])) as
                    { code: string; name: string; summary: string }[];
                const pick = await vscode.window.showQuickPick(
                    rules.map((r) => ({ label: r.code, description: r.name, detail: r.summary })),
                    { placeHolder: "Which rule's documentation?" });
                if (!pick) {
                    return;
                }
                chosen = pick.label;
            }
            await this.showMarkdown(chosen, await this.runGradguard(["rule", chosen]));
        } catch (error) {
            void vscode.window.showErrorMessage(`GradGuard: no rule documentation: ${error instanceof Error ? error.message : String(error)}`);
        }
    }

    /** A markdown page (a rule's documentation, a traceback's explanation) in the preview. */
    private async showMarkdown(name: string, markdown: string): Promise<void> {
        this.rules.set(name, markdown);
        const uri = vscode.Uri.from({ scheme: RULE_SCHEME, path: `/${name}.md` });
        this.ruleChanges.fire(uri);
        try {
            await vscode.commands.executeCommand("markdown.showPreview", uri);
        } catch {
            await vscode.window.showTextDocument(await vscode.workspace.openTextDocument(uri), { preview: true });
        }
    }

    /** Explain a PyTorch error from its traceback: the text selected in the editor (a log file),
     *  else the clipboard's, else what is typed into an input box. The server finds the files it
     *  names and answers with markdown whose links open the causes (`gradguard.explain`). */
    private async explainTraceback(): Promise<void> {
        if (!this.client) {
            void vscode.window.showWarningMessage("GradGuard: the server is not running: nothing explained");
            return;
        }
        const editor = vscode.window.activeTextEditor;
        let text = editor && !editor.selection.isEmpty ? editor.document.getText(editor.selection) : "";
        text ||= await vscode.env.clipboard.readText();
        if (!/Error|Traceback/.test(text)) {
            text = await vscode.window.showInputBox({
                prompt: "The error to explain (or copy the whole traceback, then run this command again)",
                placeHolder: "RuntimeError: Trying to backward through the graph a second time ...",
            }) ?? "";
            if (!text) {
                return;
            }
        }
        try {
            const answer = await this.client.sendRequest(ExecuteCommandRequest.type, {
                command: "gradguard.explain", arguments: [{ text }],
            }) as { markdown?: string; error?: string } | null;
            if (!answer?.markdown) {
                void vscode.window.showWarningMessage(`GradGuard: ${answer?.error ?? "no explanation"}`);
                return;
            }
            await this.showMarkdown("traceback", answer.markdown);
        } catch (error) {
            void vscode.window.showErrorMessage(`GradGuard: explain failed: ${error instanceof Error ? error.message : String(error)}`);
        }
    }
}
