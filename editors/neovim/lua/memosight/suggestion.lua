--- A suggestion as the buffer sees it: the text it adds at the cursor and what it replaces.
--- Pure logic shared by both ghost-text paths (the built-in one and our own extmarks).

local api = vim.api

local M = {}

---@class memosight.Suggestion
---@field bufnr integer
---@field row integer 0-based cursor row
---@field col integer 0-based cursor byte column
---@field text string What accepting writes from the cursor (may span lines).
---@field end_row integer 0-based end of the replaced text (equals row when nothing after the cursor is replaced)
---@field end_col integer 0-based byte column, exclusive
---@field kept_at? integer 0-based offset in `text` where the code after the cursor that the item
--- replaces sits, kept (`t *testing.T) {` over the `)` of `func f(|)`); nil when it holds none

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
  local text, end_row, end_col, kept_at = insert_text, row, col, nil
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
      end_row, end_col = erow, ecol
      if erow == row then
        -- The server's item over the code after the cursor holds that code: at the end
        -- (`a, b)` over the `)` of `foo(|)`) or before what its line adds (`x) {`), and
        -- nowhere after (server/features.inline_item): its last place on the first line.
        local kept = get_text(bufnr, row, col, erow, ecol)
        local first = text:match("^[^\n]*")
        local at, from = nil, 1
        while true do -- each turn finds a later place, or ends
          local found = first:find(kept, from, true)
          if not found then
            break
          end
          at, from = found - 1, found + 1
        end
        kept_at = at
      end
    end
  end
  if text == "" or text == get_text(bufnr, row, col, end_row, end_col) then
    return nil -- nothing to add
  end
  return {
    bufnr = bufnr,
    row = row,
    col = col,
    text = text,
    end_row = end_row,
    end_col = end_col,
    kept_at = kept_at,
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

--- Writes `text`, the suggestion's beginning (all of it when `whole`), at its cursor and moves
--- the cursor of the current window after it. The whole suggestion replaces up to its end; a
--- part is inserted, replacing the part of the kept code after the cursor it already holds.
---@param s memosight.Suggestion
---@param text string
---@param whole boolean
function M.insert(s, text, whole)
  local lines = vim.split(text, "\n", { plain = true })
  local end_row, end_col = s.row, s.col
  if whole then
    end_row, end_col = s.end_row, s.end_col
  elseif s.kept_at and #text > s.kept_at and #lines == 1 then
    end_col = s.col + math.min(#text - s.kept_at, s.end_col - s.col)
  end
  api.nvim_buf_set_text(s.bufnr, s.row, s.col, end_row, end_col, lines)
  local last_row = s.row + #lines - 1
  local last_col = (#lines == 1 and s.col or 0) + #lines[#lines]
  local win = vim.fn.bufwinid(s.bufnr)
  if win ~= -1 then
    api.nvim_win_set_cursor(win, { last_row + 1, last_col })
  end
end

return M
