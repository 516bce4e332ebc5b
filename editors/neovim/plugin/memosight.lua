-- :MemoSight {toggle|restart|context|stats}. Loading this file starts nothing: the server starts
-- from require("memosight").setup().
if vim.g.loaded_memosight then
  return
end
vim.g.loaded_memosight = true

vim.api.nvim_create_user_command("MemoSight", function(args)
  require("memosight.commands").run(args.fargs[1])
end, {
  nargs = 1,
  desc = "MemoSight: toggle | restart | context | stats",
  complete = function(lead)
    local names = vim.tbl_keys(require("memosight.commands").subcommands)
    table.sort(names)
    return vim.tbl_filter(function(name)
      return name:find(lead, 1, true) == 1
    end, names)
  end,
})
