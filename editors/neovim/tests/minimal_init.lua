-- Loads the plugin from this checkout into a clean Neovim (run with --clean -u this file).
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.rtp:prepend(root)
vim.opt.swapfile = false
vim.opt.shadafile = "NONE"
vim.opt.columns = 120
vim.opt.lines = 40
package.path = root .. "/tests/?.lua;" .. package.path
vim.opt.showmode = false
