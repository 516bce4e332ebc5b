--- MemoSight: inline ghost-text completions from a local model, served over LSP.
---
--- require("memosight").setup({ ... }) wires everything; the other functions are the API that
--- keymaps, commands and statuslines use.

local M = {}

---@class (private) memosight.State
---@field config? memosight.Config
---@field ghost? table The ghost-text module in use (memosight.ghost.builtin or .fallback).
---@field reason? string Why that ghost-text path was chosen.
---@field enabled boolean
---@field attached table<integer, boolean>
local state = { enabled = true, attached = {} }

--- Picks who draws the ghost text.
---@param wanted memosight.GhostTextPath
---@return table module, string reason
local function choose_ghost(wanted)
  local builtin = require("memosight.ghost.builtin")
  local fallback = require("memosight.ghost.fallback")
  if wanted == "fallback" then
    return fallback, "forced by ghost_text = 'fallback'"
  end
  if builtin.available() then
    return builtin, "Neovim's vim.lsp.inline_completion"
  end
  local why = "this Neovim has no vim.lsp.inline_completion (needs 0.12+)"
  if wanted == "builtin" then
    vim.notify(
      "memosight: ghost_text = 'builtin' unavailable: " .. why .. "; drawing ghost text itself",
      vim.log.levels.WARN
    )
  end
  return fallback, "plugin extmarks: " .. why
end

---@param bufnr integer
local function attach(bufnr)
  state.attached[bufnr] = true
  if state.enabled then
    state.ghost.attach(bufnr)
  end
end

---@param bufnr integer
local function detach(bufnr)
  state.attached[bufnr] = nil
  state.ghost.detach(bufnr)
end

--- Configures the plugin and starts the server for matching buffers. Raises an error naming the
--- option when an option is invalid.
---@param opts? memosight.UserConfig
function M.setup(opts)
  local cfg = require("memosight.config").resolve(opts)
  if state.ghost then
    for bufnr in pairs(state.attached) do
      state.ghost.detach(bufnr)
    end
    state.attached = {}
  end
  state.config = cfg
  state.enabled = cfg.settings.enable ~= false
  state.ghost, state.reason = choose_ghost(cfg.ghost_text)

  local fallback = require("memosight.ghost.fallback")
  fallback.debounce_ms = cfg.debounce_ms
  fallback.get_client = function(bufnr)
    return require("memosight.client").get(bufnr)
  end
  require("memosight.refresh").refresh = function(bufnr)
    if state.enabled and state.attached[bufnr] then
      state.ghost.refresh(bufnr)
    end
  end
  vim.api.nvim_set_hl(0, fallback.hl_group, { link = "Comment", default = true })
  require("memosight.keymaps").apply(cfg.keymaps)
  require("memosight.client").start(cfg, attach, detach)
end

---@return memosight.Config?
function M.config()
  return state.config
end

--- Which ghost-text path is in use ("builtin" or "fallback") and why; nil before setup().
---@return string?, string?
function M.ghost_path()
  return state.ghost and state.ghost.name, state.reason
end

--- The latest `memosight/status` from the server (state, message, model, lastLatencyMs).
---@return memosight.Status
function M.status()
  return require("memosight.status").get()
end

--- Short status text for statuslines; refresh on the `User MemoSightStatus` event.
---@return string
function M.statusline()
  return require("memosight.status").line()
end

---@return boolean
function M.is_enabled()
  return state.enabled
end

---@param bufnr? integer
---@return integer
local function buf(bufnr)
  return (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
end

--- The ghost text shown in a buffer (nil when none).
---@param bufnr? integer
---@return string?
function M.ghost_text(bufnr)
  return state.ghost and state.ghost.text(buf(bufnr)) or nil
end

--- Accepts the whole suggestion; false when there is none.
---@param bufnr? integer
---@return boolean
function M.accept(bufnr)
  return state.ghost ~= nil and state.ghost.accept(buf(bufnr))
end

--- Accepts the suggestion's next word.
---@param bufnr? integer
---@return boolean
function M.accept_word(bufnr)
  return state.ghost ~= nil and state.ghost.accept_word(buf(bufnr))
end

--- Accepts the rest of the suggestion's current line.
---@param bufnr? integer
---@return boolean
function M.accept_line(bufnr)
  return state.ghost ~= nil and state.ghost.accept_line(buf(bufnr))
end

--- Hides the suggestion until the next edit.
---@param bufnr? integer
---@return boolean
function M.dismiss(bufnr)
  return state.ghost ~= nil and state.ghost.dismiss(buf(bufnr))
end

---@return memosight.Config
local function require_setup()
  if not state.config then
    error("memosight: call require('memosight').setup() first", 0)
  end
  return state.config
end

--- Turns completions on or off (for this session), telling the server too.
---@param enable? boolean nil flips the current state
function M.toggle(enable)
  local cfg = require_setup()
  if enable == nil then
    enable = not state.enabled
  end
  state.enabled = enable
  cfg.settings.enable = enable
  for bufnr in pairs(state.attached) do
    if enable then
      state.ghost.attach(bufnr)
    else
      state.ghost.detach(bufnr)
    end
  end
  require("memosight.client").update_settings(cfg)
  local status = require("memosight.status")
  if not enable then
    status.set({ state = "disabled", message = "turned off with :MemoSight toggle" })
  end -- turning on: the server reports its state itself
  vim.notify("memosight: completions " .. (enable and "on" or "off"), vim.log.levels.INFO)
end

--- Restarts the server.
function M.restart()
  require("memosight.client").restart(require_setup())
end

return M
