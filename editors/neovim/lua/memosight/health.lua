--- :checkhealth memosight — tells the user exactly what is missing or wrong.

local M = {}

local health = vim.health

local MIN_PYTHON = { 3, 10 }
local INSTALL_HINT = "install the server with `pip install memosight-lsp` in a Python 3.10+ "
  .. "environment, or set `cmd` in setup() (e.g. { '/path/to/python', '-m', 'memosight_lsp' })"

---@param cmd string[]
---@param timeout_ms integer
---@return integer code, string stdout, string stderr
local function run(cmd, timeout_ms)
  -- PYTHONSAFEPATH: `python -c` run in a project must not import that project's modules.
  local ok, proc = pcall(vim.system, cmd, { text = true, env = { PYTHONSAFEPATH = "1" } })
  if not ok then
    return -1, "", tostring(proc)
  end
  local res = proc:wait(timeout_ms)
  if res.signal ~= 0 and res.code == 0 then
    return 124, res.stdout or "", "timed out after " .. timeout_ms .. " ms"
  end
  return res.code, res.stdout or "", res.stderr or ""
end

---@param text string
---@return string
local function last_line(text)
  local lines = vim.split(vim.trim(text), "\n", { plain = true })
  return lines[#lines] or ""
end

--- The Python interpreter behind the server command: the command itself when it is a Python,
--- else the interpreter in the console script's #! line.
---@param exe string absolute path of cmd[1]
---@return string?
local function python_of(exe)
  if vim.fs.basename(exe):match("^python") then
    return exe
  end
  local ok, lines = pcall(vim.fn.readfile, exe, "", 1)
  local shebang = ok and lines[1] or ""
  local interp = shebang:match("^#!%s*(%S+)")
  if not interp then
    return nil
  end
  if vim.fs.basename(interp) == "env" then
    local name = shebang:match("^#!%s*%S+%s+(%S+)")
    return name and vim.fn.exepath(name) ~= "" and vim.fn.exepath(name) or nil
  end
  return vim.fs.basename(interp):match("^python") and interp or nil
end

local function check_neovim()
  health.start("Neovim")
  local v = vim.version()
  local text = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.10") == 0 then
    health.error("Neovim " .. text .. " is too old", { "MemoSight needs Neovim 0.10 or newer" })
    return
  end
  health.ok("Neovim " .. text)
  if vim.fn.has("nvim-0.11") == 1 then
    health.ok("server started through vim.lsp.config / vim.lsp.enable")
  else
    health.info("Neovim 0.10: server started with vim.lsp.start per buffer")
  end
  local path, reason = require("memosight").ghost_path()
  if path then
    health.ok(("ghost text: %s (%s)"):format(path, reason))
  else
    local builtin = require("memosight.ghost.builtin").available()
    health.info("ghost text would be: " .. (builtin and "builtin (vim.lsp.inline_completion)" or "fallback (plugin extmarks)"))
  end
end

--- Whether next edits are on, and which keys apply and dismiss them.
---@param cfg memosight.Config
local function report_next_edit(cfg)
  local ne = cfg.next_edit
  if not ne.enabled then
    health.info("next edits: off (next_edit.enabled = false)")
    return
  end
  local apply = { ":MemoSightNextEdit" }
  if ne.keymaps.apply then
    table.insert(apply, 1, ne.keymaps.apply)
  end
  if cfg.keymaps.accept then
    apply[#apply + 1] = cfg.keymaps.accept .. " (insert mode, no ghost shown)"
  end
  local dismiss = { ":MemoSight dismissNextEdit" }
  if ne.keymaps.dismiss then
    table.insert(dismiss, 1, ne.keymaps.dismiss)
  end
  health.ok(("next edits: on, asked %d ms after an edit; applied with %s; dismissed with %s"):format(
    ne.debounce_ms, table.concat(apply, ", "), table.concat(dismiss, ", ")))
end

---@return memosight.Config?
local function check_setup()
  health.start("Configuration")
  local cfg = require("memosight").config()
  if not cfg then
    health.warn("setup() has not been called", { "add require('memosight').setup({}) to your config" })
    return nil
  end
  health.ok("setup() called; cmd = " .. vim.inspect(cfg.cmd))
  local keys = {}
  for action, lhs in pairs(cfg.keymaps) do
    if lhs then
      keys[#keys + 1] = action .. " = " .. lhs
    end
  end
  table.sort(keys)
  if #keys == 0 then
    health.info("no keymaps set: accept with vim.lsp.inline_completion.get() or require('memosight').accept()")
  else
    health.ok("keymaps: " .. table.concat(keys, ", "))
  end
  report_next_edit(cfg)
  local model_path = vim.tbl_get(cfg.settings, "model", "path")
  local expanded = type(model_path) == "string" and vim.fn.expand(model_path) or nil
  -- "auto" (the default) is found by the server; a path is a folder or a .gguf file.
  if expanded and model_path ~= "auto" and vim.fn.isdirectory(expanded) == 0 and vim.fn.filereadable(expanded) == 0 then
    health.error("settings.model.path does not exist: " .. model_path)
  end
  return cfg
end

---@param cfg memosight.Config
---@return string? python
local function check_server(cfg)
  health.start("Server")
  if type(cfg.cmd) == "function" then
    health.info("cmd is a function (a server over TCP?): skipping the install checks")
    return nil
  end
  local exe = vim.fn.exepath(cfg.cmd[1])
  if exe == "" then
    health.error(("server command not found: %s"):format(cfg.cmd[1]), { INSTALL_HINT })
    return nil
  end
  health.ok("server command: " .. exe)
  local python = python_of(exe)
  if not python then
    health.warn("could not tell which Python runs " .. exe .. "; skipping the Python checks")
    return nil
  end
  local code, out, err = run({ python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])" }, 10000)
  if code ~= 0 then
    health.error(("%s does not run: %s"):format(python, last_line(err)))
    return nil
  end
  local version = vim.trim(out)
  local major, minor = version:match("^(%d+)%.(%d+)")
  if tonumber(major) < MIN_PYTHON[1] or (tonumber(major) == MIN_PYTHON[1] and tonumber(minor) < MIN_PYTHON[2]) then
    health.error(("Python %s at %s is too old (3.10+ needed)"):format(version, python))
    return nil
  end
  health.ok(("Python %s (%s)"):format(version, python))
  code, out, err = run({ python, "-c", "import memosight_lsp; print(memosight_lsp.__version__)" }, 20000)
  if code ~= 0 then
    health.error("the memosight_lsp package does not import: " .. last_line(err), { INSTALL_HINT })
    return nil
  end
  health.ok("memosight_lsp " .. vim.trim(out))
  return python
end

--- The embedded fallback as a warning with its one fix, or how `auto` chose the model.
---@param resolved table? `resolved` of `memosight models --json`
local function report_resolution(resolved)
  if type(resolved) ~= "table" then
    return
  end
  if type(resolved.notice) == "string" then
    health.warn(("%s (%s)"):format(resolved.notice, tostring(resolved.reason)), { tostring(resolved.fix) })
  elseif type(resolved.source) == "string" then
    health.ok(("found by model.path auto, in %s: %s"):format(resolved.source, tostring(resolved.reason)))
  end
end

--- Loads the configured model the way the server would (`memosight models --json`).
---@param cfg memosight.Config
---@param python string
local function check_model(cfg, python)
  health.start("Model")
  local model = cfg.settings.model or {}
  local remote_setting = type(model.backend) == "string" and model.backend ~= "local"
  if not remote_setting and (model.path == nil or model.path == "auto") then
    -- What auto finds, without loading it (a first load of a real model can take minutes: the
    -- running server's section says how that went).
    local list = { python, "-c", "import sys; from memosight_lsp.cli import main; sys.exit(main())", "models", "--list", "--json" }
    if type(model.device) == "string" then
      vim.list_extend(list, { "--device", model.device })
    end
    local code, out, err = run(list, 30000)
    local ok, info = pcall(vim.json.decode, out)
    if code ~= 0 or not ok or type(info) ~= "table" or type(info.auto) ~= "table" then
      health.error("`memosight models --list` failed: " .. last_line(err ~= "" and err or out))
      return
    end
    report_resolution(info.auto)
    return
  end
  local cmd = { python, "-c", "import sys; from memosight_lsp.cli import main; sys.exit(main())", "models", "--json" }
  local options = {
    ["--model"] = "path", ["--device"] = "device", ["--dtype"] = "dtype", ["--fim-format"] = "fimFormat",
    ["--backend"] = "backend", ["--url"] = "url", ["--name"] = "name", ["--api-key-env"] = "apiKeyEnv",
  }
  for option, key in pairs(options) do
    if type(model[key]) == "string" then
      vim.list_extend(cmd, { option, key == "path" and vim.fn.expand(model[key]) or model[key] })
    end
  end
  local remote = type(model.backend) == "string" and model.backend ~= "local"
  local code, out, err = run(cmd, 60000)
  if code ~= 0 then
    local hint = remote and "start the engine, or fix settings.model.url / settings.model.name"
      or 'set settings.model.path to "auto", a .gguf file or a local model folder, or reinstall memosight-lsp'
    health.error((remote and "the engine does not answer: " or "the model does not load: ")
      .. last_line(err ~= "" and err or out), { hint })
    return
  end
  local ok, info = pcall(vim.json.decode, out)
  if not ok or type(info) ~= "table" then
    health.warn("`memosight models --json` printed something unexpected: " .. last_line(out))
    return
  end
  if remote or info.engine ~= nil then -- auto may pick an engine serving a code model on loopback
    health.ok(("%s at %s serves %s (FIM %s, %s tokens of context)"):format(
      tostring(info.engine),
      tostring(info.url),
      tostring(info.name),
      info.engineInfill and "by the engine" or (info.fimFormat ~= vim.NIL and tostring(info.fimFormat) or "none"),
      tostring(info.contextLength ~= vim.NIL and info.contextLength or "?")
    ))
    return
  end
  health.ok(("model %s loads (%s, %.1fM parameters, %s %s, FIM %s) in %.1f s"):format(
    tostring(info.name),
    tostring(info.architecture),
    (tonumber(info.parameters) or 0) / 1e6,
    tostring(info.device),
    tostring(info.dtype),
    info.fimFormat ~= vim.NIL and tostring(info.fimFormat) or "none",
    tonumber(info.loadSeconds) or 0
  ))
  report_resolution(info.resolved)
end

local function check_running()
  health.start("Running server")
  local clients = require("memosight.client").all()
  local status = require("memosight").status()
  if #clients == 0 then
    health.info("no server running (it starts when a buffer of a configured filetype opens)")
    return
  end
  for _, client in ipairs(clients) do
    local provider = client.server_capabilities and client.server_capabilities.inlineCompletionProvider
    local buffers = vim.tbl_count(client.attached_buffers)
    if provider then
      health.ok(("client %d: inline completion advertised, %d buffer(s) attached"):format(client.id, buffers))
    else
      health.error(("client %d: the server does not advertise textDocument/inlineCompletion"):format(client.id))
    end
  end
  local text = ("status: %s — %s"):format(status.state, status.message)
  if status.state == "ready" and status.notice then
    health.warn(("%s (model %s): %s"):format(text, tostring(status.model), status.notice), { status.fix })
  elseif status.state == "ready" then
    health.ok(text .. (status.model and (" (model " .. status.model .. ")") or ""))
  elseif status.state == "error" then
    health.error(text, { "see :LspLog, or restart with :MemoSight restart" })
  else
    health.info(text)
  end
end

function M.check()
  check_neovim()
  local cfg = check_setup()
  if not cfg then
    return
  end
  local python = check_server(cfg)
  if python then
    check_model(cfg, python)
  end
  check_running()
end

return M
