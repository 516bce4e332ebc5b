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

--- Starts ghost text and next edits for a buffer (next edits only when `next_edit.enabled`).
---@param bufnr integer
local function start_buffer(bufnr)
  state.ghost.attach(bufnr)
  if state.config.next_edit.enabled then
    require("memosight.next_edit").attach(bufnr)
  end
end

---@param bufnr integer
local function stop_buffer(bufnr)
  state.ghost.detach(bufnr)
  require("memosight.next_edit").detach(bufnr)
end

---@param bufnr integer
local function attach(bufnr)
  state.attached[bufnr] = true
  if state.enabled then
    start_buffer(bufnr)
  end
end

---@param bufnr integer
local function detach(bufnr)
  state.attached[bufnr] = nil
  stop_buffer(bufnr)
end

--- The key that applies a next edit, for its hint: the next-edit key, else (in insert mode)
--- the accept key, which applies it when no completion ghost is shown, else the command.
---@param cfg memosight.Config
---@param insert boolean
---@return string
local function next_edit_key(cfg, insert)
  if cfg.next_edit.keymaps.apply then
    return cfg.next_edit.keymaps.apply
  end
  if insert and cfg.keymaps.accept then
    return cfg.keymaps.accept
  end
  return ":MemoSightNextEdit"
end

--- Configures the plugin and starts the server for matching buffers. Raises an error naming the
--- option when an option is invalid.
---@param opts? memosight.UserConfig
function M.setup(opts)
  local cfg = require("memosight.config").resolve(opts)
  if state.ghost then
    for bufnr in pairs(state.attached) do
      stop_buffer(bufnr)
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
  local next_edit = require("memosight.next_edit")
  next_edit.debounce_ms = cfg.next_edit.debounce_ms
  next_edit.get_client = fallback.get_client
  next_edit.ghost_shown = function(bufnr)
    return M.ghost_text(bufnr) ~= nil
  end
  next_edit.key_hint = function(insert)
    return next_edit_key(cfg, insert)
  end
  vim.api.nvim_set_hl(0, fallback.hl_group, { link = "Comment", default = true })
  vim.api.nvim_set_hl(0, next_edit.hl.text, { link = fallback.hl_group, default = true })
  vim.api.nvim_set_hl(0, next_edit.hl.hint, { link = "Comment", default = true })
  -- A link cannot add strikethrough: the old text keeps its colours, struck through.
  vim.api.nvim_set_hl(0, next_edit.hl.delete, { strikethrough = true, default = true })
  require("memosight.keymaps").apply(cfg.keymaps, cfg.next_edit.keymaps)
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

--- Shows the next item of the last completion answer (-1: the previous one), with no new
--- request; false when there is nothing to cycle.
---@param step? integer
---@param bufnr? integer
---@return boolean
function M.cycle(step, bufnr)
  return state.ghost ~= nil and state.ghost.cycle(buf(bufnr), step or 1)
end

--- The proposed next edit shown in a buffer (a copy), or nil when none stands.
---@param bufnr? integer
---@return memosight.NextEditProposal?
function M.next_edit(bufnr)
  local p = require("memosight.next_edit").current(buf(bufnr))
  return p and vim.deepcopy(p)
end

--- Jumps to the proposed next edit and applies it; false when there is none.
---@param bufnr? integer
---@return boolean
function M.apply_next_edit(bufnr)
  return require("memosight.next_edit").apply(buf(bufnr))
end

--- Hides the proposed next edit until the next change; false when there is none.
---@param bufnr? integer
---@return boolean
function M.dismiss_next_edit(bufnr)
  return require("memosight.next_edit").dismiss(buf(bufnr))
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
      start_buffer(bufnr)
    else
      stop_buffer(bufnr)
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
