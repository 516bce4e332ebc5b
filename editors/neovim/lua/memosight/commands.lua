--- The :MemoSight subcommands.

local client = require("memosight.client")
local view = require("memosight.view")

local M = {}

---@param value any
---@return string
local function show_value(value)
  if type(value) == "number" then
    return value == math.floor(value) and tostring(value) or ("%.2f"):format(value)
  end
  if value == vim.NIL or value == nil then
    return "-"
  end
  return type(value) == "table" and vim.json.encode(value) or tostring(value)
end

---@param err string
local function report(err)
  vim.notify("memosight: " .. err, vim.log.levels.ERROR)
end

--- Shows the server's counters (memosight/stats).
---@param done? fun(bufnr: integer?)
function M.stats(done)
  client.request("memosight/stats", vim.empty_dict(), function(err, result)
    if err or type(result) ~= "table" then
      report(err or "memosight/stats returned nothing")
      return done and done(nil)
    end
    local keys = vim.tbl_keys(result)
    table.sort(keys)
    local lines = {}
    for _, key in ipairs(keys) do
      lines[#lines + 1] = ("%-16s %s"):format(key, show_value(result[key]))
    end
    local bufnr = view.open("stats", "MemoSight stats", lines)
    if done then
      done(bufnr)
    end
  end)
end

--- Shows what the server would put in the prompt at the cursor (memosight/context).
---@param done? fun(bufnr: integer?)
function M.context(done)
  local bufnr = vim.api.nvim_get_current_buf()
  local c = client.get(bufnr)
  if not c then
    report("no MemoSight server is attached to this buffer")
    return done and done(nil)
  end
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = vim.lsp.util.make_position_params(0, c.offset_encoding).position,
  }
  client.request("memosight/context", params, function(err, result)
    if err or type(result) ~= "table" then
      report(err or "memosight/context returned nothing")
      return done and done(nil)
    end
    local lines = { ("Prompt tokens: %s"):format(show_value(result.promptTokens)) }
    if type(result.reason) == "string" then
      lines[#lines + 1] = "No completion here: " .. result.reason
    end
    local snippets = type(result.snippets) == "table" and result.snippets or {}
    lines[#lines + 1] = ("Context snippets: %d"):format(#snippets)
    for _, s in ipairs(snippets) do
      local path = type(s.uri) == "string" and vim.fn.fnamemodify(vim.uri_to_fname(s.uri), ":~:.") or "?"
      local line = type(s.range) == "table" and s.range.start and s.range.start.line + 1 or 0
      lines[#lines + 1] = ("  %s:%d  %s %s  (%s tokens)"):format(
        path, line, show_value(s.kind), show_value(s.symbol), show_value(s.tokens))
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = "Prompt:"
    vim.list_extend(lines, vim.split(type(result.prompt) == "string" and result.prompt or "", "\n"))
    local out = view.open("context", "MemoSight context", lines)
    if done then
      done(out)
    end
  end, bufnr)
end

M.subcommands = {
  toggle = function()
    require("memosight").toggle()
  end,
  restart = function()
    require("memosight").restart()
  end,
  stats = function()
    M.stats()
  end,
  context = function()
    M.context()
  end,
  nextEdit = function()
    if not require("memosight").apply_next_edit() then
      vim.notify("memosight: no next edit to apply", vim.log.levels.INFO)
    end
  end,
  dismissNextEdit = function()
    require("memosight").dismiss_next_edit()
  end,
  nextSuggestion = function()
    require("memosight").cycle(1)
  end,
  prevSuggestion = function()
    require("memosight").cycle(-1)
  end,
}

--- Runs `:MemoSight {name}`.
---@param name? string
function M.run(name)
  if not require("memosight").config() then
    report("call require('memosight').setup() first")
    return
  end
  local sub = M.subcommands[name or ""]
  if not sub then
    local names = vim.tbl_keys(M.subcommands)
    table.sort(names)
    report(("unknown subcommand '%s'; use one of: %s"):format(name or "", table.concat(names, ", ")))
    return
  end
  sub()
end

return M
