--- Keymaps, only for the keys the user names. A mapped key with nothing to act on does what it
--- did before (so mapping <Tab> keeps <Tab> working).
---
--- Completion keys work in insert mode on the ghost text; with no ghost shown, accept and dismiss
--- act on a proposed next edit instead. Next-edit keys work in normal and insert mode.

local M = {}

--- Insert-mode actions on the ghost text: the API function each calls and its description.
local GHOST_ACTIONS = {
  accept = { fn = "accept", desc = "Accept the MemoSight suggestion" },
  accept_word = { fn = "accept_word", desc = "Accept the next word of the MemoSight suggestion" },
  accept_line = { fn = "accept_line", desc = "Accept the next line of the MemoSight suggestion" },
  dismiss = { fn = "dismiss", desc = "Dismiss the MemoSight suggestion" },
  next_suggestion = { fn = "cycle", arg = 1, desc = "Show the next MemoSight suggestion" },
  prev_suggestion = { fn = "cycle", arg = -1, desc = "Show the previous MemoSight suggestion" },
}

--- With no ghost shown, these ghost actions act on the next edit.
local ON_NEXT_EDIT = { accept = "apply_next_edit", dismiss = "dismiss_next_edit" }

--- Next-edit actions (normal and insert mode).
local NEXT_EDIT_ACTIONS = {
  apply = { fn = "apply_next_edit", desc = "Apply the MemoSight next edit" },
  dismiss = { fn = "dismiss_next_edit", desc = "Dismiss the MemoSight next edit" },
}

---@type {modes: string[], lhs: string}[] what we mapped
local mapped = {}

--- Maps `lhs` in `modes` to the function `pick()` names (nil: the key's own meaning).
---@param modes string[]
---@param lhs string
---@param desc string
---@param pick fun(): (string?, any)
local function map(modes, lhs, desc, pick)
  vim.keymap.set(modes, lhs, function()
    local name, arg = pick()
    if not name then
      return lhs -- nothing to act on: the key keeps its own meaning
    end
    -- Expression mappings may not edit the buffer: act right after.
    vim.schedule(function()
      require("memosight")[name](arg)
    end)
    return ""
  end, { expr = true, desc = desc })
  mapped[#mapped + 1] = { modes = modes, lhs = lhs }
end

---@param keymaps memosight.Keymaps
---@param next_edit_keymaps memosight.NextEditKeymaps
function M.apply(keymaps, next_edit_keymaps)
  for _, m in ipairs(mapped) do
    pcall(vim.keymap.del, m.modes, m.lhs)
  end
  mapped = {}
  for action, spec in pairs(GHOST_ACTIONS) do
    local lhs = keymaps[action]
    if lhs then
      map({ "i" }, lhs, spec.desc, function()
        local memosight = require("memosight")
        if memosight.ghost_text() then
          return spec.fn, spec.arg
        end
        local fallback = ON_NEXT_EDIT[action]
        if fallback and memosight.next_edit() then
          return fallback
        end
        return nil
      end)
    end
  end
  for action, spec in pairs(NEXT_EDIT_ACTIONS) do
    local lhs = next_edit_keymaps[action]
    if lhs then
      map({ "n", "i" }, lhs, spec.desc, function()
        if require("memosight").next_edit() then
          return spec.fn
        end
        return nil
      end)
    end
  end
end

return M
