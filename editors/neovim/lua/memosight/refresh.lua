--- The server's `memosight/completionUpdated`: a suggestion shown early (what the model had
--- verified by `completion.firstResponseMs`) grew once decoding ended. Where nothing changed since
--- (same buffer version, cursor still there, insert mode), the ghost text asks again and shows the
--- whole suggestion without another keystroke.

local api = vim.api

local M = {}

--- Set by init: asks the ghost-text path in use to request again for a buffer.
---@type fun(bufnr: integer)
M.refresh = function() end

--- Times a suggestion was asked for again (for tests and :checkhealth).
M.count = 0

---@param params table
---@param client vim.lsp.Client?
---@return integer? bufnr the current buffer, when the update is about where its cursor is now
function M.target(params, client)
  local doc, pos = type(params) == "table" and params.textDocument, type(params) == "table" and params.position
  if type(doc) ~= "table" or type(doc.uri) ~= "string" or type(pos) ~= "table" or not client then
    return nil
  end
  local bufnr = api.nvim_get_current_buf()
  if vim.uri_from_bufnr(bufnr) ~= doc.uri or not api.nvim_get_mode().mode:match("^i") then
    return nil
  end
  local version = vim.lsp.util.buf_versions[bufnr]
  if type(doc.version) == "number" and version ~= doc.version then
    return nil -- typed since: that keystroke's own request answers
  end
  local here = vim.lsp.util.make_position_params(0, client.offset_encoding).position
  if here.line ~= pos.line or here.character ~= pos.character then
    return nil
  end
  return bufnr
end

--- The notification handler (registered in the client config).
---@param params table
---@param ctx table
function M.handler(_, params, ctx)
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  local bufnr = M.target(params, client)
  if bufnr then
    M.count = M.count + 1
    M.refresh(bufnr)
  end
end

return M
