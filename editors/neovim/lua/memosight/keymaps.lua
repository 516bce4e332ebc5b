--- Insert-mode keymaps, only for the keys the user names. A mapped key with no suggestion to act
--- on does what it did before (so mapping <Tab> keeps <Tab> working).

local M = {}

local ACTIONS = {
  accept = "Accept the MemoSight suggestion",
  accept_word = "Accept the next word of the MemoSight suggestion",
  accept_line = "Accept the next line of the MemoSight suggestion",
  dismiss = "Dismiss the MemoSight suggestion",
}

---@type table<string, string> action -> lhs we mapped
local mapped = {}

---@param keymaps memosight.Keymaps
function M.apply(keymaps)
  for action, lhs in pairs(mapped) do
    pcall(vim.keymap.del, "i", lhs)
    mapped[action] = nil
  end
  for action, desc in pairs(ACTIONS) do
    local lhs = keymaps[action]
    if lhs then
      vim.keymap.set("i", lhs, function()
        local memosight = require("memosight")
        if not memosight.ghost_text() then
          return lhs -- nothing to act on: the key keeps its own meaning
        end
        -- Expression mappings may not edit the buffer: act right after.
        vim.schedule(memosight[action])
        return ""
      end, { expr = true, desc = desc })
      mapped[action] = lhs
    end
  end
end

return M
