--- Next-edit suggestions (`memosight/nextEdit`): after an edit and a pause, or on leaving insert
--- mode, ask the server where the user is likely to edit next, show that one edit in the buffer
--- and apply it on a key.
---
--- The rules, and why:
--- - One proposal per buffer, valid only while the buffer is as it was when the question was
---   asked (changedtick) and the edit's range still holds the text it replaces: an edit computed
---   for other text would corrupt the buffer. Any change drops it and asks again after the pause.
--- - A newer request cancels the older one, and typing cancels a request in flight: only the
---   answer for the text on screen is worth showing.
--- - Nothing is asked or shown while a completion ghost is shown: that is what the user is
---   reading, and the accept key belongs to it. Leaving insert mode (which hides the ghost) asks.
--- - The server may answer several edits; the one at or after the cursor is shown (the next
---   place the user would reach), the others are asked for again once it is applied.
--- - An answer that is not the documented shape is ignored, never raised.

local suggestion = require("memosight.suggestion")

local api = vim.api
local compat = require("memosight.compat")
local client_call, cursor_in = compat.client_call, compat.cursor_in
local uv = vim.uv or vim.loop

local M = {}

M.ns = api.nvim_create_namespace("memosight.next_edit")

--- Highlight groups (linked to defaults in init's setup; `default = true` so a colorscheme wins).
M.hl = {
  text = "MemoSightNextEdit", -- the new text, at the cursor (as ghost text) or after the old
  delete = "MemoSightNextEditDelete", -- the old text the edit replaces, struck through
  hint = "MemoSightNextEditHint", -- the end-of-line hint naming the key that applies it
}

--- Set by init: the client serving a buffer, whether a completion ghost is shown, the pause in
--- ms, and the key that applies a proposal (for the hint) in insert or normal mode.
---@type fun(bufnr: integer): vim.lsp.Client?
M.get_client = function()
  return nil
end
---@type fun(bufnr: integer): boolean
M.ghost_shown = function()
  return false
end
M.debounce_ms = 400
---@type fun(insert: boolean): string
M.key_hint = function()
  return ":MemoSightNextEdit"
end

---@class memosight.NextEditProposal
---@field bufnr integer
---@field tick integer the buffer's changedtick when the question was asked
---@field row integer 0-based start row of the replaced text
---@field col integer 0-based start byte column
---@field end_row integer 0-based end row
---@field end_col integer 0-based end byte column, exclusive
---@field old_text string the text the edit replaces (empty for an insertion)
---@field new_text string
---@field edit table the LSP TextEdit as the server sent it
---@field offset_encoding string the client's position encoding
---@field source? string the server's `source`, when it gave one (e.g. "rename")

---@class (private) memosight.NextEditState
---@field augroup integer
---@field timer? uv.uv_timer_t
---@field request? {client: vim.lsp.Client, id: integer}
---@field asked_tick? integer changedtick of the last question sent
---@field proposal? memosight.NextEditProposal

---@type table<integer, memosight.NextEditState>
local buffers = {}

---@param value any
---@return boolean
local function is_count(value)
  return type(value) == "number" and value >= 0 and value == math.floor(value)
end

---@param pos any
---@return boolean
local function is_position(pos)
  return type(pos) == "table" and is_count(pos.line) and is_count(pos.character)
end

--- Buffer text between two 0-based byte positions; nil when the range is not in the buffer.
---@return string?
local function text_at(bufnr, srow, scol, erow, ecol)
  -- The range comes from an answer about an earlier buffer: it may be out of bounds now.
  local ok, lines = pcall(api.nvim_buf_get_text, bufnr, srow, scol, erow, ecol, {})
  return ok and table.concat(lines, "\n") or nil
end

--- One edit of an answer as a proposal, or nil when it is malformed, outside the buffer or
--- changes nothing.
---@param bufnr integer
---@param edit any
---@param encoding string
---@param tick integer
---@return memosight.NextEditProposal?
local function to_proposal(bufnr, edit, encoding, tick)
  local range = type(edit) == "table" and edit.range
  if type(range) ~= "table" or not is_position(range.start) or not is_position(range["end"]) then
    return nil
  end
  if type(edit.newText) ~= "string" then
    return nil
  end
  local line_count = api.nvim_buf_line_count(bufnr)
  local function byte_pos(pos)
    if pos.line >= line_count then
      -- The end of the last line stands for "the start of the line after it" (LSP allows it).
      if pos.line > line_count or pos.character > 0 then
        return nil
      end
      local last = api.nvim_buf_get_lines(bufnr, line_count - 1, line_count, false)[1] or ""
      return line_count - 1, #last
    end
    local line = api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, false)[1] or ""
    return pos.line, suggestion.byte_col(line, pos.character, encoding)
  end
  local row, col = byte_pos(range.start)
  local end_row, end_col = byte_pos(range["end"])
  if not row or not end_row or end_row < row or (end_row == row and end_col < col) then
    return nil
  end
  local old_text = text_at(bufnr, row, col, end_row, end_col)
  if not old_text or old_text == edit.newText then
    return nil
  end
  return {
    bufnr = bufnr,
    tick = tick,
    row = row,
    col = col,
    end_row = end_row,
    end_col = end_col,
    old_text = old_text,
    new_text = edit.newText,
    edit = { range = vim.deepcopy(range), newText = edit.newText },
    offset_encoding = encoding,
  }
