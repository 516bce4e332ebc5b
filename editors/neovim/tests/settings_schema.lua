-- Writes the plugin's settings schema as JSON, and whether setup() accepts the server's
-- defaults (read from $MEMOSIGHT_DEFAULTS), to $MEMOSIGHT_SCHEMA_OUT. tests/test_neovim.py
-- compares the schema with memosight_lsp/config.py, so the hand copy cannot drift.
local config = require("memosight.config")
local text = table.concat(vim.fn.readfile(vim.env.MEMOSIGHT_DEFAULTS), "\n")
-- A null default (model.path) is an unset option, as the plugin sees it.
local defaults = vim.json.decode(text, { luanil = { object = true } })
local ok, err = pcall(config.resolve, { settings = defaults })
local out = { schema = config.settings_schema, defaults_ok = ok, error = tostring(err) }
vim.fn.writefile({ vim.json.encode(out) }, vim.env.MEMOSIGHT_SCHEMA_OUT)
