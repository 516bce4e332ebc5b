-- :MemoSight {toggle|restart|context|stats|nextEdit|dismissNextEdit|nextSuggestion|prevSuggestion},
-- :MemoSightNextEdit and the <Plug> mappings. Loading this file starts nothing: the server starts
-- from require("memosight").setup().
if vim.g.loaded_memosight then
  return
end
vim.g.loaded_memosight = true

local function run(name)
  require("memosight.commands").run(name)
end

vim.api.nvim_create_user_command("MemoSight", function(args)
  run(args.fargs[1])
end, {
  nargs = 1,
  desc = "MemoSight: toggle | restart | context | stats | nextEdit | dismissNextEdit | nextSuggestion | prevSuggestion",
  complete = function(lead)
    local names = vim.tbl_keys(require("memosight.commands").subcommands)
    table.sort(names)
    return vim.tbl_filter(function(name)
      return name:find(lead, 1, true) == 1
    end, names)
  end,
})

vim.api.nvim_create_user_command("MemoSightNextEdit", function()
  run("nextEdit")
end, { desc = "MemoSight: jump to the proposed next edit and apply it" })

-- <Plug> mappings for users who map keys themselves; each acts at once (no fallback key).
for lhs, spec in pairs({
  ["<Plug>(memosight-next-edit)"] = { modes = { "n", "i" }, name = "nextEdit" },
  ["<Plug>(memosight-dismiss-next-edit)"] = { modes = { "n", "i" }, name = "dismissNextEdit" },
  ["<Plug>(memosight-next-suggestion)"] = { modes = { "i" }, name = "nextSuggestion" },
  ["<Plug>(memosight-prev-suggestion)"] = { modes = { "i" }, name = "prevSuggestion" },
}) do
  vim.keymap.set(spec.modes, lhs, function()
    run(spec.name)
  end, { desc = "MemoSight " .. spec.name })
end
