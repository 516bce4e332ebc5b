--- Starting, finding and talking to the MemoSight server through Neovim's LSP client.

local refresh = require("memosight.refresh")
local status = require("memosight.status")

local api = vim.api

local M = {}

M.name = "memosight"

--- Neovim 0.11 added vim.lsp.config/enable and method calls on clients.
local has_lsp_config = vim.fn.has("nvim-0.11") == 1

---@param client vim.lsp.Client
---@param method string
local function call(client, method, ...)
  if has_lsp_config then
    return client[method](client, ...)
  end
  return client[method](...)
end

--- The wire settings: always an object (an empty Lua table would encode as a JSON list).
---@param settings table
---@return table
function M.wire_settings(settings)
  return vim.tbl_deep_extend("force", { enable = true }, settings)
end

---@param cfg memosight.Config
---@param settings table
---@return table
local function lsp_config(cfg, settings)
  return {
    cmd = cfg.cmd,
    filetypes = cfg.filetypes,
    root_markers = cfg.root_markers,
    init_options = settings,
    settings = { memosight = settings },
    handlers = {
      ["memosight/status"] = status.handler,
      ["memosight/completionUpdated"] = refresh.handler,
    },
    on_init = function()
      -- The server may already have reported during initialize: keep what it said.
      local state = status.get().state
      if state == "starting" or state == "stopped" then
        status.set({ state = "loading", message = "server started" })
      end
    end,
    on_exit = function(code)
      vim.schedule(function()
        status.set({ state = "stopped", message = ("server exited with code %d"):format(code) })
      end)
    end,
  }
end

local augroup = api.nvim_create_augroup("memosight.client", { clear = true })

--- 0.10: start the server per buffer ourselves.
---@param cfg memosight.Config
---@param settings table
local function start_legacy(cfg, settings)
  local function start(bufnr)
    if vim.bo[bufnr].buftype ~= "" or not vim.tbl_contains(cfg.filetypes, vim.bo[bufnr].filetype) then
      return
    end
    local conf = lsp_config(cfg, settings)
    conf.name = M.name
    conf.root_dir = vim.fs.root(bufnr, cfg.root_markers) or vim.fn.getcwd()
    vim.lsp.start(conf, { bufnr = bufnr })
  end
  api.nvim_create_autocmd("FileType", {
    group = augroup,
    callback = function(args)
      start(args.buf)
    end,
  })
  for _, bufnr in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(bufnr) then
      start(bufnr)
    end
  end
end

--- Registers and enables the server config; calls `on_attach(bufnr, client)` and
--- `on_detach(bufnr)` for the buffers our client serves.
---@param cfg memosight.Config
---@param on_attach fun(bufnr: integer, client: vim.lsp.Client)
---@param on_detach fun(bufnr: integer)
function M.start(cfg, on_attach, on_detach)
  api.nvim_clear_autocmds({ group = augroup })
  api.nvim_create_autocmd("LspAttach", {
    group = augroup,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == M.name then
        on_attach(args.buf, client)
      end
    end,
  })
  api.nvim_create_autocmd("LspDetach", {
    group = augroup,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == M.name then
        on_detach(args.buf)
      end
    end,
  })
  local settings = M.wire_settings(cfg.settings)
  status.set({ state = "starting", message = "waiting for a buffer to attach to" })
  if has_lsp_config then
    vim.lsp.config(M.name, lsp_config(cfg, settings))
    vim.lsp.enable(M.name)
  else
    start_legacy(cfg, settings)
  end
end

--- Our client serving `bufnr` (0: current), or any of ours when `bufnr` is nil.
---@param bufnr? integer
---@return vim.lsp.Client?
function M.get(bufnr)
  local filter = { name = M.name }
  if bufnr then
    filter.bufnr = bufnr == 0 and api.nvim_get_current_buf() or bufnr
  end
  return vim.lsp.get_clients(filter)[1]
end

---@return vim.lsp.Client[]
function M.all()
  return vim.lsp.get_clients({ name = M.name })
end

--- Sends a request to our client for `bufnr`; `cb(err, result)` gets a one-line error when no
--- server is running.
---@param method string
---@param params table
---@param cb fun(err: string?, result: any)
---@param bufnr? integer
function M.request(method, params, cb, bufnr)
  local client = M.get(bufnr) or M.get()
  if not client then
    cb("no MemoSight server is running (is the buffer's filetype in `filetypes`?)", nil)
    return
  end
  call(client, "request", method, params, function(err, result)
    cb(err and (err.message or vim.inspect(err)) or nil, result)
  end, bufnr)
end

--- Pushes new settings to running servers and to future ones.
---@param cfg memosight.Config
function M.update_settings(cfg)
  local settings = M.wire_settings(cfg.settings)
  for _, client in ipairs(M.all()) do
    client.settings = { memosight = settings } -- answers later workspace/configuration asks
    call(client, "notify", "workspace/didChangeConfiguration", { settings = { memosight = settings } })
  end
  if has_lsp_config then
    vim.lsp.config(M.name, lsp_config(cfg, settings))
  end
end

--- Stops the server and starts it again for the buffers it served.
---@param cfg memosight.Config
function M.restart(cfg)
  local buffers = {}
  for _, client in ipairs(M.all()) do
    for bufnr in pairs(client.attached_buffers) do
      buffers[#buffers + 1] = bufnr
    end
  end
  if has_lsp_config then
    vim.lsp.enable(M.name, false)
  else
    for _, client in ipairs(M.all()) do
      call(client, "stop")
    end
  end
  -- Start again once the old process is gone, so the new client is not matched to it.
  local deadline = vim.uv.now() + 5000
  local function again()
    if #M.all() > 0 and vim.uv.now() < deadline then
      vim.defer_fn(again, 50)
      return
    end
    for _, client in ipairs(M.all()) do
      call(client, "stop", true)
    end
    if has_lsp_config then
      vim.lsp.enable(M.name)
    else
      for _, bufnr in ipairs(buffers) do
        if api.nvim_buf_is_valid(bufnr) then
          api.nvim_exec_autocmds("FileType", { group = augroup, buffer = bufnr })
        end
      end
    end
  end
  vim.defer_fn(again, 50)
end

return M
