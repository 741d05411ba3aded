// Which documents the server sees.  Pure data, unit-tested in client/test.

/** For vscode-languageclient (LSP document filters): files, untitled documents and the Python
 *  cells of Jupyter notebooks (synchronised as notebook documents, which the server declares). */
export const DOCUMENT_SELECTOR = [
    { scheme: "file", language: "python" },
    { scheme: "untitled", language: "python" },
    { notebook: "jupyter-notebook", language: "python" },
];

/** The same documents as a VS Code selector (for the language status item). */
export const VSCODE_SELECTOR = [
    { scheme: "file", language: "python" },
    { scheme: "untitled", language: "python" },
    { notebookType: "jupyter-notebook", language: "python" },
];