end

--- The edit to show from a `memosight/nextEdit` answer: the first at or after `cursor`, else the
--- first; nil when the answer holds none that fits the buffer.
---@param bufnr integer
---@param result any the answer
---@param encoding string the client's offset encoding
---@param tick integer the changedtick the answer is about
---@param cursor? integer[] {row, col}, 0-based
---@return memosight.NextEditProposal?
function M.choose(bufnr, result, encoding, tick, cursor)
  if type(result) ~= "table" or type(result.edits) ~= "table" then
    return nil
  end
  local first, after
  for _, edit in ipairs(result.edits) do
    local p = to_proposal(bufnr, edit, encoding, tick)
    if p then
      first = first or p
      if not after and cursor and (p.row > cursor[1] or (p.row == cursor[1] and p.col >= cursor[2])) then
        after = p
      end
    end
  end
  local chosen = after or first
  if chosen and type(result.source) == "string" then
    chosen.source = result.source
  end
  return chosen
end

---@return boolean
local function insert_mode()
  return api.nvim_get_mode().mode:match("^i") ~= nil
end

---@param st memosight.NextEditState
local function cancel_request(st)
  if st.request then
    pcall(client_call, st.request.client, "cancel_request", st.request.id)
    st.request = nil
  end
end

--- Forgets the buffer's proposal and erases it.
---@param bufnr integer
local function drop(bufnr)
  local st = buffers[bufnr]
  if st then
    st.proposal = nil
  end
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

--- A short description for the hint, e.g. "rename to sum_all".
---@param p memosight.NextEditProposal
---@return string
local function describe(p)
  local new_first = vim.split(p.new_text, "\n", { plain = true })[1]
  if #new_first > 40 then
    new_first = new_first:sub(1, 39) .. "…"
  end
  if p.new_text == "" then
    return "delete"
  elseif p.old_text == "" then
    return "insert " .. new_first
  elseif p.old_text:match("^[%a_][%w_]*$") and p.new_text:match("^[%a_][%w_]*$") then
    return "rename to " .. p.new_text
  end
  return "change to " .. new_first
end

--- Draws a proposal: an insertion at the cursor in insert mode as ghost text (as completions
--- are drawn); anything else as the old text struck through, the new text after it, and a hint
--- at the end of the line naming the key.
---@param p memosight.NextEditProposal
local function draw(p)
  api.nvim_buf_clear_namespace(p.bufnr, M.ns, 0, -1)
  local lines = vim.split(p.new_text, "\n", { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], M.hl.text } }
  end
  local cursor = cursor_in(p.bufnr)
  local insert = insert_mode()
  local at_cursor = insert and p.old_text == "" and cursor ~= nil and cursor[1] == p.row and cursor[2] == p.col
  if p.old_text ~= "" then
    api.nvim_buf_set_extmark(p.bufnr, M.ns, p.row, p.col, {
      end_row = p.end_row,
      end_col = p.end_col,
      hl_group = M.hl.delete,
    })
  end
  if p.new_text ~= "" then
    api.nvim_buf_set_extmark(p.bufnr, M.ns, p.end_row, p.end_col, {
      virt_text = { { lines[1], M.hl.text } },
      virt_text_pos = "inline",
      virt_lines = #virt_lines > 0 and virt_lines or nil,
      hl_mode = "combine",
    })
  end
  if not at_cursor then
    api.nvim_buf_set_extmark(p.bufnr, M.ns, p.row, 0, {
      virt_text = { { ("  → %s (%s)"):format(describe(p), M.key_hint(insert)), M.hl.hint } },
      virt_text_pos = "eol",
      hl_mode = "combine",
    })
  end
end

--- The buffer's proposal while it still stands, else nil (and it is dropped).
---@param bufnr integer
---@return memosight.NextEditProposal?
function M.current(bufnr)
  local st = buffers[bufnr]
  local p = st and st.proposal
  if not p then
    return nil
  end
  if not api.nvim_buf_is_valid(bufnr) or api.nvim_buf_get_changedtick(bufnr) ~= p.tick
    or text_at(bufnr, p.row, p.col, p.end_row, p.end_col) ~= p.old_text then
    drop(bufnr)
    return nil
  end
  return p
end

