-- Option validation, the suggestion helpers, commands before setup, status handling.
-- Needs no server.
local T = require("harness")
local suggestion = require("memosight.suggestion")

local api = vim.api

--- Captures vim.notify messages while `fn` runs.
local function notified(fn)
  local seen, orig = {}, vim.notify
  vim.notify = function(msg, level)
    seen[#seen + 1] = { msg = msg, level = level }
  end
  local ok, err = pcall(fn)
  vim.notify = orig
  assert(ok, err)
  return seen
end

T.test("commands before setup say to call setup", function()
  local seen = notified(function()
    vim.cmd("MemoSight stats")
  end)
  T.eq("memosight: call require('memosight').setup() first", seen[1] and seen[1].msg, "message")
end)

local bad = {
  { { ghost_text = "maybe" }, "ghost_text: expected one of auto, builtin, fallback, got maybe" },
  { { keymaps = { accept = 1 } }, "keymaps.accept: expected a key (string) or false, got 1" },
  { { keymaps = { acept = "<C-l>" } }, "memosight: unknown option 'keymaps.acept'" },
  { { cmd = {} }, "cmd: expected a non-empty list of strings, or a function" },
  { { cmd = "memosight-lsp" }, "cmd: expected a non-empty list of strings, or a function" },
  { { debounce_ms = -5 }, "debounce_ms: expected a number >= 0" },
  { { colour = "red" }, "memosight: unknown option 'colour'" },
  { { settings = { model = { device = "gpu" } } }, "settings.model.device: expected one of auto, cpu, cuda" },
  { { settings = { completion = { max_new_tokens = 8 } } }, "unknown option 'settings.completion.max_new_tokens' (did you mean 'maxNewTokens'?)" },
  { { settings = { completion = { maxNewTokens = "8" } } }, "settings.completion.maxNewTokens: expected number, got string" },
  { { settings = { enable = "yes" } }, "settings.enable: expected boolean, got string" },
  { { settings = { compression = { kvCompression = "snapkv" } } }, "settings.compression.kvCompression: expected one of off, lossless-draft, lossy-snapkv" },
  { { next_edit = true }, "next_edit: expected table" },
  { { next_edit = { enable = true } }, "memosight: unknown option 'next_edit.enable'" },
  { { next_edit = { enabled = "yes" } }, "next_edit.enabled: expected boolean, got string" },
  { { next_edit = { debounce_ms = -1 } }, "next_edit.debounce_ms: expected a number >= 0" },
  { { next_edit = { keymaps = { apply = 1 } } }, "next_edit.keymaps.apply: expected a key (string) or false, got 1" },
  { { next_edit = { keymaps = { accept = "<Tab>" } } }, "memosight: unknown option 'next_edit.keymaps.accept'" },
  { { keymaps = { next_suggestion = "" } }, "keymaps.next_suggestion: expected a key (string) or false" },
}
for _, case in ipairs(bad) do
  T.test("setup rejects " .. vim.inspect(case[1], { newline = " ", indent = "" }), function()
    local ok, err = pcall(require("memosight").setup, case[1])
    T.eq(false, ok, "setup succeeded")
    T.truthy(tostring(err):find(case[2], 1, true), ("message %q contains %q"):format(tostring(err), case[2]))
    T.truthy(tostring(err):match("^memosight: "), "message starts with the plugin name")
    T.eq(nil, tostring(err):find(".lua:", 1, true), "no source position in " .. tostring(err))
  end)
end

T.test("next_edit defaults: on, no key mapped; :MemoSightNextEdit and <Plug> mappings exist", function()
  local cfg = require("memosight.config").resolve({ next_edit = { debounce_ms = 100 } })
  T.eq({ enabled = true, debounce_ms = 100, keymaps = { apply = false, dismiss = false } }, cfg.next_edit, "merged")
  T.eq(2, vim.fn.exists(":MemoSightNextEdit"), ":MemoSightNextEdit")
  for _, plug in ipairs({ "<Plug>(memosight-next-edit)", "<Plug>(memosight-dismiss-next-edit)" }) do
    T.truthy(vim.fn.maparg(plug, "n") ~= "" and vim.fn.maparg(plug, "i") ~= "", plug)
  end
  for _, plug in ipairs({ "<Plug>(memosight-next-suggestion)", "<Plug>(memosight-prev-suggestion)" }) do
    T.truthy(vim.fn.maparg(plug, "i") ~= "", plug)
  end
end)

T.test("setup accepts the compression settings", function()
  local ok, err = pcall(require("memosight.config").resolve, {
    settings = { compression = { kvCompression = "lossy-snapkv", kvRatio = 8, minPromptTokens = 512 } },
  })
  T.eq(true, ok, tostring(err))
end)

T.test("a good setup maps no keys and picks the built-in ghost text on 0.12", function()
  require("memosight").setup({ cmd = { "memosight-lsp-not-installed" }, settings = { completion = { maxNewTokens = 8 } } })
  for _, map in ipairs(vim.list_extend(api.nvim_get_keymap("i"), api.nvim_get_keymap("n"))) do
    if not map.lhs:match("^<Plug>") then -- the plugin's <Plug> names are not keys
      T.eq(nil, (map.desc or ""):match("MemoSight"), "mapping " .. map.lhs)
    end
  end
  local path = require("memosight").ghost_path()
  T.eq(vim.lsp.inline_completion and "builtin" or "fallback", path, "ghost path")
  local cfg = vim.lsp.config.memosight
  T.eq({ "memosight-lsp-not-installed" }, cfg.cmd, "cmd")
  T.eq({ enable = true, completion = { maxNewTokens = 8 } }, cfg.init_options, "init_options")
  T.eq({ memosight = cfg.init_options }, cfg.settings, "settings")
end)

T.test("a mapped key with no suggestion keeps its own meaning", function()
  require("memosight").setup({ cmd = { "memosight-lsp-not-installed" }, keymaps = { accept = "<Tab>" } })
  local bufnr = api.nvim_create_buf(true, true)
  api.nvim_set_current_buf(bufnr)
  T.feed("i<Tab>x<Esc>")
  T.wait_for("typed", function()
    return api.nvim_buf_get_lines(bufnr, 0, -1, false)[1] == "\tx"
  end, 2000)
  vim.keymap.del("i", "<Tab>")
end)

T.test("forcing the fallback path is honoured", function()
  require("memosight").setup({ cmd = { "memosight-lsp-not-installed" }, ghost_text = "fallback" })
  T.eq("fallback", (require("memosight").ghost_path()), "ghost path")
end)

T.test("unknown subcommand lists the valid ones", function()
  local seen = notified(function()
    vim.cmd("MemoSight frobnicate")
  end)
  T.eq("memosight: unknown subcommand 'frobnicate'; use one of: context, dismissNextEdit, nextEdit, nextSuggestion, prevSuggestion, restart, stats, toggle", seen[1] and seen[1].msg, "message")
end)

T.test("status notifications drive status() and the statusline", function()
  local status = require("memosight.status")
  local events = 0
  api.nvim_create_autocmd("User", { pattern = "MemoSightStatus", callback = function() events = events + 1 end })
  status.handler(nil, { state = "ready", message = "ok", model = "tiny", lastLatencyMs = 41.6 })
  T.eq({ state = "ready", message = "ok", model = "tiny", lastLatencyMs = 41.6 }, require("memosight").status(), "status")
  T.eq("MemoSight ready 42ms", require("memosight").statusline(), "statusline")
  status.handler(nil, { state = "error", message = "model failed to load", model = vim.NIL, lastLatencyMs = vim.NIL })
  T.eq({ state = "error", message = "model failed to load" }, require("memosight").status(), "null fields")
  T.eq("MemoSight error", require("memosight").statusline(), "statusline")
  status.handler(nil, { message = "no state" }) -- malformed: ignored
  T.eq("error", require("memosight").status().state, "state after a malformed notification")
  T.eq(2, events, "User MemoSightStatus events")
end)

T.test("next_word and next_line", function()
  T.eq("foo", suggestion.next_word("foo(bar)"), "word")
  T.eq("(", suggestion.next_word("(bar)"), "punctuation")
  T.eq("  x", suggestion.next_word("  x = 1"), "leading spaces")
  T.eq("\n    return", suggestion.next_word("\n    return x"), "line break")
  T.eq("foo(bar)", suggestion.next_line("foo(bar)\n    return 1"), "line")
  T.eq("\n    return 1", suggestion.next_line("\n    return 1\nmore"), "next line")
end)

T.test("from_item strips what is typed and drops stale items", function()
  local bufnr = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(bufnr, 0, -1, false, { "x = pri" })
  local s = suggestion.from_item(bufnr, { 0, 7 }, "print(x)", { 0, 4, 0, 7 })
  T.eq("nt(x)", s and s.text, "text after the cursor")
  T.eq(nil, suggestion.from_item(bufnr, { 0, 7 }, "len(x)", { 0, 4, 0, 7 }), "disagrees with typed text")
  T.eq(nil, suggestion.from_item(bufnr, { 0, 7 }, "", nil), "empty")
  s = suggestion.from_item(bufnr, { 0, 7 }, "nt()", { 0, 7, 0, 7 })
  suggestion.insert(s, s.text, true)
  T.eq({ "x = print()" }, api.nvim_buf_get_lines(bufnr, 0, -1, false), "inserted")
end)

T.test("byte_col converts UTF-16 offsets", function()
  local line = "é😀x" -- é: 2 bytes / 1 unit, 😀: 4 bytes / 2 units
  T.eq(6, suggestion.byte_col(line, 3, "utf-16"), "utf-16")
  T.eq(3, suggestion.byte_col(line, 3, "utf-8"), "utf-8")
end)

T.test("docs/neovim.md documents every option", function()
  local here = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h")
  local doc = table.concat(vim.fn.readfile(here .. "/../../../docs/neovim.md"), "\n")
  local config = require("memosight.config")
  for key in pairs(config.defaults) do
    T.truthy(doc:find("| `" .. key .. "` |", 1, true), "options table row for " .. key)
  end
  for key in pairs(config.defaults.keymaps) do
    T.truthy(doc:find("`" .. key .. "`", 1, true), "keymaps." .. key .. " in the docs")
  end
  for key in pairs(config.defaults.next_edit) do
    T.truthy(doc:find("`next_edit." .. key .. "`", 1, true), "next_edit." .. key .. " in the docs")
  end
  for key in pairs(config.defaults.next_edit.keymaps) do
    T.truthy(doc:find("`next_edit.keymaps." .. key .. "`", 1, true), "next_edit.keymaps." .. key .. " in the docs")
  end
  for _, name in ipairs({ "MemoSightNextEdit", "MemoSightNextEditDelete", "MemoSightNextEditHint" }) do
    T.truthy(doc:find("`" .. name .. "`", 1, true), name .. " in the docs")
  end
  for name in pairs(require("memosight.commands").subcommands) do
    T.truthy(doc:find("`:MemoSight " .. name .. "`", 1, true), ":MemoSight " .. name .. " in the docs")
  end
end)

T.run(30000)
