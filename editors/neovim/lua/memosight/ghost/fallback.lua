--- The plugin's own ghost text for Neovim 0.10/0.11 (or when forced): asks the server for
--- textDocument/inlineCompletion after a pause in typing and draws the answer with extmarks,
--- the first line inline at the cursor and the rest as virtual lines below it.

local suggestion = require("memosight.suggestion")

local api = vim.api
local compat = require("memosight.compat")
local client_call, cursor_in = compat.client_call, compat.cursor_in
local uv = vim.uv or vim.loop

local M = {}

M.name = "fallback"
M.ns = api.nvim_create_namespace("memosight.ghost_text")
M.hl_group = "MemoSightGhostText"

--- Set by init: the client serving a buffer, and the debounce in ms.
---@type fun(bufnr: integer): vim.lsp.Client?
M.get_client = function()
  return nil
end
M.debounce_ms = 150

---@class (private) memosight.FallbackState
---@field augroup integer
---@field timer? uv.uv_timer_t
---@field request? {client: vim.lsp.Client, id: integer}
---@field current? memosight.Suggestion the one shown
---@field items? memosight.Suggestion[] every usable item of the last answer, in its order
---@field index? integer which of `items` is shown

---@type table<integer, memosight.FallbackState>
local buffers = {}

---@return boolean
function M.available()
  return true
end

---@param bufnr integer
local function clear(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  if st.timer then
    st.timer:stop()
  end
  if st.request then
    pcall(client_call, st.request.client, "cancel_request", st.request.id)
    st.request = nil
  end
  st.current, st.items, st.index = nil, nil, nil
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

---@param s memosight.Suggestion
local function draw(s)
  api.nvim_buf_clear_namespace(s.bufnr, M.ns, 0, -1)
  local lines = vim.split(s.text, "\n", { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], M.hl_group } }
  end
  local first, after = lines[1], nil
  if s.kept_at then -- the kept code shows as it is, with the rest of the line after it
    first, after = lines[1]:sub(1, s.kept_at), lines[1]:sub(s.kept_at + 1 + s.end_col - s.col)
  end
  api.nvim_buf_set_extmark(s.bufnr, M.ns, s.row, s.col, {
    virt_text = { { first, M.hl_group } },
    virt_text_pos = "inline",
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = "combine",
  })
  if after and after ~= "" then
    api.nvim_buf_set_extmark(s.bufnr, M.ns, s.row, s.end_col, {
      virt_text = { { after, M.hl_group } },
      virt_text_pos = "inline",
      hl_mode = "combine",
    })
  end
end

---@param bufnr integer
---@param client vim.lsp.Client
---@param item table lsp.InlineCompletionItem
---@param cursor integer[]
---@return memosight.Suggestion?
local function to_suggestion(bufnr, client, item, cursor)
  local text = item.insertText
  if type(text) == "table" then
    text = text.value
  end
  if type(text) ~= "string" then
    return nil
  end
  local range
  if item.range then
    local r, enc = item.range, client.offset_encoding
    local function byte(pos)
      local line = api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, false)[1] or ""
      return suggestion.byte_col(line, pos.character, enc)
    end
    range = { r.start.line, byte(r.start), r["end"].line, byte(r["end"]) }
  end
  return suggestion.from_item(bufnr, cursor, text, range)
end