--- Shows a proposal for `bufnr` as if the server had answered `result` (also used by the
--- request's callback); returns the proposal shown, nil when the answer holds none.
---@param bufnr integer
---@param result any
---@param encoding string
---@return memosight.NextEditProposal?
function M.show(bufnr, result, encoding)
  local st = buffers[bufnr]
  if not st then
    return nil
  end
  local p = M.choose(bufnr, result, encoding, api.nvim_buf_get_changedtick(bufnr), cursor_in(bufnr))
  st.proposal = p
  if p then
    draw(p)
  else
    drop(bufnr)
  end
  return p
end

--- Asks the server for the next edit at the cursor, unless a completion ghost is shown.
---@param bufnr integer
local function request(bufnr)
  local st = buffers[bufnr]
  local client = M.get_client(bufnr)
  if not st or not client or not cursor_in(bufnr) or M.ghost_shown(bufnr) then
    return
  end
  cancel_request(st)
  local tick = api.nvim_buf_get_changedtick(bufnr)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = vim.lsp.util.make_position_params(0, client.offset_encoding).position,
  }
  st.asked_tick = tick
  local id
  local ok, req_id = client_call(client, "request", "memosight/nextEdit", params, function(err, result)
    if st.request and st.request.id == id then
      st.request = nil
    end
    -- Answers about text no longer on screen, or to a detached buffer, are dropped.
    if err or buffers[bufnr] ~= st or not api.nvim_buf_is_valid(bufnr) then
      return
    end
    if api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return
    end
    if M.ghost_shown(bufnr) then
      st.asked_tick = nil -- ask again once the ghost is gone (leaving insert mode)
      return
    end
    M.show(bufnr, result, client.offset_encoding)
  end, bufnr)
  id = req_id
  if ok then
    st.request = { client = client, id = req_id }
  end
end

--- Drops the proposal, cancels a question in flight and asks again after the pause.
---@param bufnr integer
local function schedule(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  cancel_request(st)
  st.timer = st.timer or assert(uv.new_timer())
  st.timer:stop()
  st.timer:start(M.debounce_ms, 0, vim.schedule_wrap(function()
    if buffers[bufnr] == st then
      request(bufnr)
    end
  end))
end

--- Draws the proposal again for the mode and cursor now (insert mode shows an insertion at the
--- cursor as ghost text, normal mode with a hint), or drops it when it no longer stands.
---@param bufnr integer
local function redraw(bufnr)
  local p = M.current(bufnr)
  if p then
    draw(p)
  end
end

---@param bufnr integer
function M.attach(bufnr)
  if buffers[bufnr] then
    return
  end
  local group = api.nvim_create_augroup("memosight.next_edit." .. bufnr, { clear = true })
  -- The text as loaded counts as asked about: with no edit there is nothing to follow up.
  buffers[bufnr] = { augroup = group, asked_tick = api.nvim_buf_get_changedtick(bufnr) }
  -- Every change drops the proposal and cancels the question in flight: both were about the
  -- text before it.
  api.nvim_create_autocmd({ "TextChanged", "TextChangedI", "TextChangedP" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      local st = buffers[bufnr]
      if st and st.asked_tick == api.nvim_buf_get_changedtick(bufnr) then
        return -- no change since the last question (TextChanged can fire on entering a buffer)
      end
      drop(bufnr)
      schedule(bufnr)
    end,
  })
  api.nvim_create_autocmd("InsertLeave", {
    group = group,
    buffer = bufnr,
    callback = function()
      local st = buffers[bufnr]
      if M.current(bufnr) then
        redraw(bufnr)
      elseif st and st.asked_tick ~= api.nvim_buf_get_changedtick(bufnr) then
        schedule(bufnr)
      end
    end,
  })
  api.nvim_create_autocmd({ "InsertEnter", "CursorMoved", "CursorMovedI" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      if buffers[bufnr] and buffers[bufnr].proposal then
        redraw(bufnr)
      end
    end,
  })
  api.nvim_create_autocmd("BufLeave", {
    group = group,
    buffer = bufnr,
    callback = function()
      local st = buffers[bufnr]
      if st then
        if st.timer then
          st.timer:stop()
        end
        if st.request then
          st.asked_tick = nil -- its answer will not come: ask again on return
        end
        cancel_request(st)
      end
      drop(bufnr)
    end,
  })
end

---@param bufnr integer
function M.detach(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  cancel_request(st)
  drop(bufnr)
  compat.release(st)
  buffers[bufnr] = nil
end

--- Moves the cursor to the proposal and applies it; false when there is none (or it no longer
--- stands).
---@param bufnr integer
---@return boolean applied
function M.apply(bufnr)
  local p = M.current(bufnr)
  if not p then
    return false
  end
  drop(bufnr)
  -- apply_text_edits marks up the edits it is given: hand it a copy.
  vim.lsp.util.apply_text_edits({ vim.deepcopy(p.edit) }, bufnr, p.offset_encoding)
  local lines = vim.split(p.new_text, "\n", { plain = true })
  local row = p.row + #lines - 1
  local col = (#lines == 1 and p.col or 0) + #lines[#lines]
  if not insert_mode() and col > 0 then
    col = col - 1 -- normal mode: on the last character of the new text
  end
  local win = vim.fn.bufwinid(bufnr)
  if win ~= -1 then
    pcall(api.nvim_win_set_cursor, win, { row + 1, col })
  end
  return true
end

--- Hides the proposal until the next change; false when there is none.
---@param bufnr integer
---@return boolean dismissed
function M.dismiss(bufnr)
  if not M.current(bufnr) then
    return false
  end
  drop(bufnr)
  return true
end

return M
