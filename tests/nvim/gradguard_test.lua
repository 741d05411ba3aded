-- init.lua for headless Neovim (>= 0.7, Debian's 0.7.2 included): a real editor attaches the
-- GradGuard language server to the file it opened, waits for the pushed diagnostic on the
-- expected line, asks for its code actions, resolves the preferred quick fix, applies it the
-- way `vim.lsp.buf.code_action()` does, writes the buffer, waits for the diagnostic to go,
-- and quits.  Driven by tests/test_neovim.py:
--
--   GRADGUARD_PYTHON       python to run `-m gradguard lsp` with
--   GRADGUARD_PYTHONPATH   PYTHONPATH for the server (the repository's server/)
--   GRADGUARD_EXPECT_LINE  1-based line the diagnostic must be on
--   GRADGUARD_EXPECT_CODE  its code (e.g. GG001)
--   GRADGUARD_RESULT       where to write the fixed buffer
--   GRADGUARD_STATUS       where to write a JSON status (written on failure too)
--   GRADGUARD_TIMEOUT_MS   bound of each wait (default 30000)
--
--   nvim --headless -n -i NONE -u gradguard_test.lua case.py
--
-- Exits 0 (`qa!`) when everything happened, else `cquit 1` after writing the reason to
-- stderr and to the status file.

local env = vim.env
local timeout = tonumber(env.GRADGUARD_TIMEOUT_MS or "") or 30000
local status = { ok = false, steps = {} }
local client_id = nil
local server_exit = nil

vim.o.swapfile = false
vim.o.shadafile = "NONE"
vim.lsp.set_log_level("ERROR") -- server stderr lands in stdpath('cache')/lsp.log

local function step(name)
  status.steps[#status.steps + 1] = name
end

local function write_status()
  if env.GRADGUARD_STATUS then
    vim.fn.writefile({ vim.fn.json_encode(status) }, env.GRADGUARD_STATUS)
  end
end

-- Shut the server down (shutdown + exit) and wait, bounded, until its process has gone.
local function stop_server()
  if not client_id then
    return
  end
  local client = vim.lsp.get_client_by_id(client_id)
  if client then
    client.stop()
    if not vim.wait(5000, function() return server_exit ~= nil end, 20) then
      client.stop(true) -- SIGTERM after the grace period
      vim.wait(2000, function() return server_exit ~= nil end, 20)
    end
  end
  status.server_exit = server_exit
end

local function fail(message)
  status.ok = false
  status.error = message
  pcall(stop_server)
  write_status()
  io.stderr:write("gradguard_test.lua: " .. message .. "\n")
  vim.cmd("cquit 1")
end

-- An expected failure: reported without a Lua traceback (unexpected errors keep theirs).
local function die(message)
  error({ reason = message })
end

local function require_env(name)
  local value = env[name]
  if value == nil or value == "" then
    die("environment variable " .. name .. " is not set")
  end
  return value
end

local function summary(diags)
  local out = {}
  for _, d in ipairs(diags) do
    out[#out + 1] = { line = d.lnum + 1, code = d.code, source = d.source, message = d.message }
  end
  return out
end

local function run()
  local python = require_env("GRADGUARD_PYTHON")
  local expect_line = tonumber(require_env("GRADGUARD_EXPECT_LINE"))
  local expect_code = require_env("GRADGUARD_EXPECT_CODE")
  local result_path = require_env("GRADGUARD_RESULT")
  local bufnr = vim.api.nvim_get_current_buf()
  local path = vim.api.nvim_buf_get_name(bufnr)
  if path == "" then
    die("no file was opened")
  end
  status.nvim = tostring(vim.version().major) .. "." .. vim.version().minor .. "." .. vim.version().patch

  -- 1. Start the server and attach it to the buffer (0.7 has no vim.lsp.start).
  client_id = vim.lsp.start_client({
    name = "gradguard",
    cmd = { python, "-m", "gradguard", "lsp" },
    cmd_env = { PYTHONPATH = env.GRADGUARD_PYTHONPATH or "" },
    root_dir = vim.fn.fnamemodify(path, ":p:h"),
    flags = { debounce_text_changes = 50 },
    on_exit = function(code, signal)
      server_exit = { code = code, signal = signal }
    end,
  })
  if not client_id then
    die("vim.lsp.start_client failed")
  end
  if not vim.lsp.buf_attach_client(bufnr, client_id) then
    die("vim.lsp.buf_attach_client failed")
  end
  step("attached")
  local client = vim.lsp.get_client_by_id(client_id)
  if not vim.wait(timeout, function() return server_exit ~= nil or client.initialized end, 20) then
    die("the server did not initialize within " .. timeout .. " ms")
  end
  if server_exit then
    die("the server exited during start-up: " .. vim.fn.json_encode(server_exit))
  end
  step("initialized")
  status.offset_encoding = client.offset_encoding
  local caps = client.server_capabilities or client.resolved_capabilities or {}
  status.server_name = (client.server_info or {}).name

  -- 2. The pushed diagnostic (0.7 cannot pull): wait for the first publication.
  local ns = vim.lsp.diagnostic.get_namespace(client_id)
  local function published()
    return vim.diagnostic.get(bufnr, { namespace = ns })
  end
  if not vim.wait(timeout, function() return server_exit ~= nil or #published() > 0 end, 20) then
    die("no diagnostics were published within " .. timeout .. " ms")
  end
  if server_exit then
    die("the server exited: " .. vim.fn.json_encode(server_exit))
  end
  status.diagnostics = summary(published())
  local lsp_diags = vim.lsp.diagnostic.get_line_diagnostics(bufnr, expect_line - 1, {}, client_id)
  local diag = nil
  for _, d in ipairs(lsp_diags) do
    if d.source == "gradguard" and d.code == expect_code then
      diag = d
      break
    end
  end
  if not diag then
    die(("no gradguard %s diagnostic on line %d; published: %s"):format(
      expect_code, expect_line, vim.fn.json_encode(status.diagnostics)))
  end
  status.diagnostic = {
    line = diag.range.start.line + 1, code = diag.code, source = diag.source, message = diag.message,
  }
  step("diagnostic")

  -- 3. Its code actions, as vim.lsp.buf.code_action() asks for them.
  local response, err = client.request_sync("textDocument/codeAction", {
    textDocument = vim.lsp.util.make_text_document_params(bufnr),
    range = diag.range,
    context = { diagnostics = { diag } },
  }, timeout, bufnr)
  if not response then
    die("textDocument/codeAction: " .. tostring(err))
  end
  if response.err then
    die("textDocument/codeAction failed: " .. vim.inspect(response.err))
  end
  local actions = response.result or {}
  status.actions = {}
  local preferred = {}
  for _, action in ipairs(actions) do
    status.actions[#status.actions + 1] = action.title
    if action.isPreferred then
      preferred[#preferred + 1] = action
    end
  end
  if #preferred ~= 1 then
    die(("expected one preferred action, got %d of %s"):format(#preferred, vim.fn.json_encode(status.actions)))
  end
  local action = preferred[1]
  status.action = action.title
  step("actions")

  -- 4. Resolve the edit if the server left it out (0.7 advertises resolveSupport for "edit").
  status.resolved = false
  if not action.edit then
    if not caps.codeActionProvider or type(caps.codeActionProvider) ~= "table"
        or not caps.codeActionProvider.resolveProvider then
      die("the action has no edit and the server does not resolve code actions")
    end
    local resolved, rerr = client.request_sync("codeAction/resolve", action, timeout, bufnr)
    if not resolved then
      die("codeAction/resolve: " .. tostring(rerr))
    end
    if resolved.err then
      die("codeAction/resolve failed: " .. vim.inspect(resolved.err))
    end
    action = resolved.result or {}
    status.resolved = true
    step("resolved")
  end
  if not action.edit then
    die("the preferred action has no edit: " .. vim.inspect(action))
  end

  -- 5. Apply it as the editor does, and write the buffer.
  local before = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  vim.lsp.util.apply_workspace_edit(action.edit, client.offset_encoding)
  local after = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  if vim.deep_equal(before, after) then
    die("applying the edit changed nothing: " .. vim.inspect(action.edit))
  end
  step("applied")
  vim.cmd("silent keepalt write! " .. vim.fn.fnameescape(result_path))
  step("written")

  -- 6. The editor tells the server about the change; the diagnostic must go.
  local function still_flagged()
    for _, d in ipairs(published()) do
      if d.lnum == expect_line - 1 and d.code == expect_code then
        return true
      end
    end
    return false
  end
  if not vim.wait(timeout, function() return server_exit ~= nil or not still_flagged() end, 20) then
    die(expect_code .. " was still reported " .. timeout .. " ms after the fix")
  end
  if server_exit then
    die("the server exited: " .. vim.fn.json_encode(server_exit))
  end
  status.diagnostics_after = summary(published())
  step("cleared")

  stop_server()
  step("stopped")
  status.ok = true
  write_status()
  vim.cmd("qa!")
end

vim.api.nvim_create_autocmd("VimEnter", {
  once = true,
  callback = function()
    local ok, message = xpcall(run, function(e)
      return type(e) == "table" and e.reason or debug.traceback(tostring(e))
    end)
    if not ok then
      fail(tostring(message))
    end
  end,
})