---@param bufnr integer
local function request(bufnr)
  local st = buffers[bufnr]
  local client = M.get_client(bufnr)
  local cursor = cursor_in(bufnr)
  if not st or not client or not cursor or not api.nvim_get_mode().mode:match("^i") then
    return
  end
  local tick = api.nvim_buf_get_changedtick(bufnr)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 2 } -- Automatic
  local ok, id = client_call(
    client,
    "request",
    "textDocument/inlineCompletion",
    params,
    function(err, result)
      if st.request and st.request.id == id then
        st.request = nil
      end
      -- Drop answers to questions that no longer stand.
      local now = cursor_in(bufnr)
      if err or not result or not now or not vim.deep_equal(now, cursor) then
        return
      end
      if api.nvim_buf_get_changedtick(bufnr) ~= tick or not api.nvim_get_mode().mode:match("^i") then
        return
      end
      -- Every usable item is kept for cycling, in the server's order (its first is its best).
      local items = type(result) == "table" and (result.items or result) or {}
      st.items = {}
      for _, item in ipairs(type(items) == "table" and items or {}) do
        local s = type(item) == "table" and to_suggestion(bufnr, client, item, cursor)
        if s then
          st.items[#st.items + 1] = s
        end
      end
      st.index = 1
      local s = st.items[1]
      st.current = s
      if s then
        draw(s)
      else
        api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
      end
    end,
    bufnr
  )
  if ok then
    st.request = { client = client, id = id }
  end
end

--- A suggestion advanced past `typed` (its own text, typed up to `col`), or nil when the typed
--- text is not its beginning or is all of it.
---@param s memosight.Suggestion
---@param typed string
---@param col integer
---@return memosight.Suggestion?
local function advanced(s, typed, col)
  if s.text:sub(1, #typed) ~= typed or #typed >= #s.text then
    return nil
  end
  local shift = #typed
  if s.kept_at and shift > s.kept_at then
    return nil -- typed into the kept code: the document reads otherwise now, ask again
  end
  return vim.tbl_extend("force", s, {
    col = col,
    text = s.text:sub(shift + 1),
    end_col = s.end_row == s.row and math.max(s.end_col + shift, col) or s.end_col,
    kept_at = s.kept_at and s.kept_at - shift,
  })
end

--- After an edit: keep showing what is left when the user typed the suggestion's own text. The
--- other items stay for cycling only where they begin with the typed text too.
---@param bufnr integer
---@return boolean kept
local function type_through(bufnr)
  local st = buffers[bufnr]
  local s = st and st.current
  local cursor = cursor_in(bufnr)
  if not s or not cursor or cursor[1] ~= s.row or cursor[2] <= s.col then
    return false
  end
  local typed = api.nvim_buf_get_text(bufnr, s.row, s.col, s.row, cursor[2], {})[1]
  local current = advanced(s, typed, cursor[2])
  if not current then
    return false
  end
  local items = {}
  for _, other in ipairs(st.items or { s }) do
    local kept = other == s and current or advanced(other, typed, cursor[2])
    if kept then
      items[#items + 1] = kept
      if other == s then
        st.index = #items
      end
    end
  end
  st.items, st.current = items, current
  draw(current)
  return true
end

--- Whether the current suggestion still fits the cursor (advancing it when typed along).
---@param bufnr integer
---@return boolean
local function still_shown(bufnr)
  local st = buffers[bufnr]
  local s = st and st.current
  local cursor = cursor_in(bufnr)
  if s and cursor and cursor[1] == s.row and cursor[2] == s.col then
    return true
  end
  return type_through(bufnr)
end

---@param bufnr integer
local function schedule_request(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  if st.request then
    pcall(client_call, st.request.client, "cancel_request", st.request.id)
    st.request = nil
  end
  st.timer = st.timer or assert(uv.new_timer())
  st.timer:stop()
  st.timer:start(M.debounce_ms, 0, vim.schedule_wrap(function()
    request(bufnr)
  end))
end

--- Asks for the buffer's inline completion again at once (the suggestion at the cursor grew).
---@param bufnr integer
function M.refresh(bufnr)
  if buffers[bufnr] then
    request(bufnr)
  end
end

---@param bufnr integer
function M.attach(bufnr)
  if buffers[bufnr] then
    return
  end
  local group = api.nvim_create_augroup("memosight.ghost." .. bufnr, { clear = true })
  buffers[bufnr] = { augroup = group }
  api.nvim_create_autocmd("InsertEnter", {
    group = group,
    buffer = bufnr,
    callback = function()
      clear(bufnr)
      schedule_request(bufnr)
    end,
  })
  -- Typing fires CursorMovedI, then TextChangedI: both keep a suggestion the user types along.
  api.nvim_create_autocmd("CursorMovedI", {
    group = group,
    buffer = bufnr,
    callback = function()
      if not still_shown(bufnr) then
        clear(bufnr)
        schedule_request(bufnr)
      end
    end,
  })
  api.nvim_create_autocmd("TextChangedI", {
    group = group,
    buffer = bufnr,
    callback = function()
      if not still_shown(bufnr) then
        clear(bufnr)
      end
      schedule_request(bufnr)
    end,
  })
  api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      clear(bufnr)
    end,
  })
end

---@param bufnr integer
function M.detach(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  clear(bufnr)
  compat.release(st)
  buffers[bufnr] = nil
end

---@param bufnr integer
---@return string?
function M.text(bufnr)
  local st = buffers[bufnr]
  return st and st.current and st.current.text or nil
end

--- Shows the item `step` places on from the shown one (wrapping), from the last answer; false
--- when there is nothing to cycle (no suggestion, or one item).
---@param bufnr integer
---@param step integer 1: next, -1: previous
---@return boolean cycled
function M.cycle(bufnr, step)
  local st = buffers[bufnr]
  local items = st and st.current and st.items
  if not items or #items < 2 then
    return false
  end
  st.index = ((st.index or 1) - 1 + step) % #items + 1
  st.current = items[st.index]
  draw(st.current)
  return true
end

---@param bufnr integer
---@param pick? fun(text: string): string
---@return boolean
local function accept_with(bufnr, pick)
  local st = buffers[bufnr]
  local s = st and st.current
  if not s then
    return false
  end
  clear(bufnr)
  if pick then
    suggestion.insert(s, pick(s.text), false)
  else
    suggestion.insert(s, s.text, true)
  end
  return true
end

---@param bufnr integer
---@return boolean
function M.accept(bufnr)
  return accept_with(bufnr)
end

---@param bufnr integer
---@return boolean
function M.accept_word(bufnr)
  return accept_with(bufnr, suggestion.next_word)
end

---@param bufnr integer
---@return boolean
function M.accept_line(bufnr)
  return accept_with(bufnr, suggestion.next_line)
end

---@param bufnr integer
---@return boolean
function M.dismiss(bufnr)
  if not M.text(bufnr) then
    return false
  end
  clear(bufnr)
  return true
end

return M
