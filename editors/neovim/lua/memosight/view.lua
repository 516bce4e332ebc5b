--- A read-only scratch buffer in a floating window, closed with q or <Esc>.

local api = vim.api

local M = {}

--- Opens `lines` in a float titled `title`; returns the buffer. The buffer variable
--- `memosight_view` holds `kind` so tests and users can find it.
---@param kind string
---@param title string
---@param lines string[]
---@return integer bufnr
function M.open(kind, title, lines)
  local bufnr = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.bo[bufnr].modifiable = false
  vim.bo[bufnr].bufhidden = "wipe"
  vim.bo[bufnr].filetype = "memosight"
  vim.b[bufnr].memosight_view = kind

  local width = #title + 4
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line))
  end
  width = math.min(width, math.max(20, math.floor(vim.o.columns * 0.8)))
  local height = math.min(#lines, math.max(3, math.floor(vim.o.lines * 0.8)))
  local win = api.nvim_open_win(bufnr, true, {
    relative = "editor",
    width = width,
    height = math.max(height, 1),
    row = math.floor((vim.o.lines - height) / 2) - 1,
    col = math.floor((vim.o.columns - width) / 2),
    style = "minimal",
    border = "rounded",
    title = " " .. title .. " ",
  })
  vim.wo[win].wrap = false
  for _, key in ipairs({ "q", "<Esc>" }) do
    vim.keymap.set("n", key, "<Cmd>close<CR>", { buffer = bufnr, nowait = true })
  end
  return bufnr
end

return M
