--- A suggestion as the buffer sees it: the text it adds at the cursor and what it replaces.
--- Pure logic shared by both ghost-text paths (the built-in one and our own extmarks).

local api = vim.api

local M = {}

---@class memosight.Suggestion
---@field bufnr integer
---@field row integer 0-based cursor row
---@field col integer 0-based cursor byte column
---@field text string What accepting adds at the cursor (may span lines).
---@field end_row integer 0-based end of the replaced text (equals row when nothing after the cursor is replaced)
---@field end_col integer 0-based byte column, exclusive
---@field steps_over integer Bytes after the cursor that the item ends with and keeps: a whole
--- accept leaves the cursor after them, as replacing the item's range does.

--- Buffer text between two 0-based byte positions.
---@param bufnr integer
---@return string
local function get_text(bufnr, srow, scol, erow, ecol)
  return table.concat(api.nvim_buf_get_text(bufnr, srow, scol, erow, ecol, {}), "\n")
end

--- Byte column of an LSP character offset on a buffer line.
---@param line string
---@param character integer
---@param encoding string "utf-8"|"utf-16"|"utf-32"
---@return integer
function M.byte_col(line, character, encoding)
  if encoding == "utf-8" then
    return math.min(character, #line)
  end
  if vim.fn.has("nvim-0.11") == 1 then
    return vim.str_byteindex(line, encoding, character, false)
  end
  local ok, col = pcall(vim.str_byteindex, line, character, encoding == "utf-16")
  return ok and col or #line
end

--- Builds a suggestion from an inline completion item whose range (0-based byte positions, or
--- nil for "insert at the cursor") may start before the cursor, covering text already typed.
---@param bufnr integer
---@param cursor integer[] {row, col}, 0-based row, byte col
---@param insert_text string
---@param range? integer[] {start_row, start_col, end_row, end_col}
---@return memosight.Suggestion?
function M.from_item(bufnr, cursor, insert_text, range)
  local row, col = cursor[1], cursor[2]
  local text, end_row, end_col, steps_over = insert_text, row, col, 0
  if range then
    local srow, scol, erow, ecol = range[1], range[2], range[3], range[4]
    if srow > row or (srow == row and scol > col) then
      return nil -- starts after the cursor: not ghost text we can show at the cursor
    end
    local typed = get_text(bufnr, srow, scol, row, col)
    if insert_text:sub(1, #typed) ~= typed then
      return nil -- disagrees with what is already typed: stale
    end
    text = insert_text:sub(#typed + 1)
    if erow > row or (erow == row and ecol > col) then
      -- An item that ends with the very text it replaces after the cursor (the server sends
      -- `a, b)` over the `)` of `foo(|)`) adds only what comes before it: an insertion.
      local replaced = get_text(bufnr, row, col, erow, ecol)
      if #replaced < #text and text:sub(-#replaced) == replaced then
        text, steps_over = text:sub(1, #text - #replaced), #replaced
      else
        end_row, end_col = erow, ecol
      end
    end
  end
  if text == "" then
    return nil
  end
  return {
    bufnr = bufnr,
    row = row,
    col = col,
    text = text,
    end_row = end_row,
    end_col = end_col,
    steps_over = steps_over,
  }
end

--- The next word of a suggestion: an optional line break and indentation, then a run of word
--- characters or a run of punctuation.
---@param text string
---@return string
function M.next_word(text)
  local lead = text:match("^\n?[ \t]*") or ""
  local rest = text:sub(#lead + 1)
  local word = rest:match("^[%w_]+") or rest:match("^[^%w_%s]+") or ""
  return lead .. word
end

--- The rest of the suggestion's current line; a suggestion that starts with a line break yields
--- that break and the following line.
---@param text string
---@return string
function M.next_line(text)
  if text:sub(1, 1) == "\n" then
    return "\n" .. (text:sub(2):match("^[^\n]*") or "")
  end
  return text:match("^[^\n]*") or ""
end

--- Inserts `text` at the suggestion's cursor (replacing up to its end when `whole`), and moves
--- the cursor of the current window after it (and after the text it steps over when `whole`).
---@param s memosight.Suggestion
---@param text string
---@param whole boolean
function M.insert(s, text, whole)
  local lines = vim.split(text, "\n", { plain = true })
  local end_row, end_col = s.row, s.col
  if whole then
    end_row, end_col = s.end_row, s.end_col
  end
  api.nvim_buf_set_text(s.bufnr, s.row, s.col, end_row, end_col, lines)
  local last_row = s.row + #lines - 1
  local last_col = (#lines == 1 and s.col or 0) + #lines[#lines] + (whole and s.steps_over or 0)
  local win = vim.fn.bufwinid(s.bufnr)
  if win ~= -1 then
    api.nvim_win_set_cursor(win, { last_row + 1, last_col })
  end
end

return M
