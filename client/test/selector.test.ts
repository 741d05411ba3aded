import assert from "node:assert/strict";
import { test } from "node:test";
import { DOCUMENT_SELECTOR, VSCODE_SELECTOR } from "../src/selector";

test("the server sees files, untitled documents and the Python cells of Jupyter notebooks", () => {
    assert.deepEqual(DOCUMENT_SELECTOR, [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
        { notebook: "jupyter-notebook", language: "python" },
    ]);
    assert.equal(VSCODE_SELECTOR.length, DOCUMENT_SELECTOR.length);
});
