--- Small helpers the ghost text and the next edits share: calling a client method across
--- Neovim versions, where the cursor is in a buffer, and letting go of a buffer's state.

local api = vim.api

local M = {}

--- Calls `client[method]` as this Neovim version expects: a method call (`client:request`)
--- from 0.11 on, a plain function call before.
---@param client vim.lsp.Client
---@param method string
function M.client_call(client, method, ...)
  if vim.fn.has("nvim-0.11") == 1 then
    return client[method](client, ...)
  end
  return client[method](...)
end

--- Cursor of the current window as {row, col}, 0-based, when it shows `bufnr`; else nil.
---@param bufnr integer
---@return integer[]?
function M.cursor_in(bufnr)
  if api.nvim_get_current_buf() ~= bufnr then
    return nil
  end
  local cursor = api.nvim_win_get_cursor(0)
  return { cursor[1] - 1, cursor[2] }
end

--- Closes a buffer state's debounce timer and deletes its autocommand group: what detaching
--- a buffer lets go of, whichever feature attached it.
---@param st { timer: uv.uv_timer_t?, augroup: integer }
function M.release(st)
  if st.timer and not st.timer:is_closing() then
    st.timer:stop()
    st.timer:close()
  end
  pcall(api.nvim_del_augroup_by_id, st.augroup)
end

return M
