--- Ghost text drawn by Neovim itself (0.12+: vim.lsp.inline_completion). Partial accepts take
--- the item from the built-in and insert part of it ourselves.

local suggestion = require("memosight.suggestion")

local api = vim.api
local ic = vim.lsp.inline_completion

local M = {}

M.name = "builtin"
--- The namespace the built-in draws in (looked up by name, so it is shared with it).
M.ns = api.nvim_create_namespace("nvim.lsp.inline_completion")

---@return boolean
function M.available()
  return ic ~= nil and type(ic.enable) == "function" and type(ic.get) == "function"
end

---@param bufnr integer
function M.attach(bufnr)
  ic.enable(true, { bufnr = bufnr })
end

---@param bufnr integer
function M.detach(bufnr)
  if api.nvim_buf_is_valid(bufnr) then
    ic.enable(false, { bufnr = bufnr })
  end
end

--- Asks for the buffer's inline completion again, as the cursor moving would: the built-in's own
--- autocmd (its group is named after the buffer) requests after its short debounce.
---@param bufnr integer
function M.refresh(bufnr)
  local group = ("nvim.lsp.inline_completion:%d"):format(bufnr)
  pcall(api.nvim_exec_autocmds, "CursorMovedI", { group = group, modeline = false })
end

--- The text shown as ghost text, read back from the built-in's extmarks; nil when none.
---@param bufnr integer
---@return string?
function M.text(bufnr)
  local marks = api.nvim_buf_get_extmarks(bufnr, M.ns, 0, -1, { details = true })
  if #marks == 0 then
    return nil
  end
  local details = marks[1][4]
  local function join(chunks)
    local parts = {}
    for _, chunk in ipairs(chunks or {}) do
      if chunk[2] ~= "ComplHintMore" then -- the "(1/3)" counter is not part of the text
        parts[#parts + 1] = chunk[1]
      end
    end
    return table.concat(parts)
  end
  local lines = { join(details.virt_text) }
  for _, chunks in ipairs(details.virt_lines or {}) do
    lines[#lines + 1] = join(chunks)
  end
  return table.concat(lines, "\n")
end

---@param bufnr integer
---@return boolean accepted
function M.accept(bufnr)
  return ic.get({ bufnr = bufnr })
end

--- Accepts the part of the current item that `pick` selects from the text after the cursor.
---@param bufnr integer
---@param pick fun(text: string): string
---@return boolean accepted
local function accept_part(bufnr, pick)
  return ic.get({
    bufnr = bufnr,
    on_accept = function(item)
      local text = item.insert_text
      if type(text) ~= "string" then
        text = text.value -- a snippet: insert its raw text piecewise
      end
      local range = item.range
        and { item.range.start.row, item.range.start.col, item.range.end_.row, item.range.end_.col }
      local cursor = api.nvim_win_get_cursor(0)
      local s = suggestion.from_item(bufnr, { cursor[1] - 1, cursor[2] }, text, range)
      if s then
        suggestion.insert(s, pick(s.text), false)
      end
    end,
  })
end

---@param bufnr integer
---@return boolean
function M.accept_word(bufnr)
  return accept_part(bufnr, suggestion.next_word)
end

---@param bufnr integer
---@return boolean
function M.accept_line(bufnr)
  return accept_part(bufnr, suggestion.next_line)
end

--- Shows the item `step` places on from the shown one (the built-in keeps the last answer's
--- items and wraps; it marks the item shown with "(i/n)", so one item shows "(1/1)" unchanged).
---@param bufnr integer
---@param step integer 1: next, -1: previous
---@return boolean cycled false when no suggestion is shown
function M.cycle(bufnr, step)
  if not M.text(bufnr) then
    return false
  end
  ic.select({ bufnr = bufnr, count = step })
  return true
end

--- Hides the suggestion until the next edit or cursor move. The built-in has no public dismiss,
--- so re-enabling it for the buffer drops its current item and pending requests.
---@param bufnr integer
---@return boolean dismissed
function M.dismiss(bufnr)
  if not M.text(bufnr) then
    return false
  end
  ic.enable(false, { bufnr = bufnr })
  ic.enable(true, { bufnr = bufnr })
  return true
end

return M
